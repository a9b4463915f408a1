"""Processes and clients for live stream tests: Daphne as a subprocess, a stream writer in
another process, and WebSocket and SSE clients that resume from their last sequence.

The clients reconnect after every drop until they get the stream's `end` or `fail` event; given
several servers, they move to the next one on each reconnection, as behind a load balancer.
`Received` holds what one client got across all its connections, and
`assert_got_the_stored_log` holds it to the stored log.
"""

import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import httpx
import pytest
import websockets
from channels.db import database_sync_to_async
from django.conf import settings
from httpx_sse import aconnect_sse

from streams_app.backends import get_stream_manager
from tests.live import ROOT, free_port, live_env

CHUNKS = 2000  # What a writer writes unless told otherwise.


class Daphne:
    """A Daphne subprocess on a fixed port that can be stopped and started again; as a context
    manager, started on entry and stopped on exit."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Start Daphne and return once it listens."""
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

    def __enter__(self) -> "Daphne":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def kill(self) -> None:
        """SIGKILL Daphne and wait for it to die."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self, timeout: float = 30) -> None:
        """SIGTERM Daphne (a graceful shutdown) and wait for it to exit; fail if it does not."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(
                f"Daphne did not exit within {timeout} s of SIGTERM:\n{self.log.read_text()}"
            )

    def stop(self) -> None:
        """Stop Daphne if it runs: SIGTERM, then SIGKILL if it has not exited after 10 s."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


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
        self.port: int | None = None  # The server of the current connection, if one is open.

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


class Server(Protocol):
    port: int


def _rotation(servers: Server | Sequence[Server]) -> list[Server]:
    return list(servers) if isinstance(servers, Sequence) else [servers]


async def websocket_client(
    servers: Server | Sequence[Server],
    cookie: str,
    session_id: str,
    *,
    max_per_connection=None,
    received=None,
):
    """Read the stream over WebSocket, reconnecting from the last sequence after each drop."""
    received = received or Received()
    servers, turn = _rotation(servers), 0
    while received.final is None:
        port = servers[turn % len(servers)].port
        turn += 1
        url = f"ws://127.0.0.1:{port}/ws/sessions/{session_id}/stream?fromSequence={received.last}"
        budget = random.randint(1, max_per_connection) if max_per_connection else None
        try:
            async with websockets.connect(
                url, additional_headers={"Cookie": cookie}, origin=f"http://127.0.0.1:{port}"
            ) as socket_:
                received.connections += 1
                received.port = port
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
        except (OSError, websockets.ConnectionClosedError, websockets.InvalidHandshake):
            await asyncio.sleep(0.05)  # The server is down; try again.
        finally:
            received.port = None
    return received


async def sse_client(
    servers: Server | Sequence[Server],
    cookie: str,
    session_id: str,
    *,
    max_per_connection=None,
    received=None,
):
    """Read the stream over SSE, resuming with Last-Event-ID after each drop."""
    received = received or Received()
    servers, turn = _rotation(servers), 0
    async with httpx.AsyncClient(timeout=10, headers={"Cookie": cookie}) as client:
        while received.final is None:
            port = servers[turn % len(servers)].port
            turn += 1
            url = f"http://127.0.0.1:{port}/api/sessions/{session_id}/stream"
            budget = random.randint(1, max_per_connection) if max_per_connection else None
            headers = {"Last-Event-ID": str(received.last)} if received.last else {}
            try:
                async with aconnect_sse(client, "GET", url, headers=headers) as source:
                    received.connections += 1
                    received.port = port
                    async for sse in source.aiter_sse():
                        if received.take(json.loads(sse.data)):
                            break
                        if budget is not None:
                            budget -= 1
                            if budget == 0:
                                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)  # The server is down; try again.
            finally:
                received.port = None
    return received


def live_daphne(folder: Path, agents: str, queue: str) -> Daphne:
    """Return a Daphne with `agents` on this run's test database, its runs' steps going to
    `queue` (a worker's, on the broker this run shares), not started yet."""
    env = live_env(
        folder,
        HELIX_AGENTS=agents,
        HELIX_VAR_DIR=str(settings.VAR_DIR),
        CELERY_TASK_DEFAULT_QUEUE=queue,
    )
    return Daphne(env, folder / "daphne.log")


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
