"""Read-side selectors of the runtime."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from agents_app.chat.ui_messages import ui_messages
from agents_app.runs import control
from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionState
from streams_app.backends import get_stream_manager


@dataclass(frozen=True, kw_only=True)
class AgentStatus:
    """Reference 001 `AgentStatusResponse`."""

    session_id: str
    status: str
    step_count: int
    output: Any
    error: str | None
    checkpoint_id: str | None
    is_executing: bool


def agent_status(*, user: AbstractBaseUser, session_id: str) -> AgentStatus:
    """Return the status of the user's session and whether a run of it is executing."""
    state = session_for_user(session_id=session_id, user=user)
    checkpoint = get_session_store().get_latest_checkpoint(session_id)
    return AgentStatus(
        session_id=state.session_id,
        status=state.status,
        step_count=state.step_count,
        output=state.output,
        error=state.error,
        checkpoint_id=checkpoint.checkpoint_id if checkpoint else None,
        is_executing=control.is_running(session_id),
    )


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What a client needs to draw a session and follow its stream without a gap.

    `messages` and `state` are as of the latest commit, and `stream_sequence` is where that
    commit left the stream: following the stream after it replays the step in progress.
    """

    session: SessionState
    run_id: str | None
    messages: list[dict[str, Any]]
    state: Any
    stream_sequence: int
    stream_status: str
    taken_at: datetime


def agent_snapshot(*, user: AbstractBaseUser, session_id: str) -> Snapshot:
    """Return the snapshot of the user's session, its parts read from one commit."""
    session = session_for_user(session_id=session_id, user=user)
    store = get_session_store()
    # The checkpoint first: it names the commit; its messages are the first it counted, and
    # of those the client draws the active branch, as the model is sent it.
    checkpoint = store.get_latest_checkpoint(session_id)
    count = checkpoint.message_count if checkpoint else session.message_count
    messages = [m for m in store.get_history(session_id) if m.sequence <= count]
    info = get_stream_manager().get_stream_info(session.stream_id)
    return Snapshot(
        session=session,
        run_id=checkpoint.run_id if checkpoint else None,
        messages=ui_messages(messages),
        state=checkpoint.state.get("custom_state") if checkpoint else session.custom_state,
        stream_sequence=checkpoint.stream_sequence if checkpoint else 0,
        stream_status=info.status if info else "active",
        taken_at=timezone.now(),
    )
