"""Concurrent writers of one stream (DESIGN invariant 5): sequences are unique, gap-free and in
each writer's order, on every backend; the database backend proves it with real connections."""

import time

import pytest

from streams_app.backends.base import StreamManager
from streams_app.errors import StreamClosed
from tests.threads import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS = 6
WRITES = 60


def chunk(writer: int, n: int) -> dict:
    return {"type": "text_delta", "step": 0, "sessionId": "s-1", "delta": f"{writer}:{n}"}


def test_concurrent_writers_get_unique_gap_free_sequences(manager: StreamManager):
    manager.create_writer("st", "run-1", "researcher")

    def write(worker: int) -> list[int]:
        writer = manager.create_writer("st", "run-1", "researcher")
        sequences = []
        for n in range(0, WRITES, 3):  # Single writes and batches, interleaved.
            sequences.append(writer.write(chunk(worker, n)))
            sequences += writer.write_many([chunk(worker, n + 1), chunk(worker, n + 2)])
        return sequences

    results = run_in_threads(WRITERS, write)

    total = WRITERS * WRITES
    assert sorted(s for sequences in results for s in sequences) == list(range(1, total + 1))
    stored = manager.get_all_chunks("st")
    assert [item.sequence for item in stored] == list(range(1, total + 1))
    for worker, sequences in enumerate(results):
        mine = [item for item in stored if item.chunk["delta"].startswith(f"{worker}:")]
        # Each writer's chunks carry the sequences its writes returned, in its own order.
        assert [item.sequence for item in mine] == sequences
        assert [item.chunk["delta"] for item in mine] == [f"{worker}:{n}" for n in range(WRITES)]
    info = manager.get_stream_info("st")
    assert (info.total_chunks, info.latest_sequence) == (total, total)


def test_writes_racing_the_end_of_a_stream_land_before_it_or_are_refused(manager: StreamManager):
    writer = manager.create_writer("st", "run-1", "researcher")

    def write_or_end(worker: int) -> list[int | str]:
        if worker == 0:  # Ends the stream once writes are under way.
            while manager.get_stream_info("st").latest_sequence < WRITES:
                time.sleep(0.001)
            manager.end_stream("st", {"done": True})
            return []
        outcomes: list[int | str] = []
        deadline = time.monotonic() + 30
        # Write until refused, then twice more: a writer refused once stays refused.
        while outcomes.count("refused") < 3 and time.monotonic() < deadline:
            try:
                outcomes.append(writer.write(chunk(worker, len(outcomes))))
            except StreamClosed:
                outcomes.append("refused")
        return outcomes

    results = run_in_threads(WRITERS, write_or_end)

    accepted = sorted(o for outcomes in results for o in outcomes if o != "refused")
    stored = manager.get_all_chunks("st")
    # Every accepted write is stored, nothing else is, and sequences are gap-free.
    assert [item.sequence for item in stored] == accepted == list(range(1, len(accepted) + 1))
    assert manager.get_stream_info("st").status == "ended"
    assert all("refused" in outcomes for outcomes in results[1:])  # The end stopped them all.
    for outcomes in results[1:]:
        # Once a writer is refused, the stream stays ended for it.
        refused_from = outcomes.index("refused") if "refused" in outcomes else len(outcomes)
        assert set(outcomes[refused_from:]) <= {"refused"}
