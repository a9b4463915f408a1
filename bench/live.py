"""Daphne serving the throwaway database, and the subscribers the live benchmarks time.

Every subscriber records each chunk's sequence and the `time.perf_counter_ns()` at which its
frame, SSE event or pub/sub message reached client code, before decoding it.
"""

import asyncio
import json
import logging
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets
from httpx_sse import aconnect_sse
from redis import asyncio as aioredis

from bench.raw_chunks import AGENT_TYPE, RawChunkWriter
from sessions_app.stores import get_session_store
from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamWriter

ROOT = Path(__file__).resolve().parents[1]
# httpx logs every request at INFO, which the project's logging prints.
logging.getLogger("httpx").setLevel(logging.WARNING)
STARTUP_TIMEOUT = 30.0
# How long a subscriber may take to connect, and a chunk to reach every subscriber.
DELIVERY_TIMEOUT = 30.0
CONNECT_ATTEMPTS = 5
RESUMES = 3  # Times a WebSocket client reconnects after its connection dropped, at most.


@dataclass(frozen=True)
class Server:
    """A Daphne listening on 127.0.0.1."""

    port: int
    pid: int | None = None  # The Daphne process, when `daphne()` started it.

    @property
    def origin(self) -> str:
        """Return the `Origin` a browser on this server's pages sends."""
        return f"http://127.0.0.1:{self.port}"

    def websocket_url(self, session_id: str) -> str:
        """Return the WebSocket URL of a session's stream."""
        return f"ws://127.0.0.1:{self.port}/ws/sessions/{session_id}/stream"

    def sse_url(self, session_id: str) -> str:
        """Return the server-sent events URL of a session's stream."""
        return f"{self.origin}/api/sessions/{session_id}/stream"


@dataclass(frozen=True, kw_only=True)
class Live:
    """What the live benchmarks share: Daphne, a logged-in owner, Redis and a writer thread."""

    server: Server
    owner_id: int
    cookie: str
    redis_url: str
    raw_writer: RawChunkWriter
    # Writes run here, one at a time, while the event loop keeps receiving.
    executor: ThreadPoolExecutor

    def new_stream(self) -> StreamWriter:
        """Create a session of the owner and open a writer on its stream, which has its id."""
        session = get_session_store().create_session(agent_type=AGENT_TYPE, owner_id=self.owner_id)
        return get_stream_manager().create_writer(session.stream_id, "run-bench", AGENT_TYPE)


@contextmanager
def daphne(env: Mapping[str, str]) -> Iterator[Server]:
    """Run Daphne with `env` until the block exits; print its log's tail if the block fails."""
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as var:
        log = Path(var) / "daphne.log"
        port = _free_port()
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                 "helix_project.asgi:application"],
                cwd=ROOT, env={**env, "HELIX_VAR_DIR": var}, stdout=output,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            _wait_until_listening(process, port, log)
            yield Server(port, process.pid)
        except Exception:
            tail = log.read_text(errors="replace").splitlines()[-30:]
            print("Daphne's log ends:\n  " + "\n  ".join(tail), file=sys.stderr)
            raise
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _free_port() -> int:
    """Return a TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_listening(process: subprocess.Popen, port: int, log: Path) -> None:
    """Return once Daphne accepts connections; raise with its log if it exits or stalls."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Daphne exited with {process.returncode}:\n{log.read_text()}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"Daphne did not listen within {STARTUP_TIMEOUT:.0f} s:\n{log.read_text()}")


@dataclass
class Received:
    """What one subscriber got: each chunk's sequence and arrival, in order, then the last event."""

    sequences: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    final: dict[str, Any] | None = None
    finished_at: int = 0
    resumed: int = 0  # Times it reconnected after its connection dropped.


class Fanout:
    """The subscribers of one side; tells the publisher when every one has a given chunk."""

    def __init__(self, size: int) -> None:
        self.received = [Received() for _ in range(size)]
        self._joined = 0
        self._finished = 0
        self._awaited = 0
        self._arrived = 0
        self._all_joined = asyncio.Event()
        self._all_arrived = asyncio.Event()
        self._all_finished = asyncio.Event()

    def join(self) -> None:
        """Count a subscriber as listening, for pub/sub, which loses what it is sent before."""
        self._joined += 1
        if self._joined == len(self.received):
            self._all_joined.set()

    def expect(self, sequence: int) -> None:
        """Await `sequence` next, before it is published."""
        self._awaited, self._arrived = sequence, 0
        self._all_arrived.clear()

    def take(self, received: Received, arrival: int, event: dict[str, Any]) -> bool:
        """Record an event a subscriber got at `arrival`; return whether its stream is over."""
        if event["type"] != "chunk":
            received.final, received.finished_at = event, arrival
            self._finished += 1
            if self._finished == len(self.received):
                self._all_finished.set()
            return True
        received.sequences.append(event["sequence"])
        received.arrivals.append(arrival)
        if event["sequence"] == self._awaited:
            self._arrived += 1
            if self._arrived == len(self.received):
                self._all_arrived.set()
        return False

    async def joined(self) -> None:
        """Wait until every subscriber is listening."""
        await _within(self._all_joined, f"{self._joined} of {len(self.received)} listening")

    async def arrived(self) -> None:
        """Wait until every subscriber has the awaited chunk."""
        await _within(
            self._all_arrived,
            f"{self._arrived} of {len(self.received)} got sequence {self._awaited}",
        )

    async def finished(self) -> None:
        """Wait until every subscriber has its stream's last event."""
        await _within(self._all_finished, f"{self._finished} of {len(self.received)} finished")


