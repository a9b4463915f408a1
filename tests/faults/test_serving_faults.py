"""Faults on the serving side (DESIGN invariants 5 and 8): Daphne stopped (SIGTERM) and killed
(SIGKILL) under live readers, and Redis killed and restarted under live streams.

A writer process writes the stream as a worker would; WebSocket and SSE clients reconnect from
their last sequence after every drop. Each must end with exactly the stored log and the `end`
event: Daphne holds no state a reader needs, and Redis only rings the doorbell, so losing either
costs readers a reconnection or some latency, never a chunk.

The writer writes until the faults are done: the test then stops it and ends the stream with
what it stored, so that every fault lands mid-stream however slowly the servers restart.
"""

import asyncio
import subprocess
from collections.abc import Sequence

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from sessions_app.stores import get_session_store
from streams_app.backends import get_stream_manager
from tests.live import live_env
from tests.live_clients import (
    Daphne,
    Received,
    assert_got_the_stored_log,
    sse_client,
    start_writer,
    websocket_client,
)
from tests.streams_app.conftest import session_cookie
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

KILLS = 10
REDIS_RESTARTS = 3
# More chunks than any run of faults outlasts, 2 ms apart; the test stops the writer first.
ENDLESS = 1_000_000
# How long clients may go without a new chunk before the test calls them stuck.
STALL_TIMEOUT = 30.0


@pytest.fixture
def owned_session(owner) -> str:
    """Return the id of a session `owner` owns; the writer writes its stream."""
    store = get_session_store()
    return store.create_session(agent_type="researcher", owner_id=owner.pk).session_id


@pytest.fixture
def cookie(owner) -> str:
    return session_cookie(owner)


@pytest.fixture
def writer(tmp_path, owned_session):
    """Start nothing; return `start(env)`, which starts the endless writer, killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(env: dict[str, str]) -> subprocess.Popen:
        named = {**env, "PGAPPNAME": writer_name(owned_session)}  # Its connections' name.
        started.append(start_writer(named, owned_session, count=ENDLESS, pause=0.002))
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


async def progress(clients: Sequence[Received], since: Sequence[int]) -> None:
    """Return once every client has received chunks past its sequence in `since`."""
    async with asyncio.timeout(STALL_TIMEOUT):
        while any(c.last <= s for c, s in zip(clients, since, strict=True)):
            await asyncio.sleep(0.02)


async def common_server(servers: Sequence[Daphne], clients: Sequence[Received]) -> Daphne:
    """Return the server every client reads from, once they all read from the same one."""
    async with asyncio.timeout(STALL_TIMEOUT):
        while len(ports := {c.port for c in clients}) != 1 or None in ports:
            await asyncio.sleep(0.02)
    return next(server for server in servers if server.port in ports)


def writer_name(stream_id: str) -> str:
    """Return the name the writer of `stream_id` gives its database connections."""
    return f"helix-test-writer-{stream_id}"


def outlived(application_name: str) -> None:
    """Wait until PostgreSQL has closed the connections of a killed process: a commit the
    process sent just before it died lands until then."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"

    def gone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(query, [application_name])
            return cursor.fetchone()[0] == 0

    wait_for(gone, timeout=10, what=f"the connections of {application_name} to close")


async def end_stream(writer: subprocess.Popen, stream_id: str) -> int:
    """Stop the (still running) writer, end its stream with what it stored; return that count."""
    assert writer.poll() is None, "the writer died mid-stream"
    writer.kill()
    writer.wait()
    await database_sync_to_async(outlived)(writer_name(stream_id))
    manager = get_stream_manager()
    count = (await database_sync_to_async(manager.get_stream_info)(stream_id)).total_chunks
    await database_sync_to_async(manager.end_stream)(stream_id, {"chunks": count})
    return count


async def ended_complete(stream_id: str, clients: Sequence[Received]) -> list[bool]:
    """Return, per client, whether it got exactly the stored log and then the `end` event."""
    stored = await database_sync_to_async(get_stream_manager().get_all_chunks)(stream_id)
    end = {"type": "end", "finalOutput": {"chunks": len(stored)}}
    return [
        client.sequences == [c.sequence for c in stored]
        and client.chunks == [c.chunk for c in stored]
        and client.final == end
        for client in clients
    ]


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
async def test_clients_resume_across_daphne_sigterm_and_sigkill(
    backends, signal, tmp_path, cookie, owned_session, writer, figure
):
    env = live_env(tmp_path)
    servers = [Daphne(env, tmp_path / f"daphne-{n}.log") for n in range(2)]
    await asyncio.gather(*(asyncio.to_thread(server.start) for server in servers))
    take_down = {"SIGTERM": Daphne.terminate, "SIGKILL": Daphne.kill}[signal]
    writing = writer(env)
    clients = [Received(), Received()]
    reading = asyncio.gather(
        websocket_client(servers, cookie, owned_session, received=clients[0]),
        sse_client(servers, cookie, owned_session, received=clients[1]),
    )
    kills_mid_stream = 0
    try:
        since = [0, 0]
        for _ in range(KILLS):
            await progress(clients, since)
            victim = await common_server(servers, clients)
            since = [client.last for client in clients]
            kills_mid_stream += writing.poll() is None
            await asyncio.to_thread(take_down, victim)
            await asyncio.to_thread(victim.start)
        await progress(clients, since)
        count = await end_stream(writing, owned_session)
        await asyncio.wait_for(reading, timeout=60)
    finally:
        reading.cancel()
        for server in servers:
            server.stop()

    complete = await ended_complete(owned_session, clients)
    figure(
        kills_mid_stream if all(complete) else 0,
        KILLS,
        f"Daphne {signal} mid-stream, clients ended with the complete log",
    )
    await assert_got_the_stored_log(owned_session, *clients, count=count)
    assert kills_mid_stream == KILLS
    assert all(client.connections > KILLS for client in clients)


async def test_clients_get_the_whole_log_across_a_redis_restart(
    backends, private_redis, tmp_path, cookie, owned_session, writer, figure
):
    # `live_env` sets this run's Redis over its overrides: point the processes at the private one.
    env = live_env(tmp_path, STREAM_POLL_INTERVAL="0.5") | {"REDIS_URL": private_redis.url}
    daphne = Daphne(env, tmp_path / "daphne.log")
    daphne.start()
    clients = [Received() for _ in range(6)]
    reading = asyncio.gather(
        *(websocket_client(daphne, cookie, owned_session, received=c) for c in clients[:4]),
        *(sse_client(daphne, cookie, owned_session, received=c) for c in clients[4:]),
    )
    writing = writer(env)
    restarts_mid_stream = 0
    try:
        since = [0] * len(clients)
        for _ in range(REDIS_RESTARTS):
            await progress(clients, since)
            since = [client.last for client in clients]
            restarts_mid_stream += writing.poll() is None
            private_redis.kill()
            await asyncio.sleep(1)  # Redis stays down a while, as in a real restart.
            await asyncio.to_thread(private_redis.start)
        await progress(clients, since)
        count = await end_stream(writing, owned_session)
        await asyncio.wait_for(reading, timeout=60)
        assert daphne.process.poll() is None, f"Daphne died:\n{daphne.log.read_text()}"
    finally:
        reading.cancel()
        daphne.stop()

    complete = await ended_complete(owned_session, clients)
    figure(
        sum(complete),
        len(clients),
        f"clients ended with the complete log across {REDIS_RESTARTS} Redis restarts",
    )
    await assert_got_the_stored_log(owned_session, *clients, count=count)
    assert restarts_mid_stream == REDIS_RESTARTS
