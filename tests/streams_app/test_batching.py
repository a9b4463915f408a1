"""Batched chunk writes (`streams_app.backends.batching`) on the real database: a flusher thread
stores several streams' queued chunks in one call, within its delay; writes in a transaction go
straight through with it; a refusal the flusher meets reaches the writer's owner."""

import contextlib
import threading
import time

import pytest
from django.db import connection, connections, transaction

from streams_app.backends.batching import BatchedWriter, Flusher
from streams_app.backends.orm import ORMStreamManager
from streams_app.errors import UnstorableChunks, WriterSuperseded
from tests.cut_connections import cut_own_connection
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DELAY = 0.05


class CountingManager(ORMStreamManager):
    """The database backend, counting its calls to `append_batches` and what they carried."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def append_batches(self, batches):
        with self.lock:
            self.calls.append([batch.stream_id for batch in batches])
        return super().append_batches(batches)


def text(label: str) -> dict:
    return {"type": "text_delta", "step": 1, "sessionId": "s-1", "delta": label}


def stored(manager, stream_id: str) -> list[str]:
    return [c.chunk["delta"] for c in manager.get_all_chunks(stream_id)]


@pytest.fixture
def manager() -> CountingManager:
    return CountingManager()


@pytest.fixture
def flusher() -> Flusher:
    return Flusher(delay=DELAY)


def batched(manager, flusher, stream_id: str, *, exclusive: bool = False) -> BatchedWriter:
    writer = manager.create_writer(stream_id, "run-1", "researcher", exclusive=exclusive)
    return BatchedWriter(writer, flusher)


def test_queued_chunks_of_several_streams_are_stored_together_within_the_delay(manager, flusher):
    writers = [batched(manager, flusher, name) for name in ("one", "two", "three")]

    written_at = time.monotonic()
    for n in range(3):
        for writer in writers:
            writer.write(text(f"{writer.stream_id}-{n}"))
    assert all(stored(manager, w.stream_id) == [] for w in writers)  # Queued, not stored yet.
    wait_for(
        lambda: all(len(stored(manager, w.stream_id)) == 3 for w in writers),
        timeout=5.0,
        what="every chunk stored",
        interval=0.01,
    )

    assert time.monotonic() - written_at < DELAY + 1.0
    assert manager.calls == [["one", "two", "three"]]  # One call for every stream's chunks.
    for writer in writers:
        assert stored(manager, writer.stream_id) == [f"{writer.stream_id}-{n}" for n in range(3)]
        writer.flush()  # Waits out the flusher's bookkeeping: the rows commit before it is done.
        assert writer.last_sequence == 3


def test_writes_in_a_transaction_go_through_after_the_queued_ones_and_commit_with_it(
    manager, flusher
):
    writer = batched(manager, flusher, "st")
    with writer.held():  # Keep the flusher off, so that the queued chunk is there to order.
        writer.write(text("queued"))
        with transaction.atomic():
            writer.write(text("in the commit"))
            assert stored(manager, "st") == ["queued", "in the commit"]
            assert writer.last_sequence == 2

    def failing_commit() -> None:
        with transaction.atomic():
            writer.write(text("rolled back"))
            raise RuntimeError("the commit fails")

    with pytest.raises(RuntimeError):
        failing_commit()

    assert stored(manager, "st") == ["queued", "in the commit"]
    assert manager.calls == []  # The flusher wrote none of them.


def test_flush_stores_what_is_queued_now_and_counts_it_in_the_last_sequence(manager):
    writer = batched(manager, Flusher(delay=60), "st")  # Its flusher would wait a minute.

    writer.write_many([text("a"), text("b")])
    writer.flush()

    assert stored(manager, "st") == ["a", "b"]
    assert writer.last_sequence == 2
    writer.flush()  # Nothing queued: nothing to do.
    assert stored(manager, "st") == ["a", "b"]


def test_a_held_writer_is_left_alone_until_it_is_let_go(manager, flusher):
    writer = batched(manager, flusher, "st")

    with writer.held():
        writer.write(text("a"))
        time.sleep(DELAY * 4)
        assert stored(manager, "st") == []
    wait_for(lambda: stored(manager, "st") == ["a"], timeout=5.0, what="the chunk", interval=0.01)


def test_a_refusal_the_flusher_met_is_raised_to_the_writers_owner(manager, flusher):
    writer = batched(manager, flusher, "st", exclusive=True)
    manager.create_writer("st", "run-2", "researcher", exclusive=True)  # A newer attempt.

    writer.write(text("too late"))

    def refused() -> bool:
        try:
            writer.flush()
        except WriterSuperseded:
            return True
        return False

    # The flusher took it; a flush now waits for its result.
    wait_for(lambda: manager.calls, timeout=5.0, what="the flusher's write", interval=0.01)
    assert refused()
    assert manager.calls == [["st"]]
    with pytest.raises(WriterSuperseded):
        writer.write(text("later still"))
    assert stored(manager, "st") == []


@pytest.mark.postgres
def test_steps_waiting_on_the_flusher_leave_it_a_pooled_connection(manager, flusher):
    """More steps than the pool has connections each hold one and then wait on the flusher's
    write of their chunks, as a commit does; the flusher needs a connection for that write."""
    steps = connection.pool.max_size + 2
    writers = [batched(manager, flusher, f"pooled-{n}") for n in range(steps)]
    all_hold_one = threading.Barrier(steps)
    done: list[str] = []

    def step(writer: BatchedWriter) -> None:
        try:
            writer.write(text("delta"))
            with contextlib.suppress(threading.BrokenBarrierError):
                all_hold_one.wait(timeout=2)  # Some wait for a connection: the pool is too small.
            with connection.cursor() as cursor:  # Talk to the database: hold a connection.
                cursor.execute("SELECT 1")
            time.sleep(DELAY * 2)  # The flusher takes the queued chunks meanwhile.
            with writer.held():  # The commit: it waits out the flusher's write.
                writer.flush()
            done.append(writer.stream_id)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=step, args=(writer,)) for writer in writers]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert sorted(done) == sorted(w.stream_id for w in writers)
    assert time.monotonic() - started < 10  # Far within the pool's 30 s wait for a connection.
    assert all(stored(manager, w.stream_id) == ["delta"] for w in writers)


class FailingOnceManager(CountingManager):
    """The database backend, whose first `append_batches` call raises `error` unstored."""

    def __init__(self, error: Exception, **options) -> None:
        super().__init__(**options)
        self.error: Exception | None = error

    def append_batches(self, batches):
        with self.lock:
            error, self.error = self.error, None
        if error is not None:
            raise error
        return super().append_batches(batches)


def returns_within(call, seconds: float) -> bool:
    """Run `call` in a thread; return whether it returned within `seconds`."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_a_fault_in_a_batch_write_leaves_the_chunks_to_their_step_and_the_flusher_running(
    flusher,
):
    manager = FailingOnceManager(RuntimeError("a fault of the backend's"))
    first = batched(manager, flusher, "first")

    first.write_many([text("a"), text("b")])
    wait_for(lambda: manager.error is None, timeout=5.0, what="the failed write", interval=0.01)
    assert stored(manager, "first") == []

    second = batched(manager, flusher, "second")
    second.write(text("c"))  # The flusher still writes.
    wait_for(lambda: stored(manager, "second") == ["c"], timeout=5.0, what="the later chunk")
    assert manager.calls == [["second"]]  # No try again of the failed batch.
    assert returns_within(first.flush, 5.0)  # The step's flush is not locked out...
    assert stored(manager, "first") == ["a", "b"]  # ...and stores what was given back, in order.
    assert first.last_sequence == 2


