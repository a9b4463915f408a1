"""Group commit for streamed chunks: a process's writers share batched writes.

A step streams its model's deltas as they arrive. Written one statement each, a hundred steps in
flight in one worker would cost a hundred statements and doorbell rings per delta-time; batched,
they cost one. A `BatchedWriter` wraps a step's `StreamWriter`: `write` validates the chunk and
queues it, and this process's flusher thread stores every queued chunk of every stream in one
`StreamManager.append_batches` call. The flusher gathers for `delay` seconds after the first
chunk of a batch, then writes; chunks that arrive during a write go in the next. So a chunk is
stored and rung within `delay` plus one batch's write of its `write` (about 5 ms plus a few ms
on a busy worker), and the busier the process, the more each write carries.

Writes made inside a transaction (a step's commit) go straight through, after what is queued,
so they commit with it. `flush` writes what is queued now, in the caller's thread: the step
calls it before reading `last_sequence` for its checkpoint. A refusal the flusher met
(`WriterSuperseded`, `StreamClosed`, ...) is raised by the writer's next `write` or `flush`, as
is `UnstorableChunks` when the database refuses a writer's chunks as they are: the flusher then
stores each stream's alone, so that the others are stored. A write that fails otherwise gives
its chunks back to their writers: the flusher tries again shortly when the database is away,
and leaves them to the step's own `flush` when the fault is ours.
"""

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import DatabaseError, Error, OperationalError, connection, connections

from sessions_app.connections import release_connection
from sessions_app.errors import HelixError
from streams_app.backends.base import StreamWriter
from streams_app.backends.types import ChunkBatch
from streams_app.chunks import Chunk
from streams_app.errors import UnstorableChunks

logger = logging.getLogger(__name__)

DEFAULT_DELAY = 0.005
# After a failed batch write (the database away), the flusher waits this long and tries again.
RETRY_PAUSE = 0.5


class BatchedWriter:
    """A `StreamWriter` whose writes outside a transaction are stored in batched writes."""

    def __init__(self, writer: StreamWriter, flusher: "Flusher | None" = None) -> None:
        self.writer = writer
        self.flusher = flusher or process_flusher()
        self._queue = threading.Lock()  # Guards `_queued` and `_refusal`.
        self._queued: list[dict[str, Any]] = []
        self._refusal: HelixError | None = None
        # Held by whoever writes this writer's chunks: the flusher, or the step itself.
        self._writing = threading.RLock()

    @property
    def stream_id(self) -> str:
        return self.writer.stream_id

    @property
    def last_sequence(self) -> int:
        """Return the sequence of the last chunk stored; `flush` first to count every write."""
        return self.writer.last_sequence

    def write(self, chunk: Chunk | Mapping[str, Any]) -> None:
        """Validate a chunk and queue it, or store it now inside a transaction."""
        self.write_many([chunk])

    def write_many(self, chunks: Sequence[Chunk | Mapping[str, Any]]) -> None:
        """Validate chunks and queue them in order, or store them now inside a transaction."""
        wire = self.writer.to_wire(chunks)
        if connection.in_atomic_block:  # They must commit with the caller's transaction.
            with self._writing:
                self._flush_queued()
                self.writer.append_wire(wire)
            return
        with self._queue:
            self._raise_refusal()
            self._queued += wire
        self.flusher.enqueue(self)

    def flush(self) -> None:
        """Store every queued chunk now, in the caller's thread; raise a refusal met earlier."""
        with self._writing:  # Waits out the flusher's write of earlier ones: order holds.
            self._flush_queued()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep the flusher off this writer for the block; what is queued waits for `flush`.

        A step holds its writer across its commit, from before the transaction begins: on
        SQLite, whose transactions lock the whole database, a flusher write waiting on the
        commit while the commit waited on that write would stall both. For the same reason,
        when the flusher is writing this writer's chunks the caller gives its pooled connection
        back before it waits: the flusher's write may need one, and with every pooled
        connection held by steps waiting on it, it would wait out the pool's timeout.
        """
        if not self._writing.acquire(blocking=False):
            if not connection.in_atomic_block:
                release_connection()
            self._writing.acquire()
        try:
            yield
        finally:
            self._writing.release()
        with self._queue:
            queued = bool(self._queued) and self._refusal is None
        if queued:
            self.flusher.enqueue(self)

    def close(self) -> None:
        """Store what is queued and close the writer."""
        self.flush()
        self.writer.close()

    def _flush_queued(self) -> None:
        """Store the queued chunks; the caller holds `_writing`."""
        with self._queue:
            self._raise_refusal()
            wire, self._queued = self._queued, []
        if not wire:
            return
        try:
            self.writer.append_wire(wire)
        except HelixError:  # Refused: they are not written, and never will be.
            raise
        except BaseException:
            self._give_back(wire)
            raise

    def _raise_refusal(self) -> None:
        if self._refusal is not None:
            raise self._refusal

    def _take(self) -> list[dict[str, Any]]:
        """Return the queued chunks for the flusher to write, holding `_writing` if any.

        Nothing while the step holds its writer: its flush writes them.
        """
        if not self._writing.acquire(blocking=False):
            return []
        with self._queue:
            wire, self._queued = ([], self._queued) if self._refusal else (self._queued, [])
        if not wire:
            self._writing.release()
        return wire

    def _stored(self, sequences: list[int] | HelixError) -> None:
        """Take the flusher's result for the chunks it took, and let go of `_writing`."""
        with self._queue:
            if isinstance(sequences, HelixError):
                self._refusal = sequences
            else:
                self.writer.last_sequence = sequences[-1]
        self._writing.release()

    def _give_back(self, wire: list[dict[str, Any]]) -> None:
        """Queue chunks that could not be written again, before those queued since."""
        with self._queue:
            self._queued = wire + self._queued


