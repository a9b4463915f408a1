"""Ending a step: its commit, and the end of its run when it completes, fails or is interrupted."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from django.db import transaction

from agents_app.definitions.agent import OUTPUT_TOOL_NAME, Agent, ToolInputInvalid
from agents_app.definitions.hooks import CompleteContext, call_hook
from agents_app.live_state.agent_state import AgentState, broadcast_state
from agents_app.llm.base import ToolCall
from agents_app.observability import metrics, tracing
from agents_app.runs import launch
from agents_app.runtime.tool_calls import ToolOutcome
from agents_app.runtime.types import Reply, StepOutcome, tool_message
from agents_app.subagents import children
from sessions_app.connections import pipelined
from sessions_app.errors import VersionConflict
from sessions_app.storable import storable
from sessions_app.stores.rules import apply_merge_ops
from sessions_app.stores.types import (
    CasRejected,
    CheckpointMeta,
    CommitResult,
    Lease,
    Message,
    MessageRole,
    RunStatus,
    SessionStatus,
    StepClaim,
    StepWrites,
)
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import CustomEntry, TokenCounts, TokensEntry, ToolEntry, UsageEntry
from streams_app import chunks
from streams_app.backends.batching import BatchedWriter

logger = logging.getLogger(__name__)


class Ending:
    """The step's commit and its run's end (a part of `Attempt`)."""

    def _finish_step(
        self, writer: BatchedWriter, reply: Reply, outcomes: list[ToolOutcome]
    ) -> StepOutcome:
        agent = self.agent
        output_call = next((c for c in reply.tool_calls if c.name == OUTPUT_TOOL_NAME), None)
        messages = self._step_messages(reply, outcomes)
        if output_call is not None and agent.output_schema is not None:
            output, problem = _parse_output(agent, output_call)
            if problem is None:
                return self._complete(writer, messages, outcomes, reply, output)
            messages.append(tool_message(output_call, {"error": problem}))
        elif not reply.tool_calls and agent.output_schema is None:
            return self._complete(writer, messages, outcomes, reply, reply.text)
        if self.step >= agent.max_steps:
            return self._fail(
                writer, messages, outcomes, reply, f"Reached the limit of {agent.max_steps} steps."
            )
        committed = self._commit(
            writer, messages, outcomes, reply, SessionStatus.ACTIVE, keep_lease=True
        )
        return self._going_on(writer, committed)

    def _going_on(self, writer: BatchedWriter, committed: CommitResult) -> StepOutcome:
        """Return the outcome of a step whose run goes on under the lease it kept: the claim
        is the commit's (nothing to read again), and the active branch the commit left, when
        the step read it and nothing else changed the session's history since its claim."""
        claim = StepClaim(
            lease=Lease(version=committed.state.version, taken_over=False),
            state=committed.state,
            run=self.run_record,
            history_revision=committed.revision,
        )
        history = (
            None
            if committed.history_revision is None or self.active is None
            else self.active + committed.messages
        )
        return StepOutcome(
            next_step=self.step + 1, holder=self.holder, claim=claim, writer=writer, history=history
        )

    def _complete(self, writer, messages, outcomes, reply, output: Any) -> StepOutcome:
        with self._ending(writer, RunStatus.COMPLETED, output=output):
            self._commit(writer, messages, outcomes, reply, SessionStatus.COMPLETED, output=output)
        return StepOutcome()

    def _fail(self, writer, messages, outcomes, reply, error: str) -> StepOutcome:
        with self._ending(writer, RunStatus.FAILED, error=error):
            self._commit(writer, messages, outcomes, reply, SessionStatus.FAILED, error=error)
        return StepOutcome()

    def give_up(self, message: str) -> StepOutcome:
        """Undo what the abandoned attempts left and fail the run with `message`."""
        self._recover()
        return self.fail(self.open_writer(), message, failure_reason="step_abandoned")

    def fail(self, writer: BatchedWriter, message: str, *, failure_reason: str) -> StepOutcome:
        """Fail the run with `message`; the step commits nothing, and its chunks go."""
        message = storable(message)  # It may quote a model server's or a tool's words.
        with writer.held():
            writer.flush()
            self.streams.cleanup_to_step(self.state.stream_id, self.step - 1)
        with self._ending(writer, RunStatus.FAILED, error=message):
            result = self.store.compare_and_set_status(
                self.session_id,
                [SessionStatus.ACTIVE],
                SessionStatus.FAILED,
                error=message,
                failure_reason=failure_reason,
                expected_version=self.state.version,
            )
            if isinstance(result, CasRejected):
                raise VersionConflict(
                    self.session_id,
                    expected_version=self.state.version,
                    current_version=result.current_version,
                )
            self.store.release_lease(self.session_id, self.holder)
        metrics.STEPS_FAILED.labels(self.state.agent_type).inc()
        return StepOutcome()

    def _interrupt(self, writer, reason: str | None, reply: Reply | None, outcomes) -> StepOutcome:
        reply = reply or Reply(text="", tool_calls=[], usage=[])
        messages = self._step_messages(reply, outcomes) if (reply.text or outcomes) else []
        with self._ending(writer, RunStatus.INTERRUPTED, reason=reason):
            self._commit(writer, messages, outcomes, reply, SessionStatus.INTERRUPTED)
            self.store.clear_interrupt_flag(self.session_id)
        return StepOutcome()

    @contextmanager
    def _ending(
        self,
        writer: BatchedWriter,
        status: RunStatus,
        *,
        output: Any = None,
        error: str | None = None,
        reason: str | None = None,
    ) -> Iterator[None]:
        """End the run with what the block writes, in one transaction; then run `on_complete`.

        The run takes `status` and the stream its last chunk. The session's next queued run,
        if there is one, begins in the same transaction and its chunks follow on the stream;
        otherwise the stream ends (or fails with `error`).
        """
        with writer.held(), transaction.atomic():
            writer.flush()  # What it streamed commits first in the transaction, then the end.
            yield
            self.store.update_run_status(
                self.run_record.run_id, status, step_count=self.step, error=error
            )
            match status:
                case RunStatus.COMPLETED:
                    writer.write(self._chunk(chunks.RunCompleted, output=output))
                case RunStatus.INTERRUPTED:
                    writer.write(self._chunk(chunks.RunInterrupted, reason=reason))
                case RunStatus.FAILED:
                    writer.write(self._chunk(chunks.RunFailed, error=error))
            if launch.begin_queued_run(self.session_id) is None:
                if status == RunStatus.FAILED:
                    self.streams.fail_stream(self.state.stream_id, error)
                else:
                    self.streams.end_stream(self.state.stream_id, output)
            children.notify_parent(self.state)
        self._on_complete(status, result=output, error=error)

    def _step_messages(self, reply: Reply, outcomes: list[ToolOutcome]) -> list[Message]:
        assistant = Message(
            role=MessageRole.ASSISTANT,
            content=reply.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
            ],
        )
        return [assistant, *(tool_message(o.call, o.result) for o in outcomes)]

    def _commit(
        self,
        writer: BatchedWriter,
        messages: list[Message],
        outcomes: list[ToolOutcome],
        reply: Reply,
        status: SessionStatus,
        *,
        output: Any = None,
        error: str | None = None,
        pending: dict[str, Any] | None = None,
        awaited: dict[str, Any] | None = None,
        keep_lease: bool = False,
    ) -> CommitResult:
        """Commit the step: its chunks, messages, state, staging, checkpoint and usage.

        The lease is freed with it, unless `keep_lease`: the run goes on under it. The drained
        calls of a suspended step come first; `pending` are the calls the step suspends on
        for people, `awaited` those it suspends on for its children.
        """
        messages = [*self._drained_messages(), *messages]
        if self.branch_from is not None and messages:
            messages[0] = replace(messages[0], parent_id=self.branch_from)
        outcomes = [*self.drained, *outcomes]
        # Each call's writes, staged as its change; in the calls' order they make the state.
        changes = [o.draft.staged_change(o.call.id) for o in outcomes if o.draft.written]
        custom_state, warnings = apply_merge_ops(
            self.state.custom_state, StepWrites(ops=[op for c in changes for op in c.merge_ops])
        )
        for warning in warnings:
            logger.warning("Step %s of %s: %s", self.step, self.session_id, warning)
        state = replace(
            self.state,
            custom_state=custom_state,
            step_count=self.step,
            status=status,
            output=output if status == SessionStatus.COMPLETED else self.state.output,
            error=error,
            pending_client_tool_calls=pending or {},
            suspended_awaiting_children=awaited or None,
            suspended_step_id=self.step_id if (pending or awaited) else None,
        )
        # The writer is held from before the transaction begins (see `BatchedWriter.held`).
        # No savepoint when the run's end or suspension holds the transaction: all or nothing.
        # Pipelined here too, not only in the store's commit: the usage rows then reach the
        # database with the commit's writes, in one round trip.
        with (
            writer.held(),
            tracing.span("commit", status=status.value),
            transaction.atomic(savepoint=False),
            pipelined(),
        ):
            writer.flush()  # What it streamed commits with it, up to the checkpoint's sequence.
            committed = self.store.save_state_and_promote_staging(
                self.session_id,
                state,
                messages,
                CheckpointMeta(
                    step_id=self.step_id,
                    step_count=self.step,
                    stream_sequence=writer.last_sequence,
                    run_id=self.run_record.run_id,
                    timings=self._timings(outcomes),
                ),
                expected_version=self.state.version,
                release_lease_of=None if keep_lease else self.holder,
                stage=changes,
                # The commit holds the calls now: their records go.
                forget_tool_calls=bool(self.earlier) or any(o.recorded for o in outcomes),
                expected_history_revision=self.history_revision,
            )
            get_usage_store().add_entries(self._usage(reply, outcomes), sessions_locked=True)
            if custom_state != self.state.custom_state:  # Tools wrote it: tell its clients.
                stored = AgentState(state=custom_state, version=committed.state.version)
                transaction.on_commit(lambda: broadcast_state(self.session_id, stored))
        metrics.STEPS_COMMITTED.labels(self.state.agent_type).inc()
        return committed

    def _usage(self, reply: Reply, outcomes: list[ToolOutcome]) -> list[UsageEntry]:
        """Return what the step used: tokens per model call, each tool call, custom metrics."""
        common = {
            "session_id": self.session_id,
            "run_id": self.run_record.run_id,
            "step_count": self.step,
        }
        entries: list[UsageEntry] = [
            TokensEntry(
                **common,
                model=usage.model,
                tokens=TokenCounts(
                    prompt=usage.prompt_tokens,
                    completion=usage.completion_tokens,
                    reasoning=usage.reasoning_tokens,
                    cached=usage.cached_tokens,
                    total=usage.total_tokens,
                ),
            )
            for usage in reply.usage
        ]
        for outcome in outcomes:
            entries.append(
                ToolEntry(
                    **common,
                    name=outcome.call.name,
                    success=not outcome.is_error,
                    duration_ms=outcome.duration_ms,
                )
            )
            entries += [
                CustomEntry(**common, metric_type=metric_type, name=name, value=value)
                for metric_type, name, value in outcome.custom_metrics
            ]
        return entries

    def _on_complete(self, status: RunStatus, *, result: Any = None, error: str | None = None):
        if self.agent.hooks is not None:
            call_hook(
                self.agent.hooks.on_complete,
                CompleteContext(
                    session_id=self.session_id,
                    run_id=self.run_record.run_id,
                    status=status.value,
                    result=result,
                    error=error,
                ),
            )


def _parse_output(agent: Agent, call: ToolCall) -> tuple[Any, str | None]:
    """Return the validated structured output, or the problem with it."""
    try:
        return agent.parse_output(call.arguments), None
    except ToolInputInvalid as error:
        return None, error.message
