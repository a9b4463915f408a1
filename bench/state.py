"""Live state: from the start of a `set_agent_state` call to the state's arrival at each client.

Helix's path is `set_agent_state`, called in this process's writer thread as a Celery task or a
client's RPC method would call it: the agent's validation, the versioned write, the ring of
the state's channel-layer group after commit, Daphne's `AgentStateConsumer`s and the agent's
WebSocket clients (`/agents/bench-state/{session}`), signed in as the session's owner. Each
write's state carries its round and the wall-clock time it was made. The raw baselines, measured
in the same run, PUBLISH the same `cf_agent_state` frame to as many raw Redis pub/sub
subscribers: after storing the state with one hand-written UPDATE on psycopg, or without. The
sides take turns round by round, in rotating order; after each write the writer waits until
every client has the state, then pauses, so deliveries never queue behind each other.
"""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psycopg
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client
from psycopg.types.json import Jsonb
from redis import asyncio as aioredis

from agents_app.live_state.agent_state import agent_state_get, set_agent_state
from agents_app.routing import state_socket_path
from bench.agents import STATE_AGENT_TYPE, board
from bench.harness import Options, Row, Table, percentile_ms
from bench.live import (
    Fanout,
    Received,
    Server,
    connect_websocket,
    daphne,
    redis_subscriber,
)
from bench.raw import connect
from bench.streams import daphne_env
from sessions_app.stores import get_session_store

LEGEND = (
    "State: set_agent_state, called in this process, to the agent's WebSocket clients on "
    "Daphne; each latency runs from the start of the call to a client's receipt of the state. "
    "The raw sides PUBLISH the same cf_agent_state frame to raw Redis pub/sub subscribers in the "
    "same run: raw UPDATE+publish stores the state first with one hand-written UPDATE on "
    "psycopg; raw pub/sub only PUBLISHes it, the baseline the target holds against (the right "
    "column, as in every table)."
)
CLIENTS, QUICK_CLIENTS = 100, 10
P50_TARGET = 4.0
PERCENTILES = (50, 99)
# What a small shared state holds besides its round and time: a line of text.
NOTE = "Each round writes the whole state again; every client must get it once, in order."
RAW_UPDATE = (
    'UPDATE "sessions_app_agentsession" SET "custom_state" = %s, "version" = "version" + 1, '
    '"updated_at" = %s WHERE "id" = %s RETURNING "version"'
)

