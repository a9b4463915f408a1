"""On PostgreSQL a writer creates or reopens its stream in one statement, an append leaves the
stream's `updated_at` (when its status last changed) as it was, and a reader's look at the
store is one statement."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from streams_app.backends.orm import ORMStreamManager
from streams_app.backends.types import StreamStatus

from .test_manager_conformance import text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_writer_creates_or_reopens_its_stream_in_one_statement():
    manager = ORMStreamManager()

    with CaptureQueriesContext(connection) as creating:
        first = manager.create_writer("st", "run-1", "researcher", exclusive=True)
    created = (first.epoch, first.last_sequence)
    first.write(text("a"))
    manager.end_stream("st")
    ended = manager.get_stream_info("st")
    with CaptureQueriesContext(connection) as reopening:
        second = manager.create_writer("st", "run-2", "planner", exclusive=True)

    assert (len(creating), len(reopening)) == (1, 1)
    assert created == (1, 0)
    assert (second.epoch, second.last_sequence) == (2, 1)  # The first is fenced off.
    info = manager.get_stream_info("st")
    assert (info.status, info.run_id, info.agent_type) == (StreamStatus.ACTIVE, "run-2", "planner")
    assert info.updated_at > ended.updated_at  # Its status changed.


def test_appends_and_opening_an_active_stream_leave_its_updated_at():
    manager = ORMStreamManager()
    writer = manager.create_writer("st", "run-1", "researcher", exclusive=True)
    opened = manager.get_stream_info("st").updated_at

    writer.write(text("a"))
    manager.create_writer("st", "run-1", "researcher", exclusive=True).write(text("b"))

    info = manager.get_stream_info("st")
    assert info.latest_sequence == 2
    assert info.updated_at == opened


def test_a_look_at_the_store_is_one_statement_that_reads_what_three_did():
    manager = ORMStreamManager()
    writer = manager.create_writer("st", "run-1", "researcher")
    for label in "abc":
        writer.write(text(label, step=1))
    writer.write(text("d", step=2))
    manager.cleanup_to_step("st", 1)  # Takes "d" away: a reader past it goes back.
    manager.end_stream("st", final_output={"answer": [1, 2.5, None, "ü"]})

    looks = [("st", 1, 10), ("st", 0, 2), ("st", 4, 10), ("ghost", 0, 10)]
    with CaptureQueriesContext(connection) as capturing:
        snapshots = [manager.read_snapshot(*look) for look in looks]

    assert len(capturing) == len(looks) + 1  # The retraction's own look, as before.
    for (stream_id, after, limit), snapshot in zip(looks, snapshots, strict=True):
        row, following, _ = manager._read_apart(stream_id, after, limit)
        assert (snapshot.status, snapshot.trimmed_through, snapshot.final_output) == (
            row["status"],
            row["trimmed_through"],
            row["final_output"],
        )
        assert snapshot.error == row["error"]
        assert snapshot.chunks == following[:limit]
        assert snapshot.complete == (len(following) <= limit)
    assert snapshots[0].final_output == {"answer": [1, 2.5, None, "ü"]}
    assert [item.chunk["delta"] for item in snapshots[0].chunks] == ["b", "c"]
    assert snapshots[1].complete is False
    assert snapshots[2].cursor_retracted_to == 3
    assert (snapshots[3].status, snapshots[3].chunks) == (StreamStatus.ACTIVE, [])
