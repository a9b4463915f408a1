"""The production layout under load: 2 Daphne processes and the Celery workers of `bench.steps` on
one PostgreSQL and one Redis, with a streaming WebSocket client on every session.

Every session is created and its client connected first, to the two Daphne processes in turn;
then the runs start (`agent_start`, as the API starts them, from a thread while the clients
read) and each client reads its stream from the start to its end. Connecting first keeps the
handshakes out of the load: Daphne drops a handshake it has not accepted within 5 s, which 200
clients joining streams already under way reached on a busy machine. The run stops unless every
run completes and every client received exactly its stored log, in order, once. It reports
throughput from the first start to the last end, and delivery latency: a chunk's arrival at its
client less the `timestamp` its writer gave it (one clock: one machine).
"""

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import cycle
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, connections
from django.test import Client

from agents_app.runs.services import agent_session_create, agent_start
from bench import agents
from bench.harness import Options, Row, Table, percentile_ms
from bench.live import Server, connect_websocket, daphne, follow_stream
from bench.steps import WORKER_PROCESSES, workers
from bench.streams import daphne_env
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from streams_app.backends import get_stream_manager

LEGEND = (
    f"Scale-out: the production layout, 2 Daphne processes and {WORKER_PROCESSES} Celery worker "
    "processes over PostgreSQL and Redis, runs of the benchmark agent each followed by a "
    "WebSocket client (half on each Daphne) connected before the runs start; latency is a "
    "chunk's arrival at its client less its write time."
)
SESSIONS, QUICK_SESSIONS = 200, 20
DAPHNE_PROCESSES = 2
TIMEOUT, QUICK_TIMEOUT = 300.0, 120.0


@dataclass
class Transcript:
    """What one client received: (sequence, chunk) in order, each chunk's latency, the end."""

    received: list[tuple[int, dict]] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    final: dict | None = None
    resumed: int = 0  # Times it reconnected after its connection dropped.


def run(options: Options) -> Iterator[Table]:
    """Yield the table of one scale-out run."""
    sessions = QUICK_SESSIONS if options.quick else SESSIONS
    owner, cookie = signed_in_owner()
    env = {**daphne_env(connection.settings_dict), "HELIX_AGENTS": "bench.agents"}
    with workers(), daphne(env) as first, daphne(env) as second:
        session_ids = [
            agent_session_create(user=owner, agent_type=agents.AGENT_TYPE).session_id
            for _ in range(sessions)
        ]
        timeout = QUICK_TIMEOUT if options.quick else TIMEOUT
        try:
            transcripts, elapsed = asyncio.run(
                asyncio.wait_for(
                    _run_and_follow(owner, cookie, [first, second], session_ids), timeout
                )
            )
        except TimeoutError:
            raise RuntimeError(f"Not every stream ended within {timeout:.0f} s.") from None
    _check(session_ids, transcripts)
    latencies = [ns for transcript in transcripts for ns in transcript.latencies_ns]
    delivered = len(latencies)
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
            Row(metric="p50 ms", orm=percentile_ms(latencies, 50)),
            Row(metric="p99 ms", orm=percentile_ms(latencies, 99)),
        ],
        notes=[
            "p50 and p99 ms: delivery latency of every chunk, arrival less write time",
            f"every client's transcript equalled the stored log ({sessions} of {sessions}); "
            f"{delivered:,} chunks delivered in {elapsed:.1f} s; "
            f"{sum(t.resumed for t in transcripts)} client reconnections",
        ],
        columns=("ours", "-", "-"),
    )


def signed_in_owner() -> tuple[AbstractBaseUser, str]:
    """Create an owner and return it with the session cookie of its signed-in browser."""
    owner = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}")
    client = Client()
    client.force_login(owner)
    name = settings.SESSION_COOKIE_NAME
    return owner, f"{name}={client.cookies[name].value}"


async def _run_and_follow(
    owner: AbstractBaseUser, cookie: str, servers: list[Server], session_ids: list[str]
) -> tuple[list[Transcript], float]:
    """Connect every client, start every run, and follow every stream to its end.

    Return the transcripts and the seconds from the first start to the last end.
    """
    served = list(zip(cycle(servers), session_ids))
    sockets = await asyncio.gather(
        *(
            connect_websocket(server, f"{server.websocket_url(session_id)}?fromSequence=0", cookie)
            for server, session_id in served
        )
    )
    started = time.perf_counter()
    following = asyncio.gather(
        *(
            _follow(server, cookie, socket, session_id)
            for (server, session_id), socket in zip(served, sockets, strict=True)
        )
    )
    await asyncio.to_thread(_start_runs, owner, session_ids)
    transcripts = await following
    return transcripts, time.perf_counter() - started


def _start_runs(owner: AbstractBaseUser, session_ids: list[str]) -> None:
    """Start a run of the benchmark agent on every session, then close this thread's connection."""
    try:
        for session_id in session_ids:
            agent_start(
                user=owner,
                agent_type=agents.AGENT_TYPE,
                message="Check the list.",
                session_id=session_id,
            )
    finally:
        connections.close_all()


async def _follow(server: Server, cookie: str, socket: Any, session_id: str) -> Transcript:
    """Read one stream over its open WebSocket until the stream ends or fails."""
    transcript = Transcript()

    def take(event: dict[str, Any], arrived_ns: int) -> bool:
        if event["type"] != "chunk":
            transcript.final = event
            return True
        transcript.received.append((event["sequence"], event["chunk"]))
        transcript.latencies_ns.append(arrived_ns - event["chunk"]["timestamp"] * 10**6)
        return False

    transcript.resumed = await follow_stream(
        server, server.websocket_url(session_id), cookie, take, clock=time.time_ns, socket=socket
    )
    return transcript


def _check(session_ids: list[str], transcripts: list[Transcript]) -> None:
    """Stop the run unless every run completed and every client got exactly its stored log.

    A run's status commits with its stream's end, so a client that got the end sees it.
    """
    store, streams = get_session_store(), get_stream_manager()
    for session_id, transcript in zip(session_ids, transcripts, strict=True):
        state = store.load_state(session_id)
        if state.status != SessionStatus.COMPLETED:
            raise RuntimeError(f"Run of {session_id} ended {state.status}: {state.error}")
        stored = [(c.sequence, c.chunk) for c in streams.get_all_chunks(state.stream_id)]
        if transcript.received != stored or (transcript.final or {}).get("type") != "end":
            raise RuntimeError(f"The client of {session_id} did not get exactly its stored log.")
