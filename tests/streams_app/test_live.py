"""Streams end to end across processes: Daphne serving, a separate process writing, real clients.

Daphne runs as a subprocess on a free port against this run's test database (and Redis when the
run has one); `live_writer` writes in another process, as a Celery worker would. Clients are the
`websockets` library and an SSE client (`httpx-sse`), from `tests.live_clients`. Every scenario
checks the invariant that matters (DESIGN 5): what each client received, across all its
reconnections, is exactly the stored log, in order, with no gap and no duplicate.
"""

import asyncio

import pytest

from tests.live import live_env
from tests.live_clients import (
    Daphne,
    Received,
    assert_got_the_stored_log,
    sse_client,
    start_writer,
    websocket_client,
)

from .conftest import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return live_env(tmp_path)


@pytest.fixture
def daphne(env, tmp_path):
    with Daphne(env, tmp_path / "daphne.log") as server:
        yield server


@pytest.fixture
def cookie(owner) -> str:
    return session_cookie(owner)


async def test_clients_dropping_at_random_and_resuming_miss_nothing(
    daphne, env, cookie, owned_session
):
    writer = start_writer(env, owned_session)

    by_socket, by_sse = await asyncio.wait_for(
        asyncio.gather(
            websocket_client(daphne, cookie, owned_session, max_per_connection=15),
            sse_client(daphne, cookie, owned_session, max_per_connection=15),
        ),
        timeout=120,
    )

    assert writer.wait(timeout=60) == 0
    await assert_got_the_stored_log(owned_session, by_socket, by_sse)
    assert by_socket.connections >= 200
    assert by_sse.connections >= 200


async def test_clients_resume_after_daphne_is_killed_mid_stream(daphne, env, cookie, owned_session):
    writer = start_writer(env, owned_session, pause=0.002)  # At least 4 s: the kill lands mid-way.
    by_socket, by_sse = Received(), Received()
    clients = asyncio.gather(
        websocket_client(daphne, cookie, owned_session, received=by_socket),
        sse_client(daphne, cookie, owned_session, received=by_sse),
    )
    async with asyncio.timeout(30):  # Kill only once both clients are connected and reading.
        while not (by_socket.sequences and by_sse.sequences):
            await asyncio.sleep(0.05)
    assert writer.poll() is None, "the writer finished before Daphne was killed"
    daphne.kill()
    await asyncio.sleep(0.5)
    daphne.start()

    await asyncio.wait_for(clients, timeout=120)

    assert writer.wait(timeout=60) == 0
    await assert_got_the_stored_log(owned_session, by_socket, by_sse)
    assert by_socket.connections >= 2
    assert by_sse.connections >= 2


@pytest.fixture
def tiny_layer_env(tmp_path) -> dict[str, str]:
    """A channel layer that holds one message per channel: notices get dropped."""
    return live_env(tmp_path, CHANNEL_LAYER_CAPACITY="1", REDIS_CHANNEL_LAYER="core")


async def test_every_reader_gets_the_whole_log_through_a_tiny_channel_layer(
    tiny_layer_env, tmp_path, cookie, owned_session
):
    daphne = Daphne(tiny_layer_env, tmp_path / "daphne.log")
    daphne.start()
    try:
        readers = asyncio.gather(
            *(websocket_client(daphne, cookie, owned_session) for _ in range(8)),
            *(sse_client(daphne, cookie, owned_session) for _ in range(4)),
        )
        await asyncio.sleep(0.3)
        writer = start_writer(tiny_layer_env, owned_session)
        received = await asyncio.wait_for(readers, timeout=120)
    finally:
        daphne.stop()

    assert writer.wait(timeout=60) == 0
    await assert_got_the_stored_log(owned_session, *received)
