"""Run-control primitives the services and lifecycle hooks share; callers check ownership."""

from dataclasses import replace

from django.db import transaction

from agents_app.runs import dispatch
from sessions_app.retries import retried_on_conflict
from sessions_app.stores import get_session_store
from sessions_app.stores.types import LIVE_STATUSES, RunStatus, SessionState, SessionStatus
from streams_app import chunks
from streams_app.backends import get_stream_manager


def is_running(session_id: str) -> bool:
    """Return whether the session's current run is running."""
    run = get_session_store().get_current_run(session_id)
    return run is not None and run.status == RunStatus.RUNNING


def is_interruptible(state: SessionState) -> bool:
    """Return whether an interrupt has something to stop: a running run, or awaited children."""
    awaiting = state.status == SessionStatus.SUSPENDED_AWAITING_CHILDREN
    return awaiting or is_running(state.session_id)


def interrupt_session(session_id: str, reason: str | None = None) -> None:
    """Raise the durable interrupt flag of the session and of its live children, and theirs."""
    get_session_store().set_interrupt_flag(session_id, reason)
    for child_id in _live_children(session_id):
        interrupt_session(child_id, reason)


@retried_on_conflict
def abort_session(
    session_id: str, reason: str | None = None, *, failure_reason: str = "aborted"
) -> None:
    """Fail the session, its run and its stream for good; a running step can no longer commit.

    Runs queued behind the running one are dropped, the session's live children are aborted
    too, and its parent, if it has one, is told once this commits. It locks the session, then
    the stream, where a step's commit takes them the other way round: when they deadlock and
    PostgreSQL aborts this one, it goes again once the step has committed.
    """
    store = get_session_store()
    error = f"Aborted: {reason}" if reason else "Aborted."
    with transaction.atomic():
        state = store.load_state(session_id)
        for child_id in _live_children(session_id):
            abort_session(child_id, "The parent session was aborted.")
        run = store.get_current_run(session_id)
        # A state write bumps the version: the running step, if any, can no longer commit.
        store.save_state(
            session_id,
            replace(
                state,
                status=SessionStatus.FAILED,
                aborted=True,
                abort_reason=reason,
                error=error,
                failure_reason=failure_reason,
            ),
            expected_version=state.version,
        )
        store.set_interrupt_flag(session_id, "aborted")  # Stops a running step promptly.
        store.discard_queued_runs(session_id)  # An aborted session runs nothing more.
        if run is not None and run.status in (RunStatus.RUNNING, RunStatus.SUSPENDED):
            store.update_run_status(run.run_id, RunStatus.FAILED, error=error)
        streams = get_stream_manager()
        info = streams.get_stream_info(state.stream_id)
        if info is not None and info.status in ("active", "paused"):
            run_id = run.run_id if run else ""
            writer = streams.create_writer(state.stream_id, run_id, state.agent_type)
            writer.write(
                chunks.RunFailed(
                    step=state.step_count,
                    session_id=session_id,
                    agent_type=state.agent_type,
                    error=error,
                )
            )
            streams.fail_stream(state.stream_id, error)
        if state.parent_session_id is not None:
            dispatch.child_finished_on_commit(state.parent_session_id, session_id)


def _live_children(session_id: str) -> list[str]:
    """Return the ids of the session's child sessions that have not ended."""
    store = get_session_store()
    children = (
        store.load_state(ref.sub_session_id) for ref in store.get_sub_session_refs(session_id)
    )
    return [child.session_id for child in children if child and child.status in LIVE_STATUSES]
