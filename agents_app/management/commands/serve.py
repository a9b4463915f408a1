"""Run Helix as one process tree: Daphne for HTTP and WebSocket, a Celery worker, and Celery
beat for the periodic expired-session sweep.

Daphne serves the site's ``ASGI_APPLICATION``; the worker and beat are of the Celery app
``HELIX["CELERY_APP"]`` names (by default the settings module's package, as `celery -A` takes
it); beat keeps its schedule where the site's Celery settings say (``beat_schedule_filename``).

On a database with no user, the first start makes a superuser and prints its login, once
(`agents_app.operations.first_run`); every start prints the site's addresses.
"""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import NoReverseMatch, reverse

from agents_app import conf
from agents_app.definitions.registry import get_registry
from agents_app.operations.first_run import FirstLogin, first_superuser_create

# Seconds a child has to exit once told to, before its whole process group is killed.
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.2


class Command(BaseCommand):
    help = (
        "Serve Helix with Daphne, a Celery worker and Celery beat until one stops or a signal "
        "arrives."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the address Daphne binds to and the size of the worker pool."""
        parser.add_argument("--host", default="127.0.0.1", help="address Daphne binds to")
        parser.add_argument("--port", type=int, default=8000, help="port Daphne listens on")
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="steps the Celery worker runs at once (default HELIX_WORKER_CONCURRENCY)",
        )

    def handle(
        self, *args: object, host: str, port: int, concurrency: int | None, **options: object
    ) -> None:
        """Start the children, stop them all on SIGINT or SIGTERM or when one exits.

        First make the first superuser if the database has no user, and print its login before
        anything can fail, as it is never shown again.
        """
        if plan := unapplied_migrations():
            raise CommandError(
                f"{len(plan)} migration(s) not applied, the first {plan[0]}: "
                "run `python manage.py migrate` first."
            )
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.welcome(site=f"http://{netloc}", login=first_superuser_create())
        self.stopping = False
        children: dict[str, subprocess.Popen] = {}
        try:
            sized = () if concurrency is None else ("--concurrency", str(concurrency))
            celery = ("celery", "-A", conf.celery_app())
            children["celery worker"] = start(*celery, "worker", "--loglevel", "INFO", *sized)
            # The scheduler of periodic tasks (the sweeps of `CELERY_BEAT_SCHEDULE`).
            children["celery beat"] = start(*celery, "beat", "--loglevel", "INFO")
            children["daphne"] = start(
                "daphne", "-b", host, "-p", str(port), conf.asgi_application()
            )
            self.stdout.write(
                ", ".join(f"{name} pid {child.pid}" for name, child in children.items())
            )
            self.stdout.flush()
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda _signum, _frame: self.terminate(children))
            while all(child.poll() is None for child in children.values()):
                time.sleep(POLL_INTERVAL)
        finally:
            self.terminate(children)
            self.reap(children)
        failed = [
            f"{name} exited with {c.returncode}" for name, c in children.items() if c.returncode
        ]
        if failed:
            raise CommandError("; ".join(failed))

    def welcome(self, *, site: str, login: FirstLogin | None) -> None:
        """Write the site's addresses; with `login`, also the login and how to make more users.

        The password is written only from `login`, which only the start that made the user has.
        """
        agent_types = get_registry().registered_types()
        pages = [
            ("landing page", address(site, "helix-landing"), ""),
            (
                "chat",
                address(site, "chat-page", agent_types[0]) if agent_types else None,
                "  (a page per agent; the landing page lists them)",
            ),
            ("admin", address(site, "admin:index"), ""),
            ("API docs", address(site, "api-docs"), ""),
        ]
        self.stdout.write(f"Helix is starting at {site}/ (Ctrl-C stops it)")
        for name, url, note in pages:
            if url is not None:
                self.stdout.write(f"  {name:<14}{url}{note}")
        if login is not None:
            sign_in = address(site, "helix-login") or address(site, "admin:login") or f"{site}/"
            users = address(site, "admin:auth_user_add")
            self.stdout.write(
                "First start: the database had no user, so Helix made this superuser. The "
                "password is shown only now; change it in the admin once signed in.\n"
                f"  {'username':<14}{login.username}\n"
                f"  {'password':<14}{login.password}\n"
                f"  {'sign in at':<14}{sign_in}\n"
                "More users: `python manage.py createsuperuser` makes staff; the admin's Users "
                f"page{f' ({users})' if users else ''} makes ordinary users, who sign in at "
                f"{sign_in} to chat."
            )
        self.stdout.flush()

    def terminate(self, children: dict[str, subprocess.Popen]) -> None:
        """Send SIGTERM, once, to the children still running."""
        # SIGTERM, not a forwarded SIGINT: both stop gracefully on it, and Celery exits with
        # status 1 after a SIGINT, which would make every Ctrl-C look like a failure.
        if not self.stopping:
            self.stopping = True
            for child in children.values():
                child.terminate()

    def reap(self, children: dict[str, subprocess.Popen]) -> None:
        """Wait for the children to exit, killing the process group of any that lags."""
        deadline = time.monotonic() + STOP_TIMEOUT
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop within {STOP_TIMEOUT:g} s; killing it")
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def unapplied_migrations() -> list[str]:
    """Return the migrations the default database still lacks, as `app.name`, in order."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def address(site: str, name: str, *args: str) -> str | None:
    """Return the URL of the page named `name` on `site`, or None if the URLconf has none."""
    try:
        return site + reverse(name, args=args)
    except NoReverseMatch:
        return None


def start(module: str, *args: str) -> subprocess.Popen:
    """Start `python -m module args` as the leader of a new process group."""
    # Its own group keeps a terminal's Ctrl-C from reaching the child directly (serve sends it
    # SIGTERM instead, see `terminate`), and lets `reap` kill it along with its pool processes.
    return subprocess.Popen([sys.executable, "-m", module, *args], process_group=0)
