"""Sub-agents: a tool call that runs another agent as a child session on its own Celery steps.

The parent's step spawns its children in the transaction that suspends it
(`suspended_awaiting_children`): each child is a session with a deterministic id, a
`SubSessionRef` of the parent, and a run of its own. (Persistent children, `companions`, are
awaited the same way.) When a child's run ends, `child_finished` (a Celery task, after the
child's commit) copies the run's chunks into the parent's stream between `subagent_start` and
`subagent_end`, records the call as finished, and continues the parent once nothing else is
awaited. A child that outlives its tool's timeout is aborted, which fails that call, not the
parent.
"""

import json
import uuid
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app.definitions.agent import Tool
from agents_app.definitions.inputs import input_messages
from agents_app.definitions.registry import AgentFactoryContext, get_registry
from agents_app.llm.base import ToolCall
from agents_app.runs import control, dispatch, launch
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    TERMINAL_STATUSES,
    SessionState,
    SessionStatus,
    SubSessionRef,
    SubSessionRefUpdate,
)
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import SubAgentEntry
from streams_app import chunks
from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamWriter

ENDED = TERMINAL_STATUSES | {SessionStatus.INTERRUPTED}
COPY_BATCH = 500


def child_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """Return the id of the child session a tool call runs (the same for every attempt)."""
    return f"{parent_session_id}-sub-{tool_call_id}"


def spawn_child(parent: SessionState, call: ToolCall, tool: Tool) -> SessionState:
    """Create the child session a sub-agent call runs and start its run; return it.

    Call it in the transaction that suspends the parent: the child commits with the suspension,
    and its first step is enqueued, and its timeout set, when that transaction commits.
    """
    run_id = uuid.uuid4().hex
    child = create_child(
        parent,
        SubSessionRef(
            sub_session_id=child_session_id(parent.session_id, call.id),
            agent_type=tool.sub_agent,
            parent_tool_call_id=call.id,
        ),
        run_id,
    )
    launch.begin_run(child, run_id, input_messages(json.dumps(call.arguments)))
    dispatch.child_timeout_on_commit(parent.session_id, child.session_id, tool.timeout_seconds)
    return child


def create_child(parent: SessionState, ref: SubSessionRef, run_id: str) -> SessionState:
    """Create the child session `ref` names, with its agent's initial state, and record `ref`."""
    store = get_session_store()
    agent = get_registry().resolve(
        ref.agent_type,
        AgentFactoryContext(session_id=ref.sub_session_id, run_id=run_id, user_id=parent.user_id),
    )
    child = store.create_session(
        ref.sub_session_id,
        agent_type=ref.agent_type,
        parent_session_id=parent.session_id,
        root_session_id=parent.root_session_id or parent.session_id,
        owner_id=parent.owner_id,
        user_id=parent.user_id,
        custom_state=agent.make_initial_state(),
    )
    store.add_sub_session_refs(parent.session_id, [replace(ref, started_at=timezone.now())])
    return child


def await_child(
    parent: SessionState, writer: StreamWriter, call: ToolCall, child: SessionState
) -> dict[str, Any]:
    """Mark the start of the child's chunks in the parent's stream; return what the parent awaits.

    Call it in the transaction that suspends the parent. Once that commits, the child's end is
    looked for once more: a child that ended before the parent suspended is not missed.
    """
    writer.write(
        chunks.SubagentStart(
            step=parent.step_count + 1,
            session_id=parent.session_id,
            agent_type=parent.agent_type,
            sub_session_id=child.session_id,
            sub_agent_type=child.agent_type,
            tool_call_id=call.id,
        )
    )
    dispatch.child_finished_on_commit(parent.session_id, child.session_id)
    return {
        "subSessionId": child.session_id,
        "agentType": child.agent_type,
        "toolName": call.name,
        "input": call.arguments,
        "finished": False,
    }


def notify_parent(child: SessionState) -> None:
    """Tell a child session's parent, once the caller's transaction commits, that it ended."""
    if child.parent_session_id is not None:
        dispatch.child_finished_on_commit(child.parent_session_id, child.session_id)


def child_outcome(child: SessionState | None) -> tuple[Any, bool]:
    """Return a finished child's result for its parent's tool call, and whether it failed."""
    if child is None:
        return {"error": "The sub-agent's session is gone."}, True
    if child.status == SessionStatus.COMPLETED:
        return child.output, False
    if child.status == SessionStatus.INTERRUPTED:
        return {"error": f"The {child.agent_type} sub-agent was interrupted."}, True
    return {
        "error": f"The {child.agent_type} sub-agent failed: {child.error}",
        "failureReason": child.failure_reason,
    }, True


