"""The resumable reader every stream backend shares.

A reader keeps a cursor: the sequence of the last chunk it delivered. It looks at the store
(`StreamManager.read_snapshot`) for what follows, then waits on its subscription. A notice that
carries chunks continuing exactly from the cursor is delivered as it is; anything else (a gap, a
status change, a lost notice noticed by the poll timer) sends the reader back to the store, the
source of truth.

A quiet reader looks at the store after a poll interval in case a notice was lost. Readers of one
stream, woken together by its last notice, spread their looks by a random fraction of the
interval, and while the stream stays quiet each wait doubles up to a cap, so idle readers cost
the database little; any notice brings the interval back.
"""

import abc
import random
import time
from collections import deque
from typing import Any, Protocol

from channels.db import database_sync_to_async

from streams_app.backends import notices
from streams_app.backends.types import (
    TERMINAL_STATUSES,
    ChunkEvent,
    EndEvent,
    FailEvent,
    ResyncEvent,
    Snapshot,
    StreamEvent,
    StreamStatus,
)

# Chunks fetched per look at the store while replaying.
REPLAY_BATCH = 1000
# How far each quiet wait strays from its interval, either way, as a fraction of it.
POLL_JITTER = 0.25
# The longest quiet wait, in poll intervals.
MAX_POLL_BACKOFF = 8


def events_from_snapshot(cursor: int, snapshot: Snapshot) -> tuple[list[StreamEvent], int, bool]:
    """Return the events a snapshot gives a reader at `cursor`, its new cursor, and whether the
    stream is over for it."""
    events: list[StreamEvent] = []
    if cursor < snapshot.trimmed_through:
        cursor = snapshot.trimmed_through
        events.append(ResyncEvent(cursor, "trimmed"))
    elif snapshot.cursor_retracted_to is not None:
        cursor = snapshot.cursor_retracted_to
        events.append(ResyncEvent(cursor, "retracted"))
    for item in snapshot.chunks:
        events.append(ChunkEvent(item.sequence, item.chunk))
        cursor = item.sequence
    finished = snapshot.complete and snapshot.status in TERMINAL_STATUSES
    if finished:
        if snapshot.status == StreamStatus.ENDED:
            events.append(EndEvent(snapshot.final_output))
        else:
            events.append(FailEvent(snapshot.error))
    return events, cursor, finished


class Subscription(abc.ABC):
    """Wakes one reader when its stream changes. Notices may be lost; readers must not care."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Start listening; call before the reader's first look at the store."""

    @abc.abstractmethod
    async def wait(self, timeout: float) -> list[dict[str, Any]] | None:
        """Return the notices received (waiting up to `timeout` s for one), or `None`."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop listening."""


class SnapshotSource(Protocol):
    """What a reader needs of its stream manager (every `StreamManager` is one)."""

    poll_interval: float

    def read_snapshot(self, stream_id: str, after: int, limit: int) -> Snapshot: ...

    def subscribe(self, stream_id: str) -> "Subscription": ...


class StreamReader:
    """Async iterator of the events of one stream after a cursor; close it when done."""

    def __init__(self, manager: SnapshotSource, stream_id: str, from_sequence: int) -> None:
        self.manager = manager
        self.stream_id = stream_id
        self.cursor = from_sequence
        self.finished = False
        self._subscription = manager.subscribe(stream_id)
        self._started = False
        self._must_look = True
        self._quiet_wait = manager.poll_interval
        self._ready: deque[StreamEvent] = deque()

    def __aiter__(self) -> "StreamReader":
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._ready:
            if self.finished:
                await self.aclose()
                raise StopAsyncIteration
            self._ready.extend(await self.next_events())
        return self._ready.popleft()

    async def next_events(self, timeout: float | None = None) -> list[StreamEvent]:
        """Return the events available now, waiting up to `timeout` s (forever if `None`).

        Returns an empty list when the timeout passes first, or when the stream is over.
        """
        if self._ready:
            events = list(self._ready)
            self._ready.clear()
            return events
        if not self._started:
            await self._subscription.start()
            self._started = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if self._must_look:
                events = await self._look()
                if events:
                    return events
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            wait = self._quiet_wait * random.uniform(1 - POLL_JITTER, 1 + POLL_JITTER)
            received = await self._subscription.wait(
                wait if remaining is None else min(wait, remaining)
            )
            if received is None:  # Quiet: a notice may have been lost. Look, then wait longer.
                self._must_look = True
                self._quiet_wait = min(
                    2 * self._quiet_wait, MAX_POLL_BACKOFF * self.manager.poll_interval
                )
                continue
            self._quiet_wait = self.manager.poll_interval
            events = self._follow(received)
            if events:
                return events
        return []

    async def aclose(self) -> None:
        """Stop following the stream."""
        self.finished = True
        if self._started:
            self._started = False
            await self._subscription.close()

    async def _look(self) -> list[StreamEvent]:
        """Read what follows the cursor from the store.

        Through `database_sync_to_async`: a reader lives as long as its client, so each look
        drops a connection that broke or outlived its age, as Channels consumers must.
        """
        snapshot = await database_sync_to_async(self.manager.read_snapshot)(
            self.stream_id, self.cursor, REPLAY_BATCH
        )
        events, self.cursor, self.finished = events_from_snapshot(self.cursor, snapshot)
        self._must_look = not snapshot.complete
        return events

    def _follow(self, received: list[dict[str, Any]]) -> list[StreamEvent]:
        """Deliver the chunks notices carry while they continue the cursor; else look again."""
        events: list[StreamEvent] = []
        for notice in received:
            if notice.get("type") != notices.CHUNKS:
                self._must_look = True
                break
            for sequence, chunk in notice["chunks"]:
                if sequence == self.cursor + 1:
                    events.append(ChunkEvent(sequence, chunk))
                    self.cursor = sequence
                elif sequence > self.cursor:
                    self._must_look = True
                    break
            if self._must_look:
                break
        return events
