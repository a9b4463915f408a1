"""Results of client and approval tool calls, submitted while their run is suspended.

A submission is durable and idempotent: it is recorded in the session's state with a tombstone
in `completed_client_tool_calls`, and a repeated one answers as the first did. The submission
that completes the suspended step's calls continues the run on a new Celery step, which turns
them into tool results (running approved calls) before it calls the model again.
"""

import contextlib
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from agents_app.errors import UnknownToolCall
from agents_app.runs import launch
from sessions_app.errors import InvalidInput, VersionConflict
from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionStatus
from streams_app import chunks
from streams_app.backends import get_stream_manager

SUSPENDED = frozenset(
    {
        SessionStatus.SUSPENDED_CLIENT_TOOL,
        SessionStatus.SUSPENDED_STEP_PARTIAL,
        SessionStatus.SUSPENDED_AWAITING_CHILDREN,
    }
)
# Two people submitting for one step race on the state's version; the loser tries again.
SUBMIT_ATTEMPTS = 5


@dataclass(frozen=True, kw_only=True)
class SubmittedToolResult:
    """The answer to a submission; a repeated submission gets the same one."""

    tool_call_id: str
    submitted_at: int  # Milliseconds since the epoch.


def tool_result_submit(
    *,
    user: AbstractBaseUser,
    session_id: str,
    tool_call_id: str,
    result: Any = None,
    approved: bool | None = None,
    reason: str | None = None,
) -> SubmittedToolResult:
    """Record a person's answer to a suspended call; continue the run once all are answered.

    A client tool's call takes its `result`; an approval tool's takes `approved` (and a
    `reason`). Raises `UnknownToolCall` for a call the session does not wait for.
    """
    arguments = (user, session_id, tool_call_id, result, approved, reason)
    for _ in range(SUBMIT_ATTEMPTS - 1):
        with contextlib.suppress(VersionConflict):
            return _submit(*arguments)
    return _submit(*arguments)


@transaction.atomic
def _submit(
    user: AbstractBaseUser,
    session_id: str,
    tool_call_id: str,
    result: Any,
    approved: bool | None,
    reason: str | None,
) -> SubmittedToolResult:
    state = session_for_user(session_id=session_id, user=user)
    if (submitted_at := state.completed_client_tool_calls.get(tool_call_id)) is not None:
        return SubmittedToolResult(tool_call_id=tool_call_id, submitted_at=submitted_at)
    entry = state.pending_client_tool_calls.get(tool_call_id)
    if entry is None or "submission" in entry or state.status not in SUSPENDED:
        raise UnknownToolCall(state.session_id, tool_call_id)
    if entry["kind"] == "approval":
        if not isinstance(approved, bool):
            raise InvalidInput(f"Tool call {tool_call_id!r} needs `approved`: true or false.")
        submission = {"approved": approved, "reason": reason}
    else:
        if approved is not None:
            raise InvalidInput(f"Tool call {tool_call_id!r} is a client tool's: send `result`.")
        submission = {"result": result}
    submitted_at = int(timezone.now().timestamp() * 1000)
    answered = replace(
        state,
        pending_client_tool_calls={
            **state.pending_client_tool_calls,
            tool_call_id: {**entry, "submission": submission},
        },
        completed_client_tool_calls={
            **state.completed_client_tool_calls,
            tool_call_id: submitted_at,
        },
    )
    ready = launch.waits_for_nothing(answered)
    store = get_session_store()
    store.save_state(
        state.session_id,
        replace(answered, status=SessionStatus.ACTIVE) if ready else answered,
        expected_version=state.version,
    )
    run = store.get_current_run(state.session_id)
    writer = get_stream_manager().create_writer(state.stream_id, run.run_id, state.agent_type)
    if entry["kind"] == "approval":
        writer.write(
            chunks.ToolApprovalResponse(
                step=state.step_count,
                session_id=state.session_id,
                agent_type=state.agent_type,
                tool_call_id=tool_call_id,
                decision="approve" if approved else "reject",
                reason=reason,
            )
        )
    if ready:
        launch.continue_run(state, writer, run.run_id)
    return SubmittedToolResult(tool_call_id=tool_call_id, submitted_at=submitted_at)
