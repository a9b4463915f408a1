"""Shared test configuration: service checks for the whole run (see `tests.services`), and what
lets `make test` run the suite on several xdist workers at once."""

import copy
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.test.utils import override_settings

from tests.agents_app.serving import Serve, serving
from tests.redis_server import RedisServer
from tests.services import PROBLEMS, REQUIRED_SERVICES, database_vendor

_DB_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
}
# Run first under xdist, longest first, so that no worker ends the run alone on one of them.
LONG_FIRST = (
    "tests/faults/",
    "tests/agents_app/test_api_fuzz.py",
    "tests/bench/",
    "tests/browser/",
    "tests/package/",
    "tests/streams_app/test_live.py",
)
# One xdist worker runs these directories' tests one after another: each fault scenario loads the
# whole machine and counts on timing, so two at once would test the machine, not Helix.
SERIAL_DIRECTORIES = ("tests/faults/",)
_FIGURES: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--alone",
        choices=("include", "exclude", "only"),
        default="include",
        help="run the tests marked `alone` with the others (default), not at all, or only them; "
        "`make test` runs the others on xdist workers, then these by themselves",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a run missing a required service (in xdist's controller too, which collects none).

    Then make users cheap to create, and give an xdist worker a Redis of its own.
    """
    for service in REQUIRED_SERVICES:
        if problem := PROBLEMS[service]():
            raise pytest.UsageError(f"{service} is required in this run but {problem}")
    # No test checks a password, and the production hasher spends ~0.3 s per user created.
    override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]).enable()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _use_a_private_redis(config)


def _use_a_private_redis(config: pytest.Config) -> None:
    """Point this xdist worker and its subprocesses at a redis-server of its own.

    Workers share nothing else: each has its own test database and queues. Redis pub/sub ignores
    database numbers, so on a shared server one worker's stream notices and state rings would
    reach another's readers of a session with the same id; and a worker with a short visibility
    timeout would redeliver other workers' unacknowledged steps.
    """
    shared = settings.REDIS_URL
    if not shared or PROBLEMS["redis"]():
        return  # No Redis in this run, or none reachable: the service checks report it.
    if shutil.which("redis-server") is None:
        raise pytest.UsageError(
            "Parallel runs with Redis give each xdist worker a redis-server of its own, and there "
            "is none on PATH: install it, or run without xdist (-n 0)."
        )
    from tests.live import free_port

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not _answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise pytest.UsageError(f"The xdist worker's redis-server did not start on {port}.")
        time.sleep(0.05)
    config.add_cleanup(process.wait)
    config.add_cleanup(process.kill)
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    for layer in layers.values():
        for host in layer.get("CONFIG", {}).get("hosts", []):
            if host.get("address") == shared:
                host["address"] = url
    private = {"REDIS_URL": url, "CHANNEL_LAYERS": layers}
    if shared == settings.CELERY_BROKER_URL:
        private["CELERY_BROKER_URL"] = url
    override_settings(**private).enable()
    from helix_project.celery import app

    app.conf.broker_url = settings.CELERY_BROKER_URL
    # What this worker's subprocesses (Daphne, Celery workers, writers) read.
    os.environ["REDIS_URL"] = url
    if os.environ.get("CELERY_BROKER_URL") == shared:
        os.environ["CELERY_BROKER_URL"] = url


def _answers(url: str) -> bool:
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.ConnectionError:
        return False


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"helix: database {database_vendor()} ({settings.DATABASES['default']['NAME']}); "
        f"required services: {', '.join(sorted(REQUIRED_SERVICES)) or 'none'}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what needs an absent service, or runs in another backend's pass, saying why.

    Keep or drop the tests marked `alone` as `--alone` says. On an xdist worker, put
    `LONG_FIRST` first: xdist hands files out in this order.
    """
    if (alone := config.getoption("alone")) != "include":
        keep = {item: bool(item.get_closest_marker("alone")) == (alone == "only") for item in items}
        config.hook.pytest_deselected(items=[item for item in items if not keep[item]])
        items[:] = [item for item in items if keep[item]]
    problems = {service: PROBLEMS[service]() for service in PROBLEMS}
    database_down = database_vendor() == "postgresql" and problems["postgres"]
    for item in items:
        uses_db = _DB_FIXTURES & set(item.fixturenames) or item.get_closest_marker("django_db")
        if (database_down and uses_db) or (
            item.get_closest_marker("postgres") and problems["postgres"]
        ):
            item.add_marker(pytest.mark.skip(reason=f"postgres: {problems['postgres']}"))
        one = item.get_closest_marker("one_backend")
        if one and one.args[0] != connections["default"].vendor:
            reason = f"runs in the {one.args[0]} pass only: {one.kwargs['reason']}"
            item.add_marker(pytest.mark.skip(reason=reason))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _rank(item.nodeid))


def _rank(nodeid: str) -> int:
    ranks = (rank for rank, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix))
    return next(ranks, len(LONG_FIRST))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist loadfile`, also keep each of `SERIAL_DIRECTORIES` on one worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return next((group for group in SERIAL_DIRECTORIES if path.startswith(group)), path)

    return FileScheduling(config, log)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Leave an empty cache to the next test, if it is the process-local one (not a Redis)."""
    yield
    if settings.CACHES["default"]["BACKEND"].endswith("LocMemCache"):
        cache.clear()


@pytest.fixture(autouse=True)
def _close_connections_of_async_code():
    """Close what async tests left open in asgiref's shared thread, so test databases can drop."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture
def owner(django_user_model):
    """A user who owns the sessions a test creates."""
    return django_user_model.objects.create_user("owner", password="pw")


@pytest.fixture
def stranger(django_user_model):
    """A user who owns nothing, to check isolation."""
    return django_user_model.objects.create_user("stranger", password="pw")


@pytest.fixture
def serve(tmp_path) -> Iterator[Serve]:
    """A `manage.py serve` running on a fresh embedded default, killed afterwards."""
    with serving(tmp_path) as server:
        yield server


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the pass figures a test recorded (`tests/faults`), from its workers' reports too."""
    if report.when == "teardown":
        _FIGURES.extend(value for name, value in report.user_properties if name == "figure")


def pytest_terminal_summary(terminalreporter) -> None:
    if _FIGURES:
        terminalreporter.section("fault injection: pass figures")
        for line in _FIGURES:
            terminalreporter.line(line)


@pytest.fixture
def private_redis(tmp_path) -> Iterator[RedisServer]:
    """A redis-server of this test's own; skipped without one unless the run requires Redis."""
    if shutil.which("redis-server") is None:
        reason = "redis-server is not on PATH"
        if "redis" in REQUIRED_SERVICES:
            pytest.fail(f"redis is required in this run (HELIX_REQUIRE_SERVICES) but {reason}")
        pytest.skip(reason)
    server = RedisServer(tmp_path)
    server.start()
    yield server
    if server.process.poll() is None:
        server.kill()
