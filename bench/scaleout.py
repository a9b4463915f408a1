"""The production layout under load: 2 Daphne processes and 2 Celery workers on one PostgreSQL and
one Redis, with a streaming WebSocket client on every session.

The runs start first (`agent_start`, as the API starts them); each session's client then
connects, to the two Daphne processes in turn, and reads its stream from the start to its end.
The run stops unless every run completes and every client received exactly its stored log, in
order, once. It reports throughput, and delivery latency: a chunk's arrival at its client less
the `timestamp` its writer gave it (one clock: one machine), over chunks that arrived live.
"""

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from agents_app.services import agent_start
from bench import agents
from bench.harness import Options, Row, Table
from bench.live import Server, connect_websocket, daphne
from bench.steps import WORKER_PROCESSES, workers
from bench.streams import daphne_env
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from streams_app.backends import get_stream_manager

LEGEND = (
    "Scale-out: the production layout, 2 Daphne processes and 2 Celery worker processes over "
    "PostgreSQL and Redis, runs of the benchmark agent each followed by a WebSocket client "
    "(half on each Daphne); latency is a chunk's arrival at its client less its write time."
)
SESSIONS, QUICK_SESSIONS = 200, 20
DAPHNE_PROCESSES = 2
TIMEOUT, QUICK_TIMEOUT = 300.0, 120.0


@dataclass
class Transcript:
    """What one client received: (sequence, chunk) in order, live chunks' latencies, the end."""

    received: list[tuple[int, dict]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    final: dict | None = None


def run(options: Options) -> Iterator[Table]:
    """Yield the table of one scale-out run."""
    sessions = QUICK_SESSIONS if options.quick else SESSIONS
    owner = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}")
    client = Client()
    client.force_login(owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    env = {**daphne_env(connection.settings_dict), "HELIX_AGENTS": "bench.agents"}
    with workers(), daphne(env) as first, daphne(env) as second:
        started = time.perf_counter()
        session_ids = [
            agent_start(
                user=owner, agent_type=agents.AGENT_TYPE, message="Check the list."
            ).session_id
            for _ in range(sessions)
        ]
        transcripts = asyncio.run(
            asyncio.wait_for(
                _follow_all([first, second], cookie, session_ids),
                QUICK_TIMEOUT if options.quick else TIMEOUT,
            )
        )
        elapsed = time.perf_counter() - started
    _check(session_ids, transcripts)
    latencies = sorted(ms for t in transcripts for ms in t.latencies_ms)
    delivered = sum(len(t.received) for t in transcripts)
    yield Table(
        title=(
            f"Scale-out: {sessions} sessions over {DAPHNE_PROCESSES} Daphne and "
            f"{WORKER_PROCESSES} Celery worker processes"
        ),
        rows=[
            Row(metric="runs/s", orm=sessions / elapsed, higher_is_better=True),
            Row(
                metric="steps/s",
                orm=sessions * agents.STEPS_PER_RUN / elapsed,
                higher_is_better=True,
            ),
            Row(metric="chunks/s", orm=delivered / elapsed, higher_is_better=True),
            Row(metric="p50 ms", orm=_percentile(latencies, 0.50)),
            Row(metric="p99 ms", orm=_percentile(latencies, 0.99)),
        ],
        notes=[
            "p50 and p99 ms: delivery latency of the chunks that arrived live",
            f"every client's transcript equalled the stored log ({sessions} of {sessions}); "
            f"{delivered:,} chunks delivered, {len(latencies):,} of them live, in {elapsed:.1f} s",
        ],
        columns=("ours", "-", "-"),
    )


async def _follow_all(
    servers: list[Server], cookie: str, session_ids: list[str]
) -> list[Transcript]:
    """Follow every session's stream to its end, the clients spread over `servers`."""
    return await asyncio.gather(
        *(
            _follow(servers[n % len(servers)], cookie, session_id)
            for n, session_id in enumerate(session_ids)
        )
    )


async def _follow(server: Server, cookie: str, session_id: str) -> Transcript:
    """Read one stream from its start over WebSocket until it ends or fails."""
    transcript = Transcript()
    socket = await connect_websocket(
        server, f"{server.websocket_url(session_id)}?fromSequence=0", cookie
    )
    connected_ms = time.time() * 1000  # Chunks written before this were history, not live.
    async with socket:
        async for message in socket:
            arrived_ms = time.time() * 1000
            frame = json.loads(message)
            for event in frame["events"] if frame["type"] == "batch" else [frame]:
                if event["type"] != "chunk":
                    transcript.final = event
                    return transcript
                transcript.received.append((event["sequence"], event["chunk"]))
                if event["chunk"]["timestamp"] >= connected_ms:
                    transcript.latencies_ms.append(arrived_ms - event["chunk"]["timestamp"])
    raise RuntimeError(f"The stream of {session_id} closed before it ended.")


def _check(session_ids: list[str], transcripts: list[Transcript]) -> None:
    """Stop the run unless every run completed and every client got exactly its stored log."""
    store, streams = get_session_store(), get_stream_manager()
    for session_id, transcript in zip(session_ids, transcripts, strict=True):
        state = store.load_state(session_id)
        if state.status != SessionStatus.COMPLETED:
            raise RuntimeError(f"Run of {session_id} ended {state.status}: {state.error}")
        stored = [(c.sequence, c.chunk) for c in streams.get_all_chunks(state.stream_id)]
        if transcript.received != stored or (transcript.final or {}).get("type") != "end":
            raise RuntimeError(f"The client of {session_id} did not get exactly its stored log.")


def _percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))] if values else 0.0
