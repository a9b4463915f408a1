"""Delivery latency: from the start of a chunk's write to its arrival at each subscriber.

Helix's path is the ORM writer (in a thread, as an agent's task would run it), the doorbell,
Daphne and a WebSocket or SSE client. The raw baselines, measured in the same run, publish the
same chunk event's JSON to as many raw Redis pub/sub subscribers: after writing the chunk row with
raw psycopg (the durable baseline the targets hold against), or without writing it. Sides
alternate in blocks after a warm-up block each; after each write the publisher waits until every
subscriber has the chunk, then pauses, so deliveries never queue behind each other.
"""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial

import redis
from redis import asyncio as aioredis

from bench.harness import Row, Table, percentile_ms
from bench.live import (
    Fanout,
    Live,
    Received,
    redis_subscriber,
    sse_subscriber,
    websocket_subscriber,
)
from bench.raw_chunks import delta_input, wire_delta
from streams_app.backends import get_stream_manager

BLOCK = 20
WARMUP_BLOCKS = 1
PERCENTILES = (50, 99)

# Publishes the chunk that gets `sequence`; returns when its write began (perf_counter ns).
Publish = Callable[[int], int]
Subscribe = Callable[[Fanout, Received], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How many chunks each side writes, in alternating blocks, and the pause after each."""

    block: int
    blocks: int
    pause: float

    @classmethod
    def of(cls, writes: int, pause: float) -> "Pacing":
        """Return the pacing of about `writes` timed writes per side, in at least two blocks."""
        block = min(BLOCK, max(1, writes // 2))
        return cls(block=block, blocks=writes // block, pause=pause)

    def describe(self) -> str:
        """Describe the writes a table rests on."""
        return (
            f"{self.block * self.blocks} writes per side in alternating blocks of {self.block} "
            f"after {WARMUP_BLOCKS * self.block} warm-up, {self.pause * 1000:g} ms apart"
        )


@dataclass(kw_only=True)
class _Side:
    """One way to deliver chunks: its publisher, its subscribers and what it published when."""

    label: str
    publish: Publish
    subscribe: Subscribe
    finish: Callable[[], object]
    fanout: Fanout
    # Pub/sub subscribers miss what is published before they listen; Helix's replay the store.
    must_listen_first: bool
    published: list[int] = field(default_factory=list)
    began: dict[int, int] = field(default_factory=dict)  # Timed sequences only.

    def latencies(self) -> list[int]:
        """Return the nanoseconds from each timed write's start to each subscriber's receipt."""
        return [
            arrival - self.began[sequence]
            for received in self.fanout.received
            for sequence, arrival in zip(received.sequences, received.arrivals, strict=True)
            if sequence in self.began
        ]

    def check_delivered(self) -> None:
        """Raise unless every subscriber got every chunk once, in order, then the end."""
        for index, received in enumerate(self.fanout.received):
            if received.sequences != self.published or (received.final or {}).get("type") != "end":
                raise RuntimeError(
                    f"{self.label} subscriber {index} received {len(received.sequences)} chunks "
                    f"(first {received.sequences[:5]}, last {received.sequences[-5:]}) and "
                    f"{received.final} where {len(self.published)} chunks and the end were sent."
                )


def delivery_tables(
    live: Live, subscribers: int, *, sse: bool, pacing: Pacing, target: float
) -> list[Table]:
    """Measure delivery to `subscribers` WebSocket (and SSE) subscribers against raw Redis."""
    ours = [_helix_side(live, "WebSocket", websocket_subscriber, subscribers)]
    if sse:
        ours.append(_helix_side(live, "SSE", sse_subscriber, subscribers))
    publisher = redis.Redis.from_url(live.redis_url)
    # Each raw subscriber holds a connection of its own, as each browser does on our side.
    listener = aioredis.Redis.from_url(live.redis_url, max_connections=2 * subscribers + 1)
    try:
        pure = _raw_side(live, publisher, listener, subscribers, durable=False)
        durable = _raw_side(live, publisher, listener, subscribers, durable=True)
        asyncio.run(_measure([*ours, pure, durable], live.executor, pacing, listener))
    finally:
        publisher.close()
    return [
        _table(side, pure, durable, subscribers, pacing, target if side is ours[0] else None)
        for side in ours
    ]


def _helix_side(
    live: Live, label: str, subscriber: Callable[..., Awaitable[None]], size: int
) -> _Side:
    """Return Helix's side: the ORM writer of a session's stream and clients of Daphne."""
    writer = live.new_stream()
    session_id = writer.stream_id

    def publish(sequence: int) -> int:
        chunk = delta_input(session_id)
        began = time.perf_counter_ns()
        _check_sequence(writer.write(chunk), sequence)
        return began

    return _Side(
        label=label,
        publish=publish,
        subscribe=partial(subscriber, live.server, live.cookie, session_id),
        finish=partial(get_stream_manager().end_stream, session_id),
        fanout=Fanout(size),
        must_listen_first=False,
    )


def _raw_side(
    live: Live, publisher: redis.Redis, listener: aioredis.Redis, size: int, *, durable: bool
) -> _Side:
    """Return a raw side: PUBLISH to raw subscribers, after a raw durable write if `durable`."""
    channel = f"bench.raw.{uuid.uuid4().hex}"
    # A durable side writes to a stream of its own; either way chunks carry a session id.
    session_id = live.new_stream().stream_id if durable else str(uuid.uuid4())

    def publish(sequence: int) -> int:
        chunk = wire_delta(session_id)
        began = time.perf_counter_ns()
        if durable:
            _check_sequence(live.raw_writer.write(session_id, chunk), sequence)
        event = {"type": "chunk", "sequence": sequence, "chunk": chunk}
        publisher.publish(channel, json.dumps(event))
        return began

    return _Side(
        label="raw write+publish" if durable else "raw pub/sub",
        publish=publish,
        subscribe=partial(redis_subscriber, listener, channel),
        finish=partial(publisher.publish, channel, json.dumps({"type": "end"})),
        fanout=Fanout(size),
        must_listen_first=True,
    )


def _check_sequence(stored: int, expected: int) -> None:
    """Raise if a write got another sequence than the one its subscribers wait for."""
    if stored != expected:
        raise RuntimeError(f"A write got sequence {stored}; {expected} was expected.")


async def _measure(
    sides: list[_Side], executor: Executor, pacing: Pacing, listener: aioredis.Redis
) -> None:
    """Connect every side's subscribers, write the paced chunks, end, and check deliveries."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.TaskGroup() as subscribers:
            for side in sides:
                for received in side.fanout.received:
                    subscribers.create_task(side.subscribe(side.fanout, received))
            for side in sides:
                if side.must_listen_first:
                    await side.fanout.joined()
            await _alternate(sides, executor, pacing)
            for side in sides:
                await loop.run_in_executor(executor, side.finish)
                await side.fanout.finished()
    finally:
        await listener.aclose()
    for side in sides:
        side.check_delivered()


async def _alternate(sides: list[_Side], executor: Executor, pacing: Pacing) -> None:
    """Write each side's blocks in rotating order, one chunk at a time, waiting for its fan-out."""
    loop = asyncio.get_running_loop()
    for round_ in range(WARMUP_BLOCKS + pacing.blocks):
        first = round_ % len(sides)
        for side in [*sides[first:], *sides[:first]]:
            for _ in range(pacing.block):
                sequence = len(side.published) + 1
                side.fanout.expect(sequence)
                began = await loop.run_in_executor(executor, side.publish, sequence)
                side.published.append(sequence)
                if round_ >= WARMUP_BLOCKS:
                    side.began[sequence] = began
                await side.fanout.arrived()
                await asyncio.sleep(pacing.pause)


def _table(
    ours: _Side,
    pure: _Side,
    durable: _Side,
    subscribers: int,
    pacing: Pacing,
    target: float | None,
) -> Table:
    """Tabulate our latency percentiles against both raw sides'."""
    latencies = [side.latencies() for side in (ours, pure, durable)]
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
    noun = "subscriber" if subscribers == 1 else "subscribers"
    return Table(
        title=(
            f"delivery to {subscribers} {ours.label} {noun}, write start to arrival "
            f"({pacing.describe()})"
        ),
        rows=rows,
        notes=[
            f"every subscriber of every side received all {len(ours.published)} chunks once, "
            f"in order, then the end; {len(latencies[0]):,} latencies per side; "
            f"{sum(r.resumed for r in ours.fanout.received)} client reconnections"
        ],
        columns=(f"Helix {ours.label}", pure.label, durable.label),
    )
