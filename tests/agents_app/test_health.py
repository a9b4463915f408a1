"""`/healthz` and `/readyz` (agents_app.health), in process and through Daphne across real
outages: PostgreSQL behind a proxy that is stopped or made to hang, and a private Redis server
that is killed and started again. The machine's own servers are never touched.
"""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client

from agents_app.health import checks
from tests.live import free_port, live_env
from tests.live_clients import Daphne
from tests.redis_server import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = ["database", "migrations", "channelLayer", "broker"]
TIMEOUT = 1.0  # The readiness timeout of the Daphne processes here.


@pytest.fixture(autouse=True)
def _unproven_migrations(monkeypatch):
    """Start each test with no migration check cached, as a new process does."""
    monkeypatch.setattr(checks, "_migrated", set())


def ready_answer(server: Daphne, status: int, within: float = 20) -> httpx.Response:
    """Return the first `/readyz` answer with `status`; fail if none comes within `within` s."""
    deadline = time.monotonic() + within
    while True:
        response = httpx.get(f"http://127.0.0.1:{server.port}/readyz", timeout=10)
        if response.status_code == status:
            return response
        assert time.monotonic() < deadline, f"/readyz still answers {response.text}"
        time.sleep(0.2)


def failed(response: httpx.Response) -> list[str]:
    error = response.json()["error"]
    assert error["code"] == "not-ready"
    assert error["message"] == f"Not ready: {', '.join(error['details']['failed'])}."
    return error["details"]["failed"]


# In process


def test_healthz_answers_that_the_process_is_up():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.parametrize("method", ["post", "put", "delete"])
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_endpoints_take_get_and_head_only_and_answer_others_in_json(path, method):
    client = Client(enforce_csrf_checks=True)

    assert client.head(path).status_code == 200
    response = getattr(client, method)(path)

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json()["error"]["code"] == "method-not-allowed"


def test_readyz_answers_200_with_each_check_on_a_healthy_system():
    response = Client().get("/readyz")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    assert list(body["checks"]) == CHECKS
    assert all(check["ok"] and check["ms"] >= 0 for check in body["checks"].values())


@contextlib.contextmanager
def unapplied(app_label: str) -> Iterator[str]:
    """Mark the latest migration of `app_label` unapplied, and applied again on exit."""
    leaf = next(
        name for app, name in MigrationLoader(connection).graph.leaf_nodes() if app == app_label
    )
    recorder = MigrationRecorder(connection)
    recorder.record_unapplied(app_label, leaf)
    try:
        yield f"{app_label}.{leaf}"
    finally:
        recorder.record_applied(app_label, leaf)


def test_readyz_answers_503_naming_a_migration_left_to_apply():
    with unapplied("sessions_app") as migration:
        response = Client().get("/readyz")

    assert response.status_code == 503
    error = response.json()["error"]
    assert error["details"]["failed"] == ["migrations"]
    assert migration in error["details"]["checks"]["migrations"]["error"]
    assert error["details"]["checks"]["database"]["ok"]


def test_migrations_once_found_applied_are_not_checked_again():
    assert Client().get("/readyz").status_code == 200

    with unapplied("sessions_app"):
        response = Client().get("/readyz")

    assert response.status_code == 200


