"""Operator services: what staff do to any user's sessions from Django admin.

Unlike the run-control services, these check no ownership: the admin site lets only staff with
the session model's permissions call them. Each takes session ids and returns the ids it acted
on; sessions it cannot act on (gone, or in a state the operation does not apply to) are skipped.
"""

from collections.abc import Collection

from agents_app.runs import control
from sessions_app.stores import get_session_store
from sessions_app.stores.types import TERMINAL_STATUSES
from streams_app.services import session_and_stream_delete

OPERATOR_FAILURE_REASON = "operator"


def sessions_mark_failed(*, session_ids: Collection[str], reason: str) -> list[str]:
    """Fail each unfinished session for good with `reason`: its run, children and stream too."""
    store = get_session_store()
    failed = []
    for session_id in session_ids:
        state = store.load_state(session_id)
        if state is None or state.status in TERMINAL_STATUSES:
            continue
        control.abort_session(session_id, reason, failure_reason=OPERATOR_FAILURE_REASON)
        failed.append(session_id)
    return failed


def sessions_interrupt(*, session_ids: Collection[str], reason: str) -> list[str]:
    """Raise the interrupt flag of each session whose run is running or awaits its children."""
    store = get_session_store()
    interrupted = []
    for session_id in session_ids:
        state = store.load_state(session_id)
        if state is not None and control.is_interruptible(state):
            control.interrupt_session(session_id, reason)
            interrupted.append(session_id)
    return interrupted


def sessions_delete(*, session_ids: Collection[str]) -> list[str]:
    """Delete each session, everything recorded under it and its stream, one at a time."""
    store = get_session_store()
    deleted = []
    for session_id in session_ids:
        state = store.load_state(session_id)
        if state is None:
            continue
        session_and_stream_delete(session_id=session_id, stream_id=state.stream_id)
        deleted.append(session_id)
    return deleted
