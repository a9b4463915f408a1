"""On PostgreSQL a writer creates or reopens its stream in one statement, and an append leaves
the stream's `updated_at` (when its status last changed) as it was."""

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
