"""The `StreamManager` contract (reference 003 and 000), in Python.

Streams are append-only logs of chunks, each with a per-stream sequence that is assigned once
and never reused. Writers append; readers replay what is stored after their cursor and then
follow new chunks as they are committed. Sync methods have `a`-prefixed async twins; readers are
async iterators of `StreamEvent`s.

Sequences never go back. When chunks are taken away on purpose (`cleanup_to_step`,
`reset_stream`) the next write also skips one sequence, so a reader that had already received a
retracted chunk can never mistake what follows for a continuation: it receives a
`ResyncEvent` instead. The same event tells a reader that chunks it had not yet read were
trimmed by the `max_chunks` cap. A reader is never left with a silent gap.
"""

import abc
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sessions_app.errors import HelixError
from sessions_app.stores.base import async_twin
from streams_app.backends.reader import StreamReader, Subscription
from streams_app.backends.types import (
    TERMINAL_STATUSES,
    ChunkBatch,
    ChunkPage,
    SequencedChunk,
    Snapshot,
    StreamInfo,
    StreamStatus,
)
from streams_app.chunks import Chunk, chunk_to_wire
from streams_app.errors import StreamClosed, StreamNotFound, WriterSuperseded
from streams_app.metrics import CHUNKS_WRITTEN


class StreamWriter:
    """Appends validated chunks to one stream; closing it closes the writer, not the stream."""

    def __init__(
        self,
        manager: "StreamManager",
        stream_id: str,
        run_id: str,
        agent_type: str,
        epoch: int | None = None,
        *,
        last_sequence: int = 0,
    ):
        self.manager = manager
        self.stream_id = stream_id
        self.run_id = run_id
        self.agent_type = agent_type
        self.epoch = epoch  # Set for exclusive writers only.
        # The stream's last sequence when the writer opened, then after each of its writes.
        self.last_sequence = last_sequence
        self.closed = False

    def write(self, chunk: Chunk | Mapping[str, Any]) -> int:
        """Validate and append one chunk; return its sequence."""
        return self.write_many([chunk])[0]

    def write_many(self, chunks: Sequence[Chunk | Mapping[str, Any]]) -> list[int]:
        """Validate and append chunks in order, in one write; return their sequences.

        Dict chunks without `agentType` get the writer's. Nothing is stored unless every
        chunk is valid.
        """
        return self.append_wire(self.to_wire(chunks))

    def to_wire(self, chunks: Sequence[Chunk | Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Return chunks validated, in wire form; dict chunks get the writer's agent type."""
        return [
            chunk_to_wire(
                {"agentType": self.agent_type, **chunk} if isinstance(chunk, Mapping) else chunk
            )
            for chunk in chunks
        ]

    def append_wire(self, wire: list[dict[str, Any]]) -> list[int]:
        """Append chunks `to_wire` returned, in one write; return their sequences."""
        if self.closed:
            raise RuntimeError(f"The writer of stream {self.stream_id!r} is closed.")
        if not wire:
            return []
        sequences = self.manager.append_chunks(self.stream_id, wire, epoch=self.epoch)
        self.last_sequence = sequences[-1]
        CHUNKS_WRITTEN.inc(len(sequences))
        return sequences

    def close(self) -> None:
        """Close this writer; the stream stays as it is."""
        self.closed = True

    awrite = async_twin(write)
    awrite_many = async_twin(write_many)
    aclose = async_twin(close)


class StreamManager(abc.ABC):
    """Streams of sequenced chunks: writers, resumable readers, status, cleanup and retention."""

    def __init__(self, *, max_chunks: int | None = None, poll_interval: float = 1.0) -> None:
        if max_chunks is not None and max_chunks < 1:
            raise ValueError("max_chunks must be at least 1.")
        self.max_chunks = max_chunks
        self.poll_interval = poll_interval

    # Writers and readers

    @abc.abstractmethod
    def create_writer(
        self, stream_id: str, run_id: str, agent_type: str, *, exclusive: bool = False
    ) -> StreamWriter:
        """Open the stream for a run, creating it if needed, and return a writer.

        A stream that had ended or failed becomes active again for the new run; its chunks and
        sequence carry on. An exclusive writer fences out the exclusive writers opened before
        it: their writes raise `WriterSuperseded`. The runtime opens one per step attempt, so a
        worker that lost its step can never add chunks after its successor cleaned up.
        """

    def create_reader(self, stream_id: str) -> StreamReader | None:
        """Return a reader from the first chunk, or `None` if the stream failed."""
        return self.create_resumable_reader(stream_id, from_sequence=0)

    def create_resumable_reader(
        self, stream_id: str, from_sequence: int = 0
    ) -> StreamReader | None:
        """Return a reader of the chunks after `from_sequence`, or `None` if the stream failed.

        A stream that does not exist yet reads as an empty active one: the reader waits for
        its first writer.
        """
        if from_sequence < 0:
            raise ValueError("from_sequence must not be negative.")
        info = self.get_stream_info(stream_id)
        if info is not None and info.status == StreamStatus.FAILED:
            return None
        return StreamReader(self, stream_id, from_sequence)

    # Stream control

    @abc.abstractmethod
    def append_chunks(
        self, stream_id: str, chunks: list[dict[str, Any]], *, epoch: int | None = None
    ) -> list[int]:
        """Append wire-form chunks (already validated, as writers pass them); return sequences.

        Raises `StreamNotFound` for a stream no writer opened, `StreamClosed` unless the stream
        is active, and `WriterSuperseded` if `epoch` (an exclusive writer's) is not the
        stream's latest. Readers are told after the chunks are stored.
        """

    def append_batches(self, batches: Sequence[ChunkBatch]) -> list[list[int] | HelixError]:
        """Append to several streams at once; return each batch's sequences or its refusal.

        Each batch is stored whole or not at all, as `append_chunks` stores it, and apart from
        the others: one refused with `StreamNotFound`, `StreamClosed` or `WriterSuperseded`
        gets that error in its place and the others are stored. A backend may store them all
        in one round trip; this default appends them one by one.
        """
        results: list[list[int] | HelixError] = []
        for batch in batches:
            try:
                results.append(self.append_chunks(batch.stream_id, batch.chunks, epoch=batch.epoch))
            except (StreamNotFound, StreamClosed, WriterSuperseded) as refused:
                results.append(refused)
        return results

    @abc.abstractmethod
    def end_stream(self, stream_id: str, final_output: Any = None) -> None:
        """End the stream; ending an ended stream does nothing."""

    @abc.abstractmethod
    def fail_stream(self, stream_id: str, error: str) -> None:
        """Fail the stream; failing a failed stream does nothing."""

    @abc.abstractmethod
    def pause_stream(self, stream_id: str) -> None:
        """Pause an active stream: writes are refused and readers wait."""

    @abc.abstractmethod
    def resume_stream(self, stream_id: str) -> None:
        """Make a paused stream active again."""

    @abc.abstractmethod
    def get_stream_info(self, stream_id: str) -> StreamInfo | None:
        """Return the stream's status and counts, or `None` if it does not exist."""

    # Content

    @abc.abstractmethod
    def get_chunks(self, stream_id: str, *, after_sequence: int = 0, limit: int = 100) -> ChunkPage:
        """Return up to `limit` chunks after `after_sequence`, in sequence order."""

    @abc.abstractmethod
    def get_all_chunks(self, stream_id: str) -> list[SequencedChunk]:
        """Return every stored chunk, in sequence order."""

    @abc.abstractmethod
    def get_chunks_from_step(self, stream_id: str, from_step: int) -> list[SequencedChunk]:
        """Return the stored chunks of `from_step` and later steps, in sequence order."""

    @abc.abstractmethod
    def read_snapshot(self, stream_id: str, after: int, limit: int) -> Snapshot:
        """Return what a reader whose cursor is `after` sees now (see `Snapshot`)."""

    @abc.abstractmethod
    def subscribe(self, stream_id: str) -> Subscription:
        """Return a subscription that wakes a reader when the stream changes."""

    # Cleanup and retention

    @abc.abstractmethod
    def cleanup_to_step(self, stream_id: str, step: int) -> int:
        """Delete the chunks of steps after `step` (crash recovery); return how many went."""

    @abc.abstractmethod
    def reset_stream(self, stream_id: str) -> None:
        """Delete every chunk and make the stream active, for a fresh execution."""

    @abc.abstractmethod
    def delete_stream(self, stream_id: str) -> bool:
        """Delete the stream and its chunks; return whether it existed."""

    @abc.abstractmethod
    def purge_streams(self, finished_before: datetime, *, limit: int | None = None) -> int:
        """Delete ended and failed streams last written before a time; return how many.

        With `limit`, delete at most that many, oldest first, so a caller can purge in batches
        that each hold their locks briefly.
        """

    def fail_streams(self, stream_ids: Collection[str], error: str) -> int:
        """Fail the active and paused streams among `stream_ids`; return how many there were.

        Unlike `fail_stream`, it need not ring the streams' readers: a sweep fails thousands
        of streams nobody reads, and a reader still learns of it on its next look at the
        database (`STREAM_POLL_INTERVAL`).
        """
        failed = 0
        for stream_id in stream_ids:
            info = self.get_stream_info(stream_id)
            if info is not None and info.status not in TERMINAL_STATUSES:
                self.fail_stream(stream_id, error)
                failed += 1
        return failed

    def delete_streams(self, stream_ids: Collection[str]) -> int:
        """Delete the streams among `stream_ids` and their chunks; return how many existed."""
        return sum(self.delete_stream(stream_id) for stream_id in stream_ids)

    acreate_writer = async_twin(create_writer)
    acreate_reader = async_twin(create_reader)
    acreate_resumable_reader = async_twin(create_resumable_reader)
    aappend_chunks = async_twin(append_chunks)
    aappend_batches = async_twin(append_batches)
    aend_stream = async_twin(end_stream)
    afail_stream = async_twin(fail_stream)
    apause_stream = async_twin(pause_stream)
    aresume_stream = async_twin(resume_stream)
    aget_stream_info = async_twin(get_stream_info)
    aget_chunks = async_twin(get_chunks)
    aget_all_chunks = async_twin(get_all_chunks)
    aget_chunks_from_step = async_twin(get_chunks_from_step)
    aread_snapshot = async_twin(read_snapshot)
    acleanup_to_step = async_twin(cleanup_to_step)
    areset_stream = async_twin(reset_stream)
    adelete_stream = async_twin(delete_stream)
    apurge_streams = async_twin(purge_streams)
