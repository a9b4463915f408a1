"""On PostgreSQL a writer creates or reopens its stream in one statement, an append leaves the
stream's `updated_at` (when its status last changed) as it was, a reader's look at the store
is one statement, and a stream's finish is the statement the ORM compiles for it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from streams_app.backends.orm import ORMStreamManager
from streams_app.backends.rules import LIVE_STATUSES
from streams_app.backends.types import StreamStatus
from streams_app.models import Stream
from tests.streams_app.writing import text

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


def sent_sql(run) -> list[str]:
    """Return the SQL text of every statement `run` sends, before parameters are bound."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run()
    return sent


def test_finishing_a_stream_is_the_statement_the_orm_compiles_for_it():
    manager = ORMStreamManager()
    for stream_id in ("st", "other"):
        manager.create_writer(stream_id, "run-1", "researcher")
    now = timezone.now()

    def orm_finish(**fields):
        live = Stream.objects.filter(pk="none", status__in=LIVE_STATUSES)
        return lambda: live.update(status=StreamStatus.ENDED, updated_at=now, **fields)

    assert sent_sql(lambda: manager.end_stream("st", {"answer": 42})) == sent_sql(
        orm_finish(final_output=None)
    )
    assert sent_sql(lambda: manager.fail_stream("other", "The model is down.")) == sent_sql(
        orm_finish(error="")
    )
    ended, failed = manager.read_snapshot("st", 0, 10), manager.read_snapshot("other", 0, 10)
    assert (ended.status, ended.final_output) == (StreamStatus.ENDED, {"answer": 42})
    assert (failed.status, failed.error) == (StreamStatus.FAILED, "The model is down.")
