"""`StreamManager` in process memory, for tests and single-process development.

It keeps the database backend's semantics (sequences never reused, a skipped sequence after a
retraction, the `max_chunks` cap, status rules and errors) and notifies its readers directly:
each reader's event loop is woken thread-safely from whichever thread wrote.
"""

import asyncio
import copy
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from sessions_app.stores.rules import check_identifier
from streams_app.backends import notices
from streams_app.backends.base import StreamManager, StreamWriter
from streams_app.backends.reader import Subscription
from streams_app.backends.rules import LIVE_STATUSES, check_can, notice_for
from streams_app.backends.types import ChunkPage, SequencedChunk, Snapshot, StreamInfo, StreamStatus
from streams_app.errors import StreamNotFound, WriterSuperseded


@dataclass(kw_only=True)
class _Stream:
    run_id: str
    agent_type: str
    status: StreamStatus = StreamStatus.ACTIVE
    last_sequence: int = 0
    trimmed_through: int = 0
    writer_epoch: int = 0
    final_output: Any = None
    error: str = ""
    chunks: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    created_at: datetime = field(default_factory=timezone.now)
    updated_at: datetime = field(default_factory=timezone.now)


class InMemoryStreamManager(StreamManager):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lock = threading.RLock()
        self._streams: dict[str, _Stream] = {}
        self._subscribers: dict[str, set[_MemorySubscription]] = {}

    def create_writer(
        self, stream_id: str, run_id: str, agent_type: str, *, exclusive: bool = False
    ) -> StreamWriter:
        check_identifier("stream id", stream_id)
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None:
                stream = self._streams[stream_id] = _Stream(run_id=run_id, agent_type=agent_type)
            else:
                reopened = stream.status != StreamStatus.ACTIVE
                stream.run_id, stream.agent_type = run_id, agent_type
                stream.status, stream.final_output, stream.error = StreamStatus.ACTIVE, None, ""
                if reopened:
                    stream.updated_at = timezone.now()
                    self._notify(stream_id, notices.changed_notice())
            if exclusive:
                stream.writer_epoch += 1
            epoch = stream.writer_epoch if exclusive else None
            last_sequence = stream.last_sequence
        return StreamWriter(self, stream_id, run_id, agent_type, epoch, last_sequence=last_sequence)

    def append_chunks(
        self, stream_id: str, chunks: list[dict[str, Any]], *, epoch: int | None = None
    ) -> list[int]:
        stored = [(chunk["step"], copy.deepcopy(chunk)) for chunk in chunks]
        with self._lock:
            stream = self._get(stream_id)
            if epoch is not None and epoch != stream.writer_epoch:
                raise WriterSuperseded(stream_id)
            check_can(stream_id, stream.status, "write to", {StreamStatus.ACTIVE})
            first = stream.last_sequence + 1
            stream.chunks.extend((first + i, step, chunk) for i, (step, chunk) in enumerate(stored))
            stream.last_sequence += len(stored)
            self._trim(stream)
            sequenced = [(sequence, chunk) for sequence, _, chunk in stream.chunks[-len(stored) :]]
            self._notify(stream_id, notice_for(sequenced))
            return [sequence for sequence, _ in sequenced]

    def end_stream(self, stream_id: str, final_output: Any = None) -> None:
        self._finish(stream_id, StreamStatus.ENDED, "end", final_output=copy.deepcopy(final_output))

    def fail_stream(self, stream_id: str, error: str) -> None:
        self._finish(stream_id, StreamStatus.FAILED, "fail", error=error)

    def pause_stream(self, stream_id: str) -> None:
        self._move(stream_id, StreamStatus.ACTIVE, StreamStatus.PAUSED, "pause")

    def resume_stream(self, stream_id: str) -> None:
        self._move(stream_id, StreamStatus.PAUSED, StreamStatus.ACTIVE, "resume")

    def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None:
                return None
            return StreamInfo(
                stream_id=stream_id,
                status=stream.status,
                total_chunks=len(stream.chunks),
                latest_sequence=stream.last_sequence,
                run_id=stream.run_id or None,
                agent_type=stream.agent_type or None,
                error=stream.error or None,
                created_at=stream.created_at,
                updated_at=stream.updated_at,
            )

    def get_chunks(self, stream_id: str, *, after_sequence: int = 0, limit: int = 100) -> ChunkPage:
        with self._lock:
            stream = self._get(stream_id)
            after = [c for c in stream.chunks if c[0] > after_sequence]
            return ChunkPage(
                chunks=_sequenced(after[:limit]),
                has_more=len(after) > limit,
                latest_sequence=stream.last_sequence,
            )

    def get_all_chunks(self, stream_id: str) -> list[SequencedChunk]:
        with self._lock:
            return _sequenced(self._get(stream_id).chunks)

    def get_chunks_from_step(self, stream_id: str, from_step: int) -> list[SequencedChunk]:
        with self._lock:
            return _sequenced([c for c in self._get(stream_id).chunks if c[1] >= from_step])

    def read_snapshot(self, stream_id: str, after: int, limit: int) -> Snapshot:
        with self._lock:
            stream = self._streams.get(stream_id) or _Stream(run_id="", agent_type="")
            retained = [c[0] for c in stream.chunks]
            retracted_to = None
            if after > stream.trimmed_through and after not in retained:
                retracted_to = max((s for s in retained if s < after), default=0)
            following = [c for c in stream.chunks if c[0] > after]
            return Snapshot(
                status=stream.status,
                trimmed_through=stream.trimmed_through,
                final_output=copy.deepcopy(stream.final_output),
                error=stream.error,
                chunks=_sequenced(following[:limit]),
                complete=len(following) <= limit,
                cursor_retracted_to=retracted_to,
            )

    def subscribe(self, stream_id: str) -> Subscription:
        return _MemorySubscription(self, stream_id)

    def cleanup_to_step(self, stream_id: str, step: int) -> int:
        with self._lock:
            stream = self._get(stream_id)
            kept = [c for c in stream.chunks if c[1] <= step]
            removed = len(stream.chunks) - len(kept)
            if removed:
                self._retract(stream_id, stream, kept)
            return removed

    def reset_stream(self, stream_id: str) -> None:
        with self._lock:
            stream = self._get(stream_id)
            stream.status, stream.final_output, stream.error = StreamStatus.ACTIVE, None, ""
            stream.trimmed_through = 0
            self._retract(stream_id, stream, [])

    def delete_stream(self, stream_id: str) -> bool:
        with self._lock:
            return self._streams.pop(stream_id, None) is not None

    def purge_streams(self, finished_before: datetime, *, limit: int | None = None) -> int:
        with self._lock:
            finished = sorted(
                (stream.updated_at, stream_id)
                for stream_id, stream in self._streams.items()
                if stream.status in (StreamStatus.ENDED, StreamStatus.FAILED)
                and stream.updated_at < finished_before
            )
            doomed = [stream_id for _, stream_id in finished[:limit]]
            for stream_id in doomed:
                del self._streams[stream_id]
            return len(doomed)

    # Internals; callers hold the lock.

    def _get(self, stream_id: str) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotFound(stream_id)
        return stream

    def _finish(self, stream_id: str, status: StreamStatus, action: str, **fields: Any) -> None:
        with self._lock:
            stream = self._get(stream_id)
            if stream.status == status:
                return
            check_can(stream_id, stream.status, action, LIVE_STATUSES)
            stream.status = status
            for name, value in fields.items():
                setattr(stream, name, value)
            stream.updated_at = timezone.now()
            self._notify(stream_id, notices.changed_notice())

    def _move(self, stream_id: str, source: StreamStatus, target: StreamStatus, action: str):
        with self._lock:
            stream = self._get(stream_id)
            if stream.status == target:
                return
            check_can(stream_id, stream.status, action, {source})
            stream.status = target
            stream.updated_at = timezone.now()
            self._notify(stream_id, notices.changed_notice())

    def _trim(self, stream: _Stream) -> None:
        excess = 0 if self.max_chunks is None else len(stream.chunks) - self.max_chunks
        if excess > 0:
            stream.trimmed_through = stream.chunks[excess - 1][0]
            del stream.chunks[:excess]

    def _retract(self, stream_id: str, stream: _Stream, kept: list) -> None:
        stream.chunks = kept
        stream.last_sequence += 1  # Skip one: nothing after a retraction continues a cursor.
        stream.updated_at = timezone.now()
        self._notify(stream_id, notices.changed_notice())

    def _notify(self, stream_id: str, notice: dict[str, Any]) -> None:
        for subscription in self._subscribers.get(stream_id, ()):
            subscription.deliver(copy.deepcopy(notice))


def _sequenced(chunks: list[tuple[int, int, dict[str, Any]]]) -> list[SequencedChunk]:
    return [SequencedChunk(sequence, copy.deepcopy(chunk)) for sequence, _, chunk in chunks]


class _MemorySubscription(Subscription):
    def __init__(self, manager: InMemoryStreamManager, stream_id: str) -> None:
        self.manager = manager
        self.stream_id = stream_id
        self._queue: notices.NoticeQueue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._queue = notices.NoticeQueue()
        self._loop = asyncio.get_running_loop()
        with self.manager._lock:
            self.manager._subscribers.setdefault(self.stream_id, set()).add(self)

    def deliver(self, notice: dict[str, Any]) -> None:
        """Queue a notice from any thread."""
        self._loop.call_soon_threadsafe(self._queue.push, notice)

    async def wait(self, timeout: float) -> list[dict[str, Any]] | None:
        return await self._queue.wait(timeout)

    async def close(self) -> None:
        with self.manager._lock:
            self.manager._subscribers.get(self.stream_id, set()).discard(self)
