"""Suspending a step on calls that wait for people or child sessions, and draining what they
gave when the run goes on."""

from typing import Any

from django.db import transaction

from agents_app.definitions.agent import ToolInputInvalid
from agents_app.definitions.state import StateDraft
from agents_app.llm.base import ToolCall
from agents_app.runtime.tool_calls import ToolOutcome, run_tool_calls
from agents_app.runtime.types import Reply, StepOutcome
from agents_app.subagents import children, companions
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from streams_app import chunks
from streams_app.backends.batching import BatchedWriter


class Suspension:
    """Held calls, suspension and the drain of what was given (a part of `Attempt`)."""

    def _held_calls(self, reply: Reply) -> list[ToolCall]:
        """Return the reply's calls that suspend the run: of client, approval and sub-agent tools.

        A call whose arguments do not fit its tool runs as a server call would: it fails, and
        the model is told why.
        """
        held = []
        for call in reply.tool_calls:
            tool = self.tools.get(call.name)
            if tool is None or call.invalid_arguments:
                continue
            try:
                tool.parse_input(call.arguments)
            except ToolInputInvalid:
                continue
            if tool.suspends or companions.holds(call, self.state, self.agent):
                held.append(call)
        return held

    def _suspend(
        self,
        writer: BatchedWriter,
        reply: Reply,
        outcomes: list[ToolOutcome],
        held: list[ToolCall],
    ) -> StepOutcome:
        """Commit the step with its held calls pending and suspend the run; nothing waits.

        The calls, the suspended status and the run's `suspended` status commit together.
        """
        tools = self.tools
        order = {call.id: position for position, call in enumerate(reply.tool_calls)}
        people = [c for c in held if tools[c.name].client or tools[c.name].needs_approval]
        children = [call for call in held if call not in people]
        pending = {
            call.id: {
                "toolName": call.name,
                "input": call.arguments,
                "kind": "client" if tools[call.name].client else "approval",
                "order": order[call.id],
            }
            for call in people
        }
        if children:
            reason, status = "awaiting_children", SessionStatus.SUSPENDED_AWAITING_CHILDREN
        elif outcomes:
            reason, status = "step_partial", SessionStatus.SUSPENDED_STEP_PARTIAL
        else:
            reason, status = "client_tool", SessionStatus.SUSPENDED_CLIENT_TOOL
        with writer.held(), transaction.atomic():
            writer.flush()  # What it streamed commits first in the transaction, then the rest.
            for call in held:
                fields = {
                    "tool_call_id": call.id,
                    "tool_name": call.name,
                    "input": call.arguments,
                }
                writer.write(self._chunk(chunks.ToolCallStart, **fields))
                if pending.get(call.id, {}).get("kind") == "approval":
                    writer.write(self._chunk(chunks.ToolApprovalRequest, **fields))
            awaited = {
                call.id: {**self._await_child(writer, call), "order": order[call.id]}
                for call in children
            }
            writer.write(
                self._chunk(
                    chunks.RunSuspended,
                    reason=reason,
                    pending_tool_call_ids=[call.id for call in held],
                )
            )
            self._commit(
                writer,
                self._step_messages(reply, outcomes),
                outcomes,
                reply,
                status,
                pending=pending,
                awaited=awaited,
            )
            self.store.update_run_status(
                self.run_record.run_id, RunStatus.SUSPENDED, step_count=self.step
            )
        return StepOutcome()

    def _await_child(self, writer: BatchedWriter, call: ToolCall) -> dict[str, Any]:
        """Start (or, for a companion wait, find) the child a held call waits for."""
        tool = self.tools[call.name]
        if tool.sub_agent is not None:
            child = children.spawn_child(self.state, call, tool)
        else:
            child = companions.awaited_child(call, self.state)
        return children.await_child(self.state, writer, call, child)

    def _drain(self, writer: BatchedWriter) -> list[ToolOutcome]:
        """Return the suspended step's calls as outcomes of what people and children gave.

        Approved calls run now (their start was announced when the run suspended); client
        results, rejections and the children's outcomes become results as they are.
        """
        entries = sorted(
            [
                *self.state.pending_client_tool_calls.items(),
                *(self.state.suspended_awaiting_children or {}).items(),
            ],
            key=lambda item: item[1]["order"],
        )
        calls = {
            call_id: ToolCall(id=call_id, name=entry["toolName"], arguments=entry["input"])
            for call_id, entry in entries
        }
        approved = [
            calls[call_id]
            for call_id, entry in entries
            if entry.get("kind") == "approval" and entry["submission"]["approved"]
        ]
        ran = {
            outcome.call.id: outcome
            for outcome in run_tool_calls(
                self.tools, approved, self._scope(writer), self.state.custom_state, announce=False
            )
        }
        outcomes = []
        for call_id, entry in entries:
            if call_id in ran:
                outcomes.append(ran[call_id])
                continue
            result, is_error = _answer(entry)
            writer.write(
                self._chunk(
                    chunks.ToolResult,
                    tool_call_id=call_id,
                    tool_name=entry["toolName"],
                    result=result,
                    is_error=is_error,
                )
            )
            outcomes.append(
                ToolOutcome(
                    call=calls[call_id],
                    result=result,
                    is_error=is_error,
                    draft=StateDraft(self.state.custom_state or {}),
                    duration_ms=0,
                    custom_metrics=[],
                )
            )
        return outcomes


def _answer(entry: dict[str, Any]) -> tuple[Any, bool]:
    """Return the result of a suspended call that did not run here, and whether it failed.

    A client's result, a rejection, or a sub-agent's outcome.
    """
    if "subSessionId" in entry:
        return children.child_outcome(get_session_store().load_state(entry["subSessionId"]))
    submission = entry["submission"]
    if entry["kind"] == "client":
        return submission["result"], False
    because = f": {submission['reason']}" if submission.get("reason") else "."
    return {"error": f"The user rejected this tool call{because}"}, True