@pytest.fixture
def black_hole() -> Iterator[int]:
    """Return the port of a server that takes connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def test_a_dependency_that_hangs_fails_its_check_within_the_timeout(black_hole, settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{black_hole}/0"]},
        }
    }
    settings.HELIX = {**settings.HELIX, "READINESS_TIMEOUT_SECONDS": 0.5}

    started = time.monotonic()
    response = Client().get("/readyz")
    elapsed = time.monotonic() - started

    assert response.status_code == 503
    details = response.json()["error"]["details"]
    assert details["failed"] == ["channelLayer"]
    assert details["checks"]["channelLayer"]["error"] == "no answer within 0.5 s"
    assert elapsed < 3


# Through Daphne, across outages


class TcpProxy:
    """A TCP proxy to a server on this machine, which a test can stop (the port refuses
    connections, as when the server is down), make hang (it takes connections and never
    answers) and start again on the same port."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.forwarding = True
        self.listener: socket.socket | None = None
        self.accepting: threading.Thread | None = None
        self.sockets: list[socket.socket] = []

    def start(self, *, forwarding: bool = True) -> None:
        """Listen on the port: forwarding to the server, or holding connections unanswered."""
        self.forwarding = forwarding
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.listener.settimeout(0.05)
        self.accepting = threading.Thread(target=self._accept, args=(self.listener,))
        self.accepting.start()

    def stop(self) -> None:
        """Close the port and every connection through it."""
        self.listener = None
        if self.accepting is not None:
            self.accepting.join()
        for open_socket in self.sockets:
            with contextlib.suppress(OSError):
                open_socket.shutdown(socket.SHUT_RDWR)
            open_socket.close()
        self.sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while self.listener is listener:
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                client.settimeout(None)
                self.sockets.append(client)
                if not self.forwarding:
                    continue
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                self.sockets.append(upstream)
                for source, target in ((client, upstream), (upstream, client)):
                    threading.Thread(target=_pipe, args=(source, target), daemon=True).start()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@pytest.fixture
def postgres_proxy() -> Iterator[TcpProxy]:
    database = connection.settings_dict
    assert database["HOST"] in {"127.0.0.1", "localhost"}, "the proxy reaches a local server"
    proxy = TcpProxy(int(database["PORT"] or 5432))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.mark.postgres
def test_readyz_names_the_database_while_postgresql_is_down_or_hangs_and_recovers(
    postgres_proxy, tmp_path
):
    database = connection.settings_dict
    credentials = database["USER"] + (f":{database['PASSWORD']}" if database["PASSWORD"] else "")
    url = f"postgres://{credentials}@127.0.0.1:{postgres_proxy.port}/{database['NAME']}"
    env = live_env(tmp_path, HELIX_READINESS_TIMEOUT_SECONDS=str(TIMEOUT)) | {"DATABASE_URL": url}
    daphne = Daphne(env, tmp_path / "daphne.log")
    daphne.start()
    try:
        ready_answer(daphne, 200)

        postgres_proxy.stop()
        down = ready_answer(daphne, 503)
        live = httpx.get(f"http://127.0.0.1:{daphne.port}/healthz", timeout=10)

        postgres_proxy.start(forwarding=False)
        started = time.monotonic()
        hung = ready_answer(daphne, 503)
        hung_for = time.monotonic() - started

        postgres_proxy.stop()
        postgres_proxy.start()
        back = ready_answer(daphne, 200)
    finally:
        daphne.stop()

    assert failed(down) == ["database"]  # Migrations were found applied before: not again.
    assert "Connection refused" in down.json()["error"]["details"]["checks"]["database"]["error"]
    assert live.status_code == 200
    assert failed(hung) == ["database"]
    assert hung.json()["error"]["details"]["checks"]["database"]["error"] == (
        f"no answer within {TIMEOUT:g} s"
    )
    assert hung_for < TIMEOUT + 2
    assert all(check["ok"] for check in back.json()["checks"].values())


@pytest.mark.parametrize("layer", ["pubsub", "core"])
def test_readyz_names_the_channel_layer_and_broker_while_redis_is_down_and_recovers(
    private_redis, tmp_path, layer
):
    env = live_env(tmp_path, HELIX_READINESS_TIMEOUT_SECONDS=str(TIMEOUT)) | {
        "REDIS_URL": private_redis.url,
        "CELERY_BROKER_URL": private_redis.url,
        "REDIS_CHANNEL_LAYER": layer,
    }
    daphne = Daphne(env, tmp_path / "daphne.log")
    daphne.start()
    try:
        ready = ready_answer(daphne, 200)

        private_redis.kill()
        down = ready_answer(daphne, 503)
        live = httpx.get(f"http://127.0.0.1:{daphne.port}/healthz", timeout=10)

        private_redis.start()
        back = ready_answer(daphne, 200)
    finally:
        daphne.stop()

    assert all(check["ok"] for check in ready.json()["checks"].values())
    assert failed(down) == ["channelLayer", "broker"]
    assert RedisServer.PASSWORD not in down.text
    assert live.status_code == 200
    assert all(check["ok"] for check in back.json()["checks"].values())