@transaction.atomic
def child_finished(parent_session_id: str, child_id: str) -> None:
    """Bring an ended child's outcome to its parent, and its chunks if the parent awaits it.

    Records the child's run on its `SubSessionRef` and in usage once; if the suspended parent
    awaits the child, copies the run's chunks into the parent's stream and continues the parent
    when nothing else is awaited. Idempotent. Raises `VersionConflict` when another child's end
    wrote the parent meanwhile; the task tries again.
    """
    store = get_session_store()
    parent = store.load_state(parent_session_id)
    child = store.load_state(child_id)
    if parent is None or child is None or child.status not in ENDED:
        return
    ref = next(
        (r for r in store.get_sub_session_refs(parent_session_id) if r.sub_session_id == child_id),
        None,
    )
    if ref is None:
        return
    run = store.get_current_run(parent_session_id)
    if ref.status not in ENDED:
        _record_end(parent_session_id, ref, child, run.run_id if run else None)
    awaited = dict(parent.suspended_awaiting_children or {})
    call_id = next(
        (
            c
            for c, entry in awaited.items()
            if entry["subSessionId"] == child_id and not entry["finished"]
        ),
        None,
    )
    if call_id is None or parent.status != SessionStatus.SUSPENDED_AWAITING_CHILDREN:
        return  # Not awaited, or the parent ended meanwhile (aborted, expired).
    writer = get_stream_manager().create_writer(parent.stream_id, run.run_id, parent.agent_type)
    child_run = store.get_current_run(child_id)
    _copy_chunks(child.stream_id, child_run.metadata.get("fromSequence", 0), writer)
    result, failed = child_outcome(child)
    writer.write(
        chunks.SubagentEnd(
            step=parent.step_count,
            session_id=parent_session_id,
            agent_type=parent.agent_type,
            sub_session_id=child_id,
            sub_agent_type=child.agent_type,
            tool_call_id=call_id,
            output=None if failed else result,
            error=result["error"] if failed else None,
        )
    )
    awaited[call_id] = {**awaited[call_id], "finished": True}
    updated = _with_awaited(parent, awaited)
    store.save_state(parent_session_id, updated, expected_version=parent.version)
    if updated.status == SessionStatus.ACTIVE:
        launch.continue_run(parent, writer, run.run_id)


def _record_end(
    parent_session_id: str, ref: SubSessionRef, child: SessionState, run_id: str | None
) -> None:
    """Record a child's run as ended on its ref and in the parent's usage."""
    now = timezone.now()
    get_session_store().update_sub_session_ref(
        parent_session_id,
        SubSessionRefUpdate(sub_session_id=child.session_id, status=child.status, completed_at=now),
    )
    _, failed = child_outcome(child)
    started = ref.started_at or child.created_at
    get_usage_store().record_entry(
        SubAgentEntry(
            session_id=parent_session_id,
            run_id=run_id,
            agent_type=child.agent_type,
            sub_session_id=child.session_id,
            success=not failed,
            duration_ms=round((now - started).total_seconds() * 1000),
        )
    )


def child_timed_out(parent_session_id: str, child_id: str, timeout: float) -> None:
    """Abort a child still running past its tool's timeout; its call fails, not the parent."""
    child = get_session_store().load_state(child_id)
    if child is not None and child.status not in ENDED:
        control.abort_session(
            child_id, f"The sub-agent timed out after {timeout:g} s.", failure_reason="timeout"
        )


def _with_awaited(parent: SessionState, awaited: dict[str, Any]) -> SessionState:
    """Return the parent awaiting `awaited`, in the status its remaining waits call for."""
    waiting = replace(parent, suspended_awaiting_children=awaited)
    if launch.waits_for_nothing(waiting):
        return replace(waiting, status=SessionStatus.ACTIVE)
    if all(child["finished"] for child in awaited.values()):  # People have yet to answer.
        return replace(waiting, status=SessionStatus.SUSPENDED_CLIENT_TOOL)
    return waiting


def _copy_chunks(stream_id: str, after: int, writer: StreamWriter) -> None:
    """Append the child's chunks after sequence `after` (its run's) to the parent's, in order."""
    streams = get_stream_manager()
    while True:
        page = streams.get_chunks(stream_id, after_sequence=after, limit=COPY_BATCH)
        if page.chunks:
            writer.write_many([stored.chunk for stored in page.chunks])
            after = page.chunks[-1].sequence
        if not page.has_more:
            return
