"""Stream retention: finished streams older than the retention period are purged; a session
and its stream are deleted together, even while a step commits."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from sessions_app.stores import get_session_store
from streams_app.backends.orm import ORMStreamManager
from streams_app.models import Stream
from streams_app.services import purge_expired_streams, session_and_stream_delete
from tests.step_commits import race_a_step_commit
from tests.streams_app.writing import writer_with


@pytest.mark.django_db
def test_purge_uses_the_configured_retention_and_spares_live_streams():
    manager = ORMStreamManager()
    for stream_id in ("ended-long-ago", "ended-lately", "active-long-ago"):
        writer_with(manager, "x", stream_id=stream_id)
    manager.end_stream("ended-long-ago")
    manager.end_stream("ended-lately")
    eight_days_ago = timezone.now() - timedelta(days=8)
    Stream.objects.filter(id__in=["ended-long-ago", "active-long-ago"]).update(
        updated_at=eight_days_ago
    )

    with override_settings(HELIX={"STREAM_RETENTION_DAYS": 30}):
        assert purge_expired_streams(manager=manager) == 0
    with override_settings(HELIX={"STREAM_RETENTION_DAYS": 7}):
        assert purge_expired_streams(manager=manager) == 1

    assert sorted(Stream.objects.values_list("id", flat=True)) == [
        "active-long-ago",
        "ended-lately",
    ]


@pytest.mark.django_db
def test_purge_takes_an_explicit_clock_and_retention():
    manager = ORMStreamManager()
    writer_with(manager, "x")
    manager.end_stream("st")

    later = timezone.now() + timedelta(hours=2)

    assert purge_expired_streams(manager=manager, now=later, retention=timedelta(hours=3)) == 0
    assert purge_expired_streams(manager=manager, now=later, retention=timedelta(hours=1)) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_deleting_a_session_while_its_step_commits_outlasts_the_deadlock():
    store, manager = get_session_store(), ORMStreamManager()
    session = store.create_session(None, agent_type="researcher")
    writer_with(manager, "x", stream_id=session.stream_id)

    failures = race_a_step_commit(
        manager,
        session.session_id,
        session.stream_id,
        lambda: session_and_stream_delete(
            session_id=session.session_id, stream_id=session.stream_id
        ),
    )

    # PostgreSQL aborts the deletion, which waited first; it goes again after the commit.
    assert failures == []
    assert store.load_state(session.session_id) is None
    assert manager.get_stream_info(session.stream_id) is None