async def _within(event: asyncio.Event, progress: str) -> None:
    """Wait for `event`; raise saying how far the subscribers got if it takes too long."""
    try:
        await asyncio.wait_for(event.wait(), DELIVERY_TIMEOUT)
    except TimeoutError:
        raise RuntimeError(f"After {DELIVERY_TIMEOUT:.0f} s only {progress}.") from None


async def connect_websocket(server: Server, url: str, cookie: str) -> Any:
    """Open a signed-in browser's WebSocket to `url`, trying the handshake again if it fails.

    Daphne drops a handshake its consumer has not accepted within 5 s, which a loaded machine
    connecting 100 clients at once can reach.
    """
    attempt = 1
    while True:
        try:
            return await websockets.connect(
                url,
                origin=websockets.Origin(server.origin),
                additional_headers={"Cookie": cookie},
                proxy=None,
                max_size=None,
                open_timeout=DELIVERY_TIMEOUT,
            )
        except (websockets.InvalidHandshake, OSError):
            if attempt == CONNECT_ATTEMPTS:
                raise
            await asyncio.sleep(0.5 * attempt)
            attempt += 1


async def follow_stream(
    server: Server,
    url: str,
    cookie: str,
    take: Callable[[dict[str, Any], int], bool],
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    socket: Any = None,
) -> int:
    """Read a stream's events over WebSocket until `take` says one ended it; return resumptions.

    `take` gets each event with the `clock`'s reading when its frame arrived. `socket`, when
    given, is the stream's connection already open. When the connection drops, the client
    resumes after the last sequence it got, at most `RESUMES` times, as a real client does: on
    a saturated machine a client can answer Daphne's closing handshake after Daphne's 1 s wait,
    and the reset connection loses the end it had not read yet.
    """
    last_sequence, resumed = 0, 0
    while True:
        if socket is None:
            socket = await connect_websocket(server, f"{url}?fromSequence={last_sequence}", cookie)
        try:
            async with socket:
                async for message in socket:
                    arrival = clock()
                    frame = json.loads(message)
                    for event in frame["events"] if frame["type"] == "batch" else [frame]:
                        if take(event, arrival):
                            return resumed
                        last_sequence = event["sequence"]
        except websockets.ConnectionClosedError:
            if resumed == RESUMES:
                raise
            resumed += 1
            socket = None
        else:
            raise RuntimeError(
                f"Daphne closed {url} after sequence {last_sequence}, before its end."
            )


async def websocket_subscriber(
    server: Server, cookie: str, session_id: str, fanout: Fanout, received: Received
) -> None:
    """Follow a session's stream over WebSocket, as a browser would, until its last event.

    The stream's replay means a subscriber whose handshake had to be tried again misses nothing.
    """
    received.resumed = await follow_stream(
        server,
        server.websocket_url(session_id),
        cookie,
        lambda event, arrival: fanout.take(received, arrival, event),
    )


async def sse_subscriber(
    server: Server, cookie: str, session_id: str, fanout: Fanout, received: Received
) -> None:
    """Follow a session's stream as server-sent events until its last event."""
    async with (
        httpx.AsyncClient(
            headers={"Cookie": cookie},
            timeout=httpx.Timeout(DELIVERY_TIMEOUT, read=None),
            trust_env=False,
        ) as client,
        aconnect_sse(client, "GET", server.sse_url(session_id)) as source,
    ):
        source.response.raise_for_status()
        async for sse in source.aiter_sse():
            arrival = time.perf_counter_ns()
            if fanout.take(received, arrival, json.loads(sse.data)):
                return


async def redis_subscriber(
    client: aioredis.Redis, channel: str, fanout: Fanout, received: Received
) -> None:
    """Follow a raw pub/sub channel of JSON stream events until its last event."""
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(channel)
        async for message in pubsub.listen():
            arrival = time.perf_counter_ns()
            if message["type"] == "subscribe":
                fanout.join()  # Redis confirmed: every later publish reaches this subscriber.
            elif fanout.take(received, arrival, json.loads(message["data"])):
                return
