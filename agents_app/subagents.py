"""Sub-agents: a tool call that runs another agent as a child session on its own Celery steps.

The parent's step spawns its children in the transaction that suspends it
(`suspended_awaiting_children`): each child is a session with a deterministic id, a
`SubSessionRef` of the parent, and a run of its own. When a child's run ends, `child_finished`
(a Celery task, after the child's commit) copies the child's chunks into the parent's stream
between `subagent_start` and `subagent_end`, records the call as finished, and continues the
parent once nothing else is awaited. A child that outlives its tool's timeout is aborted, which
fails that call, not the parent.
"""

import json
import uuid
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app import control, launch, tasks
from agents_app.definitions import Tool
from agents_app.inputs import input_messages
from agents_app.llm.base import ToolCall
from agents_app.registry import AgentFactoryContext, get_registry
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


def spawn_children(
    parent: SessionState, writer: StreamWriter, calls: list[tuple[ToolCall, Tool]]
) -> dict[str, dict[str, Any]]:
    """Create and start a child session per sub-agent call; return what the parent awaits.

    Call it in the transaction that suspends the parent: children and suspension commit
    together, and the children's first steps are enqueued when it commits.
    """
    store = get_session_store()
    awaited = {}
    for call, tool in calls:
        child_id = child_session_id(parent.session_id, call.id)
        run_id = uuid.uuid4().hex
        agent = get_registry().resolve(
            tool.sub_agent,
            AgentFactoryContext(session_id=child_id, run_id=run_id, user_id=parent.user_id),
        )
        child = store.create_session(
            child_id,
            agent_type=tool.sub_agent,
            parent_session_id=parent.session_id,
            root_session_id=parent.root_session_id or parent.session_id,
            owner_id=parent.owner_id,
            user_id=parent.user_id,
            custom_state=agent.make_initial_state(),
        )
        store.add_sub_session_refs(
            parent.session_id,
            [
                SubSessionRef(
                    sub_session_id=child_id,
                    agent_type=tool.sub_agent,
                    parent_tool_call_id=call.id,
                    started_at=timezone.now(),
                )
            ],
        )
        launch.begin_run(child, run_id, input_messages(json.dumps(call.arguments)))
        writer.write(
            chunks.SubagentStart(
                step=parent.step_count + 1,
                session_id=parent.session_id,
                agent_type=parent.agent_type,
                sub_session_id=child_id,
                sub_agent_type=tool.sub_agent,
                tool_call_id=call.id,
            )
        )
        tasks.child_timeout_task.apply_async_on_commit(
            (parent.session_id, child_id, tool.timeout_seconds), countdown=tool.timeout_seconds
        )
        awaited[call.id] = {
            "subSessionId": child_id,
            "agentType": tool.sub_agent,
            "toolName": call.name,
            "input": call.arguments,
            "finished": False,
        }
    return awaited


def notify_parent(child: SessionState) -> None:
    """Tell a child session's parent, once the caller's transaction commits, that it ended."""
    if child.parent_session_id is not None:
        tasks.child_finished_task.delay_on_commit(child.parent_session_id, child.session_id)


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
    """Bring a finished child's chunks and outcome to its parent; continue the parent if ready.

    Idempotent: a child already brought in is left alone. Raises `VersionConflict` when another
    child's finish wrote the parent meanwhile; the task tries again.
    """
    store = get_session_store()
    parent = store.load_state(parent_session_id)
    child = store.load_state(child_id)
    refs = store.get_sub_session_refs(parent_session_id) if parent is not None else []
    ref = next((r for r in refs if r.sub_session_id == child_id), None)
    if ref is None or ref.status in ENDED or child is None or child.status not in ENDED:
        return
    store.update_sub_session_ref(
        parent_session_id,
        SubSessionRefUpdate(
            sub_session_id=child_id, status=child.status, completed_at=timezone.now()
        ),
    )
    result, failed = child_outcome(child)
    run = store.get_current_run(parent_session_id)
    started = ref.started_at or child.created_at
    get_usage_store().record_entry(
        SubAgentEntry(
            session_id=parent_session_id,
            run_id=run.run_id if run else None,
            agent_type=child.agent_type,
            sub_session_id=child_id,
            success=not failed,
            duration_ms=round((timezone.now() - started).total_seconds() * 1000),
        )
    )
    if parent.status != SessionStatus.SUSPENDED_AWAITING_CHILDREN or run is None:
        return  # The parent ended meanwhile (aborted, expired): nothing awaits the child.
    writer = get_stream_manager().create_writer(parent.stream_id, run.run_id, parent.agent_type)
    _copy_chunks(child.stream_id, writer)
    writer.write(
        chunks.SubagentEnd(
            step=parent.step_count,
            session_id=parent_session_id,
            agent_type=parent.agent_type,
            sub_session_id=child_id,
            sub_agent_type=child.agent_type,
            tool_call_id=ref.parent_tool_call_id,
            output=None if failed else result,
            error=result["error"] if failed else None,
        )
    )
    awaited = dict(parent.suspended_awaiting_children or {})
    awaited[ref.parent_tool_call_id] = {**awaited[ref.parent_tool_call_id], "finished": True}
    updated = _with_awaited(parent, awaited)
    store.save_state(parent_session_id, updated, expected_version=parent.version)
    if updated.status == SessionStatus.ACTIVE:
        launch.continue_run(parent, writer, run.run_id)


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


def _copy_chunks(stream_id: str, writer: StreamWriter) -> None:
    """Append every chunk of the child's stream to the parent's, in order."""
    streams = get_stream_manager()
    after = 0
    while True:
        page = streams.get_chunks(stream_id, after_sequence=after, limit=COPY_BATCH)
        if page.chunks:
            writer.write_many([stored.chunk for stored in page.chunks])
            after = page.chunks[-1].sequence
        if not page.has_more:
            return