Subscribe = Callable[["StateFanout", Received], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How many rounds each side writes, after how many warm-up rounds, and the pause after each."""

    rounds: int
    warmup: int
    pause: float

    def describe(self) -> str:
        """Describe the writes a table rests on."""
        return (
            f"{self.rounds} rounds per side interleaved after {self.warmup} warm-up, "
            f"{self.pause * 1000:g} ms apart"
        )


@dataclass(frozen=True, kw_only=True)
class Stage:
    """Daphne on the throwaway database, its signed-in owner, raw PostgreSQL and a writer thread."""

    server: Server
    owner_id: int
    cookie: str
    raw: psycopg.Connection
    executor: ThreadPoolExecutor


class StateFanout(Fanout):
    """A side's clients; each `cf_agent_state` frame counts as its state's round arriving."""

    def take(self, received: Received, arrival: int, event: dict[str, Any]) -> bool:
        """Record a state frame a client got at `arrival`; return whether it was the last."""
        if event.get("type") != "cf_agent_state":
            raise RuntimeError(f"A client got {event} where only states were due.")
        state = event["state"]
        kind = "end" if state.get("done") else "chunk"
        return super().take(received, arrival, {**event, "type": kind, "sequence": state["round"]})


@dataclass(kw_only=True)
class _Side:
    """One way to hand a state to its clients: the write, the clients and what was written."""

    label: str
    write: Callable[[dict[str, Any]], object]
    subscribe: Subscribe
    fanout: StateFanout
    written: list[dict[str, Any]] = field(default_factory=list)
    began: dict[int, int] = field(default_factory=dict)  # Timed rounds only.
    calls: list[int] = field(default_factory=list)  # Nanoseconds of each timed write call.

    def write_round(self, round_: int, *, done: bool = False) -> tuple[int, int]:
        """Write round `round_`'s state; return when the call began and its nanoseconds."""
        state = {"round": round_, "writtenAt": time.time_ns() // 1_000_000, "note": NOTE}
        if done:
            state["done"] = True
        began = time.perf_counter_ns()
        self.write(state)
        took = time.perf_counter_ns() - began
        self.written.append(state)
        return began, took

    def latencies(self) -> list[int]:
        """Return the nanoseconds from each timed write's start to each client's receipt."""
        return [
            arrival - self.began[round_]
            for received in self.fanout.received
            for round_, arrival in zip(received.sequences, received.arrivals, strict=True)
            if round_ in self.began
        ]

    def spread(self) -> tuple[list[int], list[int]]:
        """Return, per timed round, the latency of its first client and of its last."""
        per_round: dict[int, list[int]] = {round_: [] for round_ in self.began}
        for received in self.fanout.received:
            for round_, arrival in zip(received.sequences, received.arrivals, strict=True):
                if round_ in per_round:
                    per_round[round_].append(arrival - self.began[round_])
        return [min(ns) for ns in per_round.values()], [max(ns) for ns in per_round.values()]

    def check_delivered(self) -> None:
        """Raise unless every client got every round's state once, in order, then the last."""
        rounds = [state["round"] for state in self.written[:-1]]
        for index, received in enumerate(self.fanout.received):
            final = (received.final or {}).get("state")
            if received.sequences != rounds or final != self.written[-1]:
                raise RuntimeError(
                    f"{self.label} client {index} received {len(received.sequences)} states "
                    f"(rounds {received.sequences[:5]} ... {received.sequences[-5:]}), then "
                    f"{final}, where {len(rounds)} rounds and then {self.written[-1]} were written."
                )


def run(options: Options) -> Iterator[Table]:
    """Yield the table of state delivery to 100 clients (10 in a quick run)."""
    rounds = options.deliveries
    pacing = Pacing(rounds=rounds, warmup=max(2, rounds // 10), pause=options.pause)
    with _stage() as stage:
        yield state_table(stage, QUICK_CLIENTS if options.quick else CLIENTS, pacing, P50_TARGET)


def state_table(stage: Stage, clients: int, pacing: Pacing, target: float) -> Table:
    """Measure `set_agent_state` to `clients` WebSocket clients against raw Redis pub/sub."""
    session_id = _new_session(stage.owner_id)
    helix = _Side(
        label="Helix WebSocket",
        write=partial(set_agent_state, session_id),
        subscribe=partial(_state_client, stage.server, stage.cookie, session_id),
        fanout=StateFanout(clients),
    )
    publisher = redis.Redis.from_url(settings.REDIS_URL)
    # Each raw subscriber holds a connection of its own, as each browser does on our side.
    listener = aioredis.Redis.from_url(settings.REDIS_URL, max_connections=2 * clients + 1)
    try:
        durable = _raw_side(stage, publisher, listener, clients, durable=True)
        pure = _raw_side(stage, publisher, listener, clients, durable=False)
        asyncio.run(_measure([helix, durable, pure], stage.executor, pacing, listener))
    finally:
        publisher.close()
    stored = stage.executor.submit(agent_state_get, session_id).result().state
    if stored != helix.written[-1]:
        raise RuntimeError(f"The session stores {stored}; {helix.written[-1]} was written last.")
    return _table([helix, durable, pure], clients, pacing, target)


def _new_session(owner_id: int) -> str:
    """Create a session of the state agent, owned by the clients' user; return its id."""
    session = get_session_store().create_session(
        agent_type=STATE_AGENT_TYPE, owner_id=owner_id, custom_state=board.make_initial_state()
    )
    return session.session_id


def _raw_side(
    stage: Stage, publisher: redis.Redis, listener: aioredis.Redis, size: int, *, durable: bool
) -> _Side:
    """Return a raw side: PUBLISH the state's frame, after storing it with raw SQL if `durable`."""
    channel = f"bench.state.{uuid.uuid4().hex}"
    session_id = _new_session(stage.owner_id) if durable else None  # A row of its own.

    def write(state: dict[str, Any]) -> None:
        if durable:
            with stage.raw.cursor() as cursor:
                cursor.execute(RAW_UPDATE, [Jsonb(state), datetime.now(UTC), session_id])
                if cursor.fetchone() is None:
                    raise LookupError(f"no session {session_id}")
        publisher.publish(channel, json.dumps({"type": "cf_agent_state", "state": state}))

    return _Side(
        label="raw UPDATE+publish" if durable else "raw pub/sub",
        write=write,
        subscribe=partial(redis_subscriber, listener, channel),
        fanout=StateFanout(size),
    )


async def _state_client(
    server: Server, cookie: str, session_id: str, fanout: StateFanout, received: Received
) -> None:
    """Follow the agent's state over its WebSocket, as a signed-in browser would, to the last.

    It joins once it has the connect frames: identity, the initial state and the MCP servers.
    """
    path = state_socket_path(STATE_AGENT_TYPE, session_id)
    url = f"ws://127.0.0.1:{server.port}{path}?_pk=bench-{uuid.uuid4().hex}"
    socket = await connect_websocket(server, url, cookie)
    async with socket:
        greeting = [json.loads(await socket.recv()) for _ in range(3)]
        expected = [
            {"type": "cf_agent_identity", "name": session_id, "agent": STATE_AGENT_TYPE},
            {"type": "cf_agent_state", "state": board.make_initial_state()},
        ]
        if greeting[:2] != expected or greeting[2]["type"] != "cf_agent_mcp_servers":
            raise RuntimeError(f"A client was greeted with {greeting}.")
        fanout.join()
        async for message in socket:
            arrival = time.perf_counter_ns()
            if fanout.take(received, arrival, json.loads(message)):
                return
    raise RuntimeError(f"Daphne closed a state socket after {len(received.sequences)} states.")


async def _measure(
    sides: list[_Side], executor: ThreadPoolExecutor, pacing: Pacing, listener: aioredis.Redis
) -> None:
    """Connect every side's clients, write the rounds in turn, end, and check deliveries."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.TaskGroup() as clients:
            for side in sides:
                for received in side.fanout.received:
                    clients.create_task(side.subscribe(side.fanout, received))
            for side in sides:
                await side.fanout.joined()
            for round_ in range(1, pacing.warmup + pacing.rounds + 1):
                first = round_ % len(sides)
                for side in [*sides[first:], *sides[:first]]:
                    side.fanout.expect(round_)
                    began, took = await loop.run_in_executor(executor, side.write_round, round_)
                    if round_ > pacing.warmup:
                        side.began[round_] = began
                        side.calls.append(took)
                    await side.fanout.arrived()
                    await asyncio.sleep(pacing.pause)
            last = pacing.warmup + pacing.rounds + 1
            for side in sides:
                await loop.run_in_executor(executor, partial(side.write_round, last, done=True))
                await side.fanout.finished()
    finally:
        await listener.aclose()
    for side in sides:
        side.check_delivered()


def _table(sides: list[_Side], clients: int, pacing: Pacing, target: float) -> Table:
    """Tabulate our latency percentiles against both raw sides', with where the time went."""
    latencies = [side.latencies() for side in sides]
    rows = [
        Row(
            metric=f"p{percent} ms",
            orm=percentile_ms(latencies[0], percent),
            lenient_raw=percentile_ms(latencies[1], percent),
            strict_raw=percentile_ms(latencies[2], percent),
            target=target if percent == 50 else None,
        )
        for percent in PERCENTILES
    ]
    spreads = []
    for side in sides:
        first, last = side.spread()
        spreads.append(
            f"{side.label} {percentile_ms(first, 50):.2f} / {percentile_ms(last, 50):.2f}"
        )
    return Table(
        title=(
            f"set_agent_state to {clients} WebSocket clients, call start to arrival "
            f"({pacing.describe()})"
        ),
        rows=rows,
        notes=[
            f"every client of every side received all {pacing.warmup + pacing.rounds} rounds' "
            f"states once, in order, then the last write, which the session stores; "
            f"{len(latencies[0]):,} latencies per side",
            f"set_agent_state returned after p50 {percentile_ms(sides[0].calls, 50):.2f} ms "
            "(validation, the versioned write and its commit); the ring goes out after it",
            f"p50 ms from call start to a round's first / last client: {'; '.join(spreads)}",
        ],
        columns=(sides[0].label, sides[1].label, sides[2].label),
    )


@contextmanager
def _stage() -> Iterator[Stage]:
    """Run Daphne with the bench agents on the throwaway database, an owner signed in."""
    owner = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:12]}")
    client = Client()
    client.force_login(owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    env = {**daphne_env(connection.settings_dict), "HELIX_AGENTS": "bench.agents"}
    with (
        daphne(env) as server,
        connect(connection.settings_dict, like_django=False) as raw,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-writer") as executor,
    ):
        try:
            yield Stage(server=server, owner_id=owner.pk, cookie=cookie, raw=raw, executor=executor)
        finally:
            executor.submit(connections.close_all).result()
