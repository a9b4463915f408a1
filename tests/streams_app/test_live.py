"""Streams end to end across processes: Daphne serving, a separate process writing, real clients.

Daphne runs as a subprocess on a free port against this run's test database (and Redis when the
run has one); `live_writer` writes in another process, as a Celery worker would. Clients are the
`websockets` library and an SSE client (`httpx-sse`). Every scenario checks the invariant that
matters (DESIGN 5): what each client received, across all its reconnections, is exactly the
stored log, in order, with no gap and no duplicate.
"""

import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets
from channels.db import database_sync_to_async
from httpx_sse import aconnect_sse

from streams_app.backends import get_stream_manager
from tests.live import ROOT, free_port, live_env

from .conftest import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

CHUNKS = 2000


class Daphne:
    """A Daphne subprocess on a fixed port that can be killed and started again."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                 "helix_project.asgi:application"],
                cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        pytest.fail(f"Daphne did not listen within 30 s:\n{self.log.read_text()}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return live_env(tmp_path)


@pytest.fixture
def daphne(env, tmp_path):
    server = Daphne(env, tmp_path / "daphne.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cookie(owner) -> str:
    return session_cookie(owner)


def start_writer(
    env: dict[str, str], stream_id: str, count: int = CHUNKS, pause: float = 0.0
) -> subprocess.Popen:
    """Start a process writing `count` chunks, `pause` seconds apart, then ending the stream."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.streams_app.live_writer", stream_id, str(count), str(pause)],
        cwd=ROOT,
        env=env,
    )


class Received:
    """What one client got across its connections."""

    def __init__(self) -> None:
        self.sequences: list[int] = []
        self.chunks: list[dict] = []
        self.final: dict | None = None
        self.connections = 0

    @property
    def last(self) -> int:
        return self.sequences[-1] if self.sequences else 0

    def take(self, event: dict) -> bool:
        """Record one event; return whether the stream is over."""
        if event["type"] == "chunk":
            self.sequences.append(event["sequence"])
            self.chunks.append(event["chunk"])
        elif event["type"] in ("end", "fail"):
            self.final = event
            return True
        return False


async def websocket_client(
    daphne: Daphne, cookie: str, session_id: str, *, max_per_connection=None, received=None
):
    """Read the stream over WebSocket, reconnecting from the last sequence after each drop."""
    received = received or Received()
    while received.final is None:
        url = f"ws://127.0.0.1:{daphne.port}/ws/sessions/{session_id}/stream?fromSequence={received.last}"
        budget = random.randint(1, max_per_connection) if max_per_connection else None
        try:
            async with websockets.connect(
                url, additional_headers={"Cookie": cookie}, origin=f"http://127.0.0.1:{daphne.port}"
            ) as socket_:
                received.connections += 1
                async for message in socket_:
                    frame = json.loads(message)
                    events = frame["events"] if frame["type"] == "batch" else [frame]
                    for event in events:
                        if received.take(event):
                            break
                        if budget is not None:
                            budget -= 1
                            if budget == 0:
                                break
                    if received.final is not None or budget == 0:
                        break
        except (OSError, websockets.ConnectionClosedError, websockets.InvalidStatus):
            await asyncio.sleep(0.05)  # Daphne is down; try again.
    return received


async def sse_client(
    daphne: Daphne, cookie: str, session_id: str, *, max_per_connection=None, received=None
):
    """Read the stream over SSE, resuming with Last-Event-ID after each drop."""
    received = received or Received()
    async with httpx.AsyncClient(timeout=10, headers={"Cookie": cookie}) as client:
        while received.final is None:
            url = f"http://127.0.0.1:{daphne.port}/api/sessions/{session_id}/stream"
            budget = random.randint(1, max_per_connection) if max_per_connection else None
            headers = {"Last-Event-ID": str(received.last)} if received.last else {}
            try:
                async with aconnect_sse(client, "GET", url, headers=headers) as source:
                    received.connections += 1
                    async for sse in source.aiter_sse():
                        if received.take(json.loads(sse.data)):
                            break
                        if budget is not None:
                            budget -= 1
                            if budget == 0:
                                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    return received


async def assert_got_the_stored_log(
    session_id: str, *clients: Received, count: int = CHUNKS
) -> None:
    """Check that each client got the `count` chunks stored, in order, once, then the end."""
    stored = await database_sync_to_async(get_stream_manager().get_all_chunks)(session_id)
    assert [c.sequence for c in stored] == list(range(1, count + 1))
    for received in clients:
        assert received.sequences == [c.sequence for c in stored]
        assert received.chunks == [c.chunk for c in stored]
        assert received.final == {"type": "end", "finalOutput": {"chunks": count}}


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