class CutOnceManager(CountingManager):
    """The database backend, whose first `append_batches` call finds its connection cut."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.cut = False

    def append_batches(self, batches):
        with self.lock:
            cut, self.cut = self.cut, True
        if not cut:  # A failover: the server ends the flusher's connection under it.
            cut_own_connection()
        return super().append_batches(batches)


@pytest.mark.postgres
def test_a_batch_write_whose_connection_is_cut_is_tried_again(flusher):
    manager = CutOnceManager()
    writer = batched(manager, flusher, "st")

    writer.write_many([text("a"), text("b")])

    wait_for(lambda: stored(manager, "st") == ["a", "b"], timeout=10.0, what="the chunks")
    assert manager.calls == [["st"], ["st"]]  # The first write failed, the second stored.
    writer.flush()
    assert writer.last_sequence == 2


@pytest.mark.postgres
def test_chunks_the_database_refuses_hold_up_no_other_stream_and_reach_their_step(manager):
    flusher = Flusher(delay=0.5)  # Both writes join one batch, however slow the host.
    refused = batched(manager, flusher, "refused")
    fine = batched(manager, flusher, "fine")

    refused.write(text("a\x00b"))  # PostgreSQL stores no NUL character in a text.
    fine.write(text("c"))

    wait_for(lambda: stored(manager, "fine") == ["c"], timeout=5.0, what="the other stream's")
    assert manager.calls == [["refused", "fine"], ["refused"], ["fine"]]
    with pytest.raises(UnstorableChunks) as error:
        refused.flush()
    assert "\\u0000" not in error.value.message  # The database's words, not the data it quotes.
    with pytest.raises(UnstorableChunks):  # Nothing of it is queued, for ever.
        refused.write(text("d"))
    assert stored(manager, "refused") == []
