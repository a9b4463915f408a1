"""Faults in the serving side (DESIGN invariants 5 and 8): Daphne processes stopped and killed
mid-stream, and Redis restarted under live streams. Clients resume from their last sequence and
end with exactly the stored log; the channel layer is only a doorbell, so losing Redis costs
readers latency, never chunks.

A writer process writes the stream as a worker would (`tests.streams_app.live_writer`); clients
are real WebSocket and SSE clients that reconnect from their last sequence after each drop.
"""

import asyncio
import signal
import subprocess
import time

import pytest
import redis

from sessions_app.stores import get_session_store
from tests.live import free_port, live_env
from tests.streams_app.conftest import session_cookie
from tests.streams_app.test_live import (
    Daphne,
    Received,
    assert_got_the_stored_log,
    sse_client,
    start_writer,
    websocket_client,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backends")]

KILLS_PER_SIGNAL, REDIS_RESTARTS = 10, 3
# Long enough to outlast twenty Daphne restarts (about 40 s) on a loaded machine.
KILLED_STREAM_CHUNKS = 3000
STALL_TIMEOUT = 30.0


@pytest.fixture
def owned_session(owner) -> str:
    """Return a session `owner` owns; its stream is the one the writer writes."""
    return get_session_store().create_session(agent_type="researcher", owner_id=owner.pk).session_id


@pytest.fixture
def cookie(owner) -> str:
    return session_cookie(owner)


class Balancer:
    """Two Daphne processes; `port` is the one clients reach now, as a load balancer's pick."""

    def __init__(self, env: dict[str, str], tmp_path) -> None:
        self.servers = [Daphne(env, tmp_path / f"daphne-{n}.log") for n in range(2)]
        self.current = 0

    @property
    def port(self) -> int:
        return self.servers[self.current].port

    def take_down(self, signum: int) -> None:
        """Send clients to the other server, stop this one with `signum`, and start it again."""
        victim = self.servers[self.current]
        self.current = 1 - self.current
        victim.process.send_signal(signum)
        victim.process.wait(timeout=30)
        victim.start()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


async def progress(*clients: Received) -> None:
    """Return once every client has received another chunk."""
    seen = [client.last for client in clients]
    async with asyncio.timeout(STALL_TIMEOUT):
        while any(
            client.last == last and client.final is None
            for client, last in zip(clients, seen, strict=True)
        ):
            await asyncio.sleep(0.02)


async def test_clients_resume_across_daphne_stopped_and_killed_mid_stream(
    tmp_path, cookie, owned_session, figure
):
    env = live_env(tmp_path)
    balancer = Balancer(env, tmp_path)
    for server in balancer.servers:
        server.start()
    writer = start_writer(env, owned_session, count=KILLED_STREAM_CHUNKS, pause=0.01)
    by_socket, by_sse = Received(), Received()
    clients = asyncio.gather(
        websocket_client(balancer, cookie, owned_session, received=by_socket),
        sse_client(balancer, cookie, owned_session, received=by_sse),
    )
    mid_stream = {signal.SIGTERM: 0, signal.SIGKILL: 0}
    try:
        for signum in [signal.SIGTERM, signal.SIGKILL] * KILLS_PER_SIGNAL:
            await progress(by_socket, by_sse)
            mid_stream[signum] += writer.poll() is None
            await asyncio.to_thread(balancer.take_down, signum)
        await asyncio.wait_for(clients, timeout=120)
    finally:
        balancer.stop()

    assert writer.wait(timeout=60) == 0
    await assert_got_the_stored_log(owned_session, by_socket, by_sse, count=KILLED_STREAM_CHUNKS)
    for signum, count in mid_stream.items():
        figure(count, KILLS_PER_SIGNAL, f"Daphne {signum.name} mid-stream, clients lost nothing")
    assert mid_stream == {signal.SIGTERM: KILLS_PER_SIGNAL, signal.SIGKILL: KILLS_PER_SIGNAL}
    assert by_socket.connections > 2 * KILLS_PER_SIGNAL
    assert by_sse.connections > 2 * KILLS_PER_SIGNAL


class RedisServer:
    """A Redis of this test's own, which it can kill and start again on the same port."""

    def __init__(self, tmp_path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.directory = tmp_path
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the test's Redis did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def own_redis(tmp_path):
    if subprocess.run(["which", "redis-server"], capture_output=True).returncode:
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    if server.process.poll() is None:
        server.kill()


async def test_every_client_gets_the_whole_log_across_redis_restarts(
    tmp_path, cookie, owned_session, own_redis, figure
):
    env = live_env(tmp_path, STREAM_POLL_INTERVAL="0.5")
    env["REDIS_URL"] = own_redis.url
    env.pop("CELERY_BROKER_URL", None)
    daphne = Daphne(env, tmp_path / "daphne.log")
    daphne.start()
    received = [Received() for _ in range(6)]
    clients = asyncio.gather(
        *(websocket_client(daphne, cookie, owned_session, received=r) for r in received[:4]),
        *(sse_client(daphne, cookie, owned_session, received=r) for r in received[4:]),
    )
    writer = start_writer(env, owned_session, pause=0.005)
    restarts = 0
    try:
        for _ in range(REDIS_RESTARTS):
            await progress(*received)
            own_redis.kill()
            await asyncio.sleep(1)
            own_redis.start()
            restarts += writer.poll() is None
        await asyncio.wait_for(clients, timeout=120)
        writer_status = writer.wait(timeout=60)
    finally:
        daphne.stop()

    assert writer_status == 0
    await assert_got_the_stored_log(owned_session, *received)
    figure(
        len(received),
        len(received),
        f"clients ended with the whole log across {restarts} Redis restarts mid-stream",
    )
    assert restarts == REDIS_RESTARTS
