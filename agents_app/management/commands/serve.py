"""Run Helix as one process tree: Daphne for HTTP and WebSocket, a Celery worker, and Celery
beat for the periodic expired-session sweep."""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

WORKER = ("celery", "-A", "helix_project", "worker", "--loglevel", "INFO")
# The scheduler of periodic tasks (the expired-session sweep, `CELERY_BEAT_SCHEDULE`).
BEAT = ("celery", "-A", "helix_project", "beat", "--loglevel", "INFO")
ASGI_APPLICATION = "helix_project.asgi:application"
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
        """Start both children, stop both on SIGINT or SIGTERM or when either exits."""
        self.stopping = False
        children: dict[str, subprocess.Popen] = {}
        try:
            sized = () if concurrency is None else ("--concurrency", str(concurrency))
            children["celery worker"] = start(*WORKER, *sized)
            children["celery beat"] = start(
                *BEAT, "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")
            )
            children["daphne"] = start("daphne", "-b", host, "-p", str(port), ASGI_APPLICATION)
            self.stdout.write(
                ", ".join(f"{name} pid {child.pid}" for name, child in children.items())
            )
            netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self.stdout.write(f"Helix is starting at http://{netloc}/admin/ (Ctrl-C stops it)")
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


def start(module: str, *args: str) -> subprocess.Popen:
    """Start `python -m module args` as the leader of a new process group."""
    # Its own group keeps a terminal's Ctrl-C from reaching the child directly (serve sends it
    # SIGTERM instead, see `terminate`), and lets `reap` kill it along with its pool processes.
    return subprocess.Popen([sys.executable, "-m", module, *args], process_group=0)