class Flusher:
    """A thread that stores the queued chunks of every writer in this process, batched."""

    def __init__(self, delay: float = DEFAULT_DELAY) -> None:
        self.delay = delay
        self._waiting: dict[int, BatchedWriter] = {}  # By id, in the order they queued.
        self._wake = threading.Condition()
        threading.Thread(target=self._run, name="helix-chunk-flusher", daemon=True).start()

    def enqueue(self, writer: BatchedWriter) -> None:
        """Have the writer's queued chunks written in the next batch."""
        with self._wake:
            self._waiting.setdefault(id(writer), writer)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._waiting:
                    self._wake.wait()
            time.sleep(self.delay)  # Let the chunks that come with it join the batch.
            with self._wake:
                writers = list(self._waiting.values())
                self._waiting.clear()
            self._write(writers)

    def _write(self, writers: list[BatchedWriter]) -> None:
        by_manager: dict[int, list[tuple[BatchedWriter, list[dict[str, Any]]]]] = {}
        for writer in writers:
            if wire := writer._take():
                by_manager.setdefault(id(writer.writer.manager), []).append((writer, wire))
        try:
            for taken in by_manager.values():
                self._append(taken)
        finally:
            release_connection()

    def _append(self, taken: list[tuple[BatchedWriter, list[dict[str, Any]]]]) -> None:
        """Store the writers' taken chunks in one call; give them back if it fails."""
        batches = [ChunkBatch(w.stream_id, wire, w.writer.epoch) for w, wire in taken]
        try:
            results = taken[0][0].writer.manager.append_batches(batches)
        except Exception as error:  # Nothing may stop the flusher: every step waits on it.
            self._failed(taken, error)
            return
        for (writer, _), result in zip(taken, results, strict=True):
            writer._stored(result)
            if writer._queued:  # Written meanwhile: the next batch takes them.
                self.enqueue(writer)

    def _failed(
        self, taken: list[tuple[BatchedWriter, list[dict[str, Any]]]], error: Exception
    ) -> None:
        """Deal with the failed write of the writers' taken chunks."""
        if isinstance(error, DatabaseError) and not isinstance(error, OperationalError):
            # The database refused the data itself (a NUL character in a text, say), and would
            # again: each stream alone, so that one stream's chunks hold up no other's.
            if len(taken) > 1:
                for one in taken:
                    self._append([one])
                return
            writer, _ = taken[0]
            # Its own words, not the data it quotes in its detail.
            reason = getattr(getattr(error.__cause__, "diag", None), "message_primary", None)
            refusal = UnstorableChunks(writer.stream_id, reason or type(error).__name__)
            logger.warning("%s", refusal.message)
            writer._stored(refusal)  # Its step meets it at its next write or flush.
            return
        # Else the chunks go back to their writers, ahead of any queued since, and the
        # connection is dropped in case it broke.
        for writer, wire in taken:
            writer._give_back(wire)
            writer._writing.release()
        connections.close_all()
        if not isinstance(error, Error):
            # A fault of ours: no try again. Each step's own flush, at its commit at the latest,
            # writes its chunks or meets the error where it fails the step.
            logger.exception("Could not store the chunks of %d streams", len(taken))
            return
        # The database is away or dropped the connection: try again shortly.
        logger.warning("Could not store the chunks of %d streams", len(taken), exc_info=True)
        time.sleep(RETRY_PAUSE)
        for writer, _ in taken:
            self.enqueue(writer)


_flushers: dict[int, Flusher] = {}
_flushers_lock = threading.Lock()


def process_flusher() -> Flusher:
    """Return this process's flusher; a forked child starts its own."""
    with _flushers_lock:
        pid = os.getpid()
        if pid not in _flushers:
            _flushers.clear()
            _flushers[pid] = Flusher()
        return _flushers[pid]
