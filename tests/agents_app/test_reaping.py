"""The expired-session sweep end to end: `reap_expired_sessions`, the Celery task, and
`manage.py cleanup_expired_sessions`, on this run's database with its streams.

Runs started here send their first step to a private queue no worker reads, so a run stays
`running` until the test plays its step with the executor itself, as a late worker would.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from agents_app import tasks
from agents_app.operations.reaping import EXPIRED_FAILURE_REASON, reap_expired_sessions
from agents_app.runs import services
from agents_app.runtime import executor
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from streams_app.backends import get_stream_manager
from streams_app.chunks import TextDelta
from streams_app.errors import StreamClosed, StreamNotFound
from streams_app.models import Stream
from tests.threads import run_in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]

HOUR = timedelta(hours=1)


def expired_session(session_id: str, *, ago: timedelta = HOUR, chunks: int = 3) -> str:
    """Create a session that expired `ago`, whose stream holds `chunks` chunks; return it."""
    store = get_session_store()
    state = store.create_session(session_id, agent_type="counter", expires_at=timezone.now() - ago)
    writer = get_stream_manager().create_writer(state.stream_id, "run", "counter")
    for n in range(chunks):
        writer.write(text(session_id, f"{n} "))
    return state.stream_id


def text(session_id: str, delta: str) -> TextDelta:
    return TextDelta(step=1, session_id=session_id, agent_type="counter", delta=delta)


def running_expired_session(owner) -> tuple[str, str]:
    """Start a run of the counter agent whose session then expires; return (session, run)."""
    started = services.agent_start(user=owner, agent_type="counter", message="add 2")
    get_session_store().update_labels(started.session_id, {"expires_at": timezone.now() - HOUR})
    return started.session_id, started.run_id


def test_failed_sessions_fail_their_runs_and_streams_and_leave_others_alone(owner):
    session_id, _ = running_expired_session(owner)
    expired_session("idle")
    later = get_session_store().create_session(
        "later", agent_type="counter", expires_at=timezone.now() + HOUR
    )

    report = reap_expired_sessions(error="Nobody came back")

    store, streams = get_session_store(), get_stream_manager()
    assert sorted(report.reaped) == sorted([session_id, "idle"])
    for reaped in (session_id, "idle"):
        state = store.load_state(reaped)
        assert (state.status, state.error) == (SessionStatus.FAILED, "Nobody came back")
        assert state.failure_reason == EXPIRED_FAILURE_REASON
        info = streams.get_stream_info(state.stream_id)
        assert (info.status, info.error) == ("failed", "Nobody came back")
    assert store.get_current_run(session_id).status == RunStatus.FAILED
    assert store.load_state("later") == later


def test_delete_mode_removes_sessions_with_their_streams_and_chunks():
    stream_id = expired_session("gone", chunks=150)
    get_session_store().update_status("gone", SessionStatus.COMPLETED)
    kept = expired_session("kept", ago=-HOUR)

    report = reap_expired_sessions(delete=True)

    assert report.reaped == ["gone"]
    assert get_session_store().load_state("gone") is None
    assert get_stream_manager().get_stream_info(stream_id) is None
    assert get_stream_manager().get_chunks(kept).chunks


def test_limit_batches_progress_and_older_than():
    for n in range(25):
        expired_session(f"old-{n:02}", ago=HOUR + timedelta(minutes=n), chunks=0)
    expired_session("recent", ago=timedelta(minutes=10), chunks=0)
    seen = []

    report = reap_expired_sessions(
        batch_size=10,
        limit=15,
        older_than=timedelta(minutes=30),
        progress=lambda report: seen.append(len(report.reaped)),
    )

    assert seen == [10, 15]
    assert report.batches == 2
    assert report.reaped == [f"old-{n:02}" for n in range(24, 9, -1)]  # Oldest expiry first.
    rest = reap_expired_sessions(older_than=timedelta(minutes=30))
    assert sorted(rest.reaped) == [f"old-{n:02}" for n in range(10)]
    assert get_session_store().load_state("recent").status == SessionStatus.ACTIVE


def test_a_dry_run_lists_what_would_go_and_changes_nothing():
    for n in range(3):
        expired_session(f"old-{n}")
    get_session_store().update_status("old-0", SessionStatus.COMPLETED)
    before = {n: get_session_store().load_state(f"old-{n}") for n in range(3)}

    failing = reap_expired_sessions(dry_run=True)
    deleting = reap_expired_sessions(dry_run=True, delete=True, limit=2)

    assert sorted(failing.reaped) == ["old-1", "old-2"]
    assert len(deleting.reaped) == 2
    assert {n: get_session_store().load_state(f"old-{n}") for n in range(3)} == before


def test_two_sweeps_at_once_reap_each_session_exactly_once():
    expected = {f"s-{n:02}" for n in range(60)}
    streams = {session_id: expired_session(session_id, chunks=1) for session_id in expected}

    reports = run_in_threads(2, lambda _: reap_expired_sessions(batch_size=7))

    first, second = (set(report.reaped) for report in reports)
    assert first.isdisjoint(second)
    assert first | second == expected
    for stream_id in streams.values():
        assert get_stream_manager().get_stream_info(stream_id).status == "failed"


def test_a_late_worker_never_resurrects_a_reaped_session(owner):
    session_id, run_id = running_expired_session(owner)
    state = get_session_store().load_state(session_id)
    writer = get_stream_manager().create_writer(state.stream_id, run_id, "counter")
    written = get_stream_manager().get_stream_info(state.stream_id).latest_sequence
    reap_expired_sessions()

    outcome = executor.run_step(session_id, run_id, 1, holder="late")  # Its task, delivered late.

    with pytest.raises(StreamClosed):
        writer.write(text(session_id, "late"))
    assert outcome == executor.StepOutcome()
    after = get_session_store().load_state(session_id)
    assert (after.status, after.step_count, after.message_count) == (
        SessionStatus.FAILED,
        state.step_count,
        state.message_count,
    )
    assert get_stream_manager().get_stream_info(state.stream_id).latest_sequence == written


def test_a_late_worker_never_recreates_a_deleted_session(owner):
    session_id, run_id = running_expired_session(owner)
    stream_id = get_session_store().load_state(session_id).stream_id
    writer = get_stream_manager().create_writer(stream_id, run_id, "counter")
    reap_expired_sessions(delete=True)

    outcome = executor.run_step(session_id, run_id, 1, holder="late")

    with pytest.raises(StreamNotFound):
        writer.write(text(session_id, "late"))
    assert outcome == executor.StepOutcome()
    assert get_session_store().load_state(session_id) is None
    assert get_stream_manager().get_stream_info(stream_id) is None


def test_the_beat_task_reaps_and_purges_old_streams():
    expired_session("old")
    streams = get_stream_manager()
    streams.create_writer("ancient", "run", "counter").write(text("gone", "x"))
    streams.end_stream("ancient")
    Stream.objects.filter(pk="ancient").update(updated_at=timezone.now() - timedelta(days=30))

    tasks.cleanup_expired_sessions_task.apply()

    assert get_session_store().load_state("old").status == SessionStatus.FAILED
    assert streams.get_stream_info("ancient") is None


def run_command(*args: str) -> str:
    output = StringIO()
    call_command("cleanup_expired_sessions", *args, stdout=output)
    return output.getvalue()


def test_the_command_reports_progress_and_a_summary():
    for n in range(5):
        expired_session(f"old-{n}", chunks=0)

    output = run_command("--batch-size", "2", "--error", "Abandoned")

    assert "batch 1: 2 sessions failed so far" in output
    assert "batch 3: 5 sessions failed so far" in output
    assert "Failed 5 sessions expired by" in output
    assert "in 3 batches; purged 0 streams" in output
    assert get_session_store().load_state("old-3").error == "Abandoned"


def test_the_command_dry_run_and_delete_mode():
    for n in range(3):
        expired_session(f"old-{n}", chunks=0)

    dry = run_command("--dry-run", "--delete")
    assert "Dry run: would delete 3 sessions" in dry
    assert get_session_store().load_state("old-0") is not None

    deleted = run_command("--delete", "--limit", "2")
    assert "Deleted 2 sessions" in deleted
    assert [get_session_store().load_state(f"old-{n}") is None for n in range(3)].count(True) == 2


def test_the_command_honours_older_than():
    expired_session("hour-ago", ago=HOUR, chunks=0)
    expired_session("week-ago", ago=timedelta(days=7, hours=1), chunks=0)

    output = run_command("--older-than", "7d")

    assert "Failed 1 sessions" in output
    assert get_session_store().load_state("hour-ago").status == SessionStatus.ACTIVE


@pytest.mark.parametrize(
    "args",
    [("--batch-size", "0"), ("--limit", "-1"), ("--older-than", "soon"), ("--error", " ")],
)
def test_the_command_refuses_bad_options(args):
    with pytest.raises(CommandError):
        run_command(*args)
