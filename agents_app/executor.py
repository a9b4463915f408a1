"""One agent step, as the plain function a Celery task calls (DESIGN "One turn, end to end").

`run_step(session_id, run_id, step)` is idempotent by session, run and step, so a redelivered
task is safe (DESIGN invariant 4):

- a step whose commit landed does nothing, except enqueue the next step when its attempt died
  between commit and enqueue (the lease is free and the run goes on);
- a step that died before commit is run again by whoever takes the session's lease next.
  The lease tells it that its last holder never released it (`Lease.taken_over`), so it first
  drops the dead attempt's partial chunks (`cleanup_to_step`), cuts messages back to the last
  checkpoint and rolls back staged changes; a lease released cleanly needs none of that. No
  tool call runs twice: the store's records of the dead attempt's calls say which finished
  (their outcomes are replayed) and which were cut off (`tool_calls`);
- an attempt that lost its lease (a worker paused too long) can neither write chunks (its
  exclusive stream writer is fenced) nor commit (taking the lease bumped the version);
- a step left unfinished by more than `HELIX["STEP_MAX_ABANDONED"]` attempts in a row (one
  that kills its worker, say) fails its run instead of being delivered for ever.

The step commit stages the tools' state changes and writes messages, state, their promotion,
checkpoint and usage in one transaction, with the run's last chunk and the end of the stream
when the run finishes.
"""

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app import companions, conf, launch, subagents
from agents_app.agent_state import AgentState, broadcast_state
from agents_app.definitions import OUTPUT_TOOL_NAME, Agent, ToolInputInvalid
from agents_app.hooks import CompleteContext, call_hook
from agents_app.llm.base import (
    AdapterContext,
    LLMError,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
    build_adapter,
)
from agents_app.mcp.tools import mcp_tools
from agents_app.observability import metrics, tracing
from agents_app.registry import AgentFactoryContext, get_registry
from agents_app.session_memory import memory_tools, session_memory
from agents_app.state import StateDraft
from agents_app.tool_calls import StepScope, ToolOutcome, run_tool_calls
from agents_app.watcher import StepWatch
from sessions_app.connections import release_connection
from sessions_app.errors import SessionNotFound, VersionConflict
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.rules import apply_merge_ops
from sessions_app.stores.types import (
    CasRejected,
    CheckpointMeta,
    Message,
    MessageRole,
    RunRecord,
    RunStatus,
    SessionState,
    SessionStatus,
    StepWrites,
    ToolCallRecord,
)
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import CustomEntry, TokenCounts, TokensEntry, ToolEntry, UsageEntry
from streams_app import chunks
from streams_app.backends import get_stream_manager
from streams_app.backends.batching import BatchedWriter
from streams_app.errors import WriterSuperseded

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The attempt's lease ran out and another worker took the step."""


@dataclass(frozen=True)
class StepOutcome:
    """What the task does after a step: nothing, go on with `next_step`, or retry later.

    With a `next_step`, `holder` still holds the session's lease: the run goes on under it,
    in this task or, once the task has handed the next step to the broker, after
    `hand_over` releases it.
    """

    next_step: int | None = None
    retry_after: float | None = None
    holder: str | None = None


def run_steps(session_id: str, run_id: str, step: int, *, time_slice: float) -> StepOutcome:
    """Run the run's steps from `step` on, one durable commit each, for about `time_slice`.

    Return the outcome of the last step run: the task hands its `next_step` to the broker,
    so a long run takes turns with the others rather than keeping a worker to itself.
    """
    holder = uuid.uuid4().hex
    ends_at = time.monotonic() + time_slice
    while True:
        outcome = run_step(session_id, run_id, step, holder=holder)
        if outcome.next_step is None or time.monotonic() >= ends_at:
            return outcome
        step = outcome.next_step


def hand_over(session_id: str, holder: str) -> None:
    """Release the lease a run kept between steps, before its next step goes to the broker."""
    with contextlib.suppress(SessionNotFound):
        get_session_store().release_lease(session_id, holder)


def run_step(session_id: str, run_id: str, step: int, *, holder: str) -> StepOutcome:
    """Run step `step` of the run as `holder`, or do what a redelivery of it requires.

    A step its run committed already is done with, unless the lease says that its holder
    died since (it never released it): that holder may have died before handing the next
    step on, so this attempt runs it.
    """
    store = get_session_store()
    try:
        claim = store.claim_step(session_id, holder, conf.step_lease_seconds())
    except SessionNotFound:
        return StepOutcome()
    if claim is None:  # Another attempt runs it; if that worker died, its lease runs out.
        return StepOutcome(retry_after=conf.step_lease_seconds() / 2)
    lease = claim.lease
    state, run = _current(claim.state, claim.run, run_id)
    if state is not None and state.step_count >= step and lease.taken_over:
        step = state.step_count + 1  # The run goes on where its dead holder left it.
    elif state is None or state.step_count >= step:  # Ended, or a step committed already.
        store.release_lease(session_id, holder, clean=not lease.taken_over)
        return StepOutcome()
    attempt = _Attempt(store, state, run, step, holder)
    if lease.abandoned > conf.step_max_abandoned():
        return attempt.give_up(
            f"Step {step} was left unfinished by {lease.abandoned} attempts in a row "
            "(its worker died, stalled or failed each time)."
        )
    try:
        with (
            metrics.step(state.agent_type),
            tracing.step_span(
                run.metadata,
                session_id=session_id,
                run_id=run_id,
                step=step,
                agent_type=state.agent_type,
            ),
        ):
            return attempt.run(recover=lease.taken_over)
    except (LeaseLost, WriterSuperseded, VersionConflict) as error:
        logger.warning(
            "Step %s of run %s was taken over by another worker and did not commit: %s",
            step,
            run_id,
            error,
        )
        return StepOutcome()
    except BaseException:
        store.release_lease(session_id, holder, clean=False)  # Its leftovers need undoing.
        raise


def fail_run(
    session_id: str, run_id: str, step: int, message: str, *, failure_reason: str = "step_error"
) -> bool:
    """Fail the run at `step` after it kept failing or stalling; return whether it was failed now.

    It waits for no one: if another attempt holds the lease, that attempt decides.
    """
    store = get_session_store()
    holder = uuid.uuid4().hex
    claim = store.claim_step(session_id, holder, conf.step_lease_seconds())
    if claim is None:
        return False
    state, run = _current(claim.state, claim.run, run_id)
    if state is None or state.step_count >= step:
        store.release_lease(session_id, holder, clean=not claim.lease.taken_over)
        return False
    attempt = _Attempt(store, state, run, step, holder)
    attempt.fail(attempt.open_writer(), message, failure_reason=failure_reason)
    return True


def _current(
    state: SessionState, run: RunRecord | None, run_id: str
) -> tuple[SessionState | None, RunRecord | None]:
    """Return the session and its current run if that is the run, and running."""
    if run is None or run.run_id != run_id or run.status != RunStatus.RUNNING:
        return None, None
    if state.status != SessionStatus.ACTIVE:
        return None, None
    return state, run


@dataclass(frozen=True)
class _Reply:
    """What the model said in one step."""

    text: str
    tool_calls: list[ToolCall]
    usage: list[Usage]


class _Attempt:
    """One attempt at one step, holding the session's lease."""

    def __init__(
        self,
        store: SessionStateStore,
        state: SessionState,
        run: RunRecord,
        step: int,
        holder: str,
    ) -> None:
        self.store = store
        self.streams = get_stream_manager()
        self.state = state
        self.run_record = run
        self.step = step
        self.holder = holder
        self.step_id = f"{run.run_id}:{step}"
        self.llm_stream = None
        # When the attempt began, and how long its model call and its tools took (ms).
        self.started_at = timezone.now()
        self.model_ms: int | None = None
        self.tools_ms: int | None = None
        # The suspended step's calls, with what people and children gave; committed first.
        self.drained: list[ToolOutcome] = []
        # The tool calls dead attempts at this step began (read when taking it over).
        self.earlier: dict[str, ToolCallRecord] = {}
        # A regenerating run's first step answers this message, on a branch of its own.
        first_step = run.metadata.get("firstStep") == step
        self.branch_from: str | None = run.metadata.get("branchFrom") if first_step else None
        self.agent = get_registry().resolve(
            state.agent_type,
            AgentFactoryContext(
                session_id=state.session_id, run_id=run.run_id, user_id=state.user_id
            ),
        )
        self.adapter_context = AdapterContext(
            session_id=state.session_id, agent_type=state.agent_type, run_id=run.run_id
        )
        self.memory = (
            None
            if self.agent.memory is None
            else session_memory(self.agent.memory, state, self.adapter_context, self.agent.llm)
        )
        remembering = (
            [] if self.memory is None else memory_tools(self.agent.memory, self.memory, state)
        )
        self.tools = {
            tool.name: tool
            for tool in [
                *self.agent.all_tools(),
                *companions.companion_tools(self.agent),
                *remembering,
                *mcp_tools(self.agent, state),
            ]
        }

    @property
    def session_id(self) -> str:
        return self.state.session_id

    def run(self, *, recover: bool) -> StepOutcome:
        """Run the step; first undo what an attempt that died at it left, if `recover`."""
        if recover:
            self._recover()
        writer = self.open_writer()
        if self.state.suspended_step_id:  # What people and children gave, before all else.
            self.drained = self._drain(writer)
        if (flag := self.state.interrupt_flag) is not None:  # Read with the lease.
            return self._interrupt(writer, flag.reason, reply=None, outcomes=[])
        with StepWatch(
            session_id=self.session_id,
            holder=self.holder,
            lease_seconds=conf.step_lease_seconds(),
            poll_seconds=conf.interrupt_poll_seconds(),
            on_stop=self._stop_model,
        ) as watch:
            try:
                reply = self._call_model(writer, watch)
            except LLMError as error:
                return self.fail(writer, f"The model failed: {error}", failure_reason="llm_error")
            held = self._held_calls(reply)
            outcomes = [] if watch.stopped else self._run_tools(reply, writer, held)
        if watch.lease_lost:
            raise LeaseLost(f"Lease of session {self.session_id!r} lost to another worker.")
        if watch.interrupted:
            flag = self.store.check_interrupt_flag(self.session_id)
            return self._interrupt(writer, flag and flag.reason, reply, outcomes)
        if held:
            return self._suspend(writer, reply, outcomes, held)
        return self._finish_step(writer, reply, outcomes)

    def open_writer(self) -> BatchedWriter:
        """Open the step's exclusive writer, which fences off any earlier attempt's."""
        return BatchedWriter(
            self.streams.create_writer(
                self.state.stream_id, self.run_record.run_id, self.state.agent_type, exclusive=True
            )
        )

    # Recovery

    def _recover(self) -> None:
        """Undo what a dead attempt at this step left behind."""
        # Fence its writer off first, so none of its queued chunks lands after the cleanup.
        self.open_writer()
        self.streams.cleanup_to_step(self.state.stream_id, self.step - 1)
        checkpoint = self.store.get_latest_checkpoint(self.session_id)
        kept = checkpoint.message_count if checkpoint is not None else None
        if kept is not None and self.state.message_count > kept:
            self.store.truncate_messages(self.session_id, kept)
        self.store.rollback_staging(self.session_id, self.step_id)
        self.earlier = self.store.get_tool_calls(self.session_id, self.step_id)

    # The model

    def _call_model(self, writer: BatchedWriter, watch: StepWatch) -> _Reply:
        """Stream the model's reply to the stream, retrying retryable errors with backoff."""
        measured = self._compact(writer)
        request = LLMRequest(
            system=self._system_prompt(),
            messages=self._history(measured),
            tools=[
                ToolSpec(tool.name, tool.description, tool.json_schema())
                for tool in self.tools.values()
            ],
            model=self.agent.llm.get("model"),
            temperature=self.agent.llm.get("temperature"),
        )
        adapter = build_adapter(self.adapter_context, self.agent.llm)
        release_connection()  # The model is slow: the connection serves other steps meanwhile.
        with self._timed("model_ms"):
            return self._call_with_retries(adapter, request, writer, watch)

    def _call_with_retries(
        self, adapter, request: LLMRequest, writer: BatchedWriter, watch: StepWatch
    ) -> _Reply:
        retries, retried = conf.llm_max_retries(), 0
        while True:
            try:
                with (
                    tracing.span("model", model=request.model, attempt=retried + 1),
                    metrics.MODEL_SECONDS.labels(self.state.agent_type).time(),
                ):
                    return self._stream_reply(adapter, request, writer, watch)
            except LLMError as error:
                if not error.retryable or retried == retries or watch.stopped:
                    raise
                logger.warning("LLM call failed (%s); retry %d of %d", error, retried + 1, retries)
                # The failed attempt's deltas go; the retry streams the reply afresh.
                with writer.held():
                    writer.flush()
                    self.streams.cleanup_to_step(self.state.stream_id, self.step - 1)
                time.sleep(conf.llm_retry_backoff_seconds() * 2**retried)
                retried += 1

    def _stream_reply(self, adapter, request: LLMRequest, writer: BatchedWriter, watch) -> _Reply:
        text: list[str] = []
        calls: list[ToolCall] = []
        usage: list[Usage] = []
        self.llm_stream = adapter.stream(request)
        if watch.stopped:
            self.llm_stream.close()
        message_id = f"{self.step_id}:assistant"
        for event in self.llm_stream:
            match event:
                case TextDelta():
                    text.append(event.text)
                    writer.write(
                        self._chunk(chunks.TextDelta, delta=event.text, message_id=message_id)
                    )
                case ReasoningDelta():
                    writer.write(
                        self._chunk(chunks.ReasoningDelta, delta=event.text, message_id=message_id)
                    )
                case ToolCall():
                    calls.append(event)
                case Usage():
                    usage.append(event)
        return _Reply(text="".join(text), tool_calls=calls, usage=usage)

    def _system_prompt(self) -> str:
        """Return the agent's prompt, then its context blocks' frozen one."""
        own = self.agent.render_system_prompt(self.state.custom_state or {})
        if self.memory is None:
            return own
        return "\n\n".join(part for part in (own, self.memory.freeze_system_prompt()) if part)

    def _compact(self, writer: BatchedWriter) -> list[Message] | None:
        """Compact the branch if it is past the agent's `compact_after`; report a failure.

        Return the active branch if measuring it read it and nothing changed it since.
        """
        if self.memory is None:
            return None
        own_prompt = self.agent.render_system_prompt(self.state.custom_state or {})
        result = self.memory.compact_if_needed(other_prompt=own_prompt)
        if result.error is not None:
            writer.write(
                self._chunk(
                    chunks.Error, error=result.error, code="compaction-failed", recoverable=True
                )
            )
        return result.history

    def _stop_model(self) -> None:
        if self.llm_stream is not None:
            self.llm_stream.close()

    def _history(self, active: list[Message] | None) -> list[Message]:
        """Return the active branch, or, in a run's first step, the branch it starts from.

        `active` is the active branch when the step has read it already.
        """
        if active is None or self.branch_from is not None:
            active = self.store.get_history(self.session_id, self.branch_from)
        return active + self._drained_messages()

    def _drained_messages(self) -> list[Message]:
        return [_tool_message(o.call, o.result) for o in self.drained]

    # Tools

    def _run_tools(
        self, reply: _Reply, writer: BatchedWriter, held: list[ToolCall]
    ) -> list[ToolOutcome]:
        """Run the reply's server tool calls; the `held` ones wait for a person or a child."""
        held_ids = {call.id for call in held}
        calls = [c for c in reply.tool_calls if c.name != OUTPUT_TOOL_NAME and c.id not in held_ids]
        with self._timed("tools_ms"):
            return run_tool_calls(self.tools, calls, self._scope(writer), self.state.custom_state)

    @contextmanager
    def _timed(self, attribute: str) -> Iterator[None]:
        """Set `attribute` to how many milliseconds the block took."""
        began = time.monotonic()
        try:
            yield
        finally:
            setattr(self, attribute, round((time.monotonic() - began) * 1000))

    def _timings(self, outcomes: list[ToolOutcome]) -> dict[str, Any]:
        """Return how the step spent its time, for its checkpoint (the admin's timeline)."""
        return {
            "startedAt": self.started_at.isoformat(),
            "modelMs": self.model_ms,
            "toolsMs": self.tools_ms,
            "tools": [
                {"name": o.call.name, "ms": o.duration_ms, "error": o.is_error} for o in outcomes
            ],
        }

    def _scope(self, writer: BatchedWriter) -> StepScope:
        return StepScope(
            session_id=self.session_id,
            run_id=self.run_record.run_id,
            agent_type=self.state.agent_type,
            step=self.step,
            step_id=self.step_id,
            writer=writer,
            earlier=self.earlier,
        )

    def _held_calls(self, reply: _Reply) -> list[ToolCall]:
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

    # Suspension

    def _suspend(
        self,
        writer: BatchedWriter,
        reply: _Reply,
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
        with writer.held():
            writer.flush()  # What it streamed is stored first: the transaction holds the rest.
            with transaction.atomic():
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
            child = subagents.spawn_child(self.state, call, tool)
        else:
            child = companions.awaited_child(call, self.state)
        return subagents.await_child(self.state, writer, call, child)

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

    # Ending the step

    def _finish_step(
        self, writer: BatchedWriter, reply: _Reply, outcomes: list[ToolOutcome]
    ) -> StepOutcome:
        agent = self.agent
        output_call = next((c for c in reply.tool_calls if c.name == OUTPUT_TOOL_NAME), None)
        messages = self._step_messages(reply, outcomes)
        if output_call is not None and agent.output_schema is not None:
            output, problem = _parse_output(agent, output_call)
            if problem is None:
                return self._complete(writer, messages, outcomes, reply, output)
            messages.append(_tool_message(output_call, {"error": problem}))
        elif not reply.tool_calls and agent.output_schema is None:
            return self._complete(writer, messages, outcomes, reply, reply.text)
        if self.step >= agent.max_steps:
            return self._fail(
                writer, messages, outcomes, reply, f"Reached the limit of {agent.max_steps} steps."
            )
        self._commit(writer, messages, outcomes, reply, SessionStatus.ACTIVE, keep_lease=True)
        return StepOutcome(next_step=self.step + 1, holder=self.holder)

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

    def _interrupt(self, writer, reason: str | None, reply: _Reply | None, outcomes) -> StepOutcome:
        reply = reply or _Reply(text="", tool_calls=[], usage=[])
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
        with writer.held():
            writer.flush()  # What it streamed is stored first: the transaction holds the end.
            with transaction.atomic():
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
                subagents.notify_parent(self.state)
        self._on_complete(status, result=output, error=error)

    def _step_messages(self, reply: _Reply, outcomes: list[ToolOutcome]) -> list[Message]:
        assistant = Message(
            role=MessageRole.ASSISTANT,
            content=reply.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
            ],
        )
        return [assistant, *(_tool_message(o.call, o.result) for o in outcomes)]

    def _commit(
        self,
        writer: BatchedWriter,
        messages: list[Message],
        outcomes: list[ToolOutcome],
        reply: _Reply,
        status: SessionStatus,
        *,
        output: Any = None,
        error: str | None = None,
        pending: dict[str, Any] | None = None,
        awaited: dict[str, Any] | None = None,
        keep_lease: bool = False,
    ) -> None:
        """Commit the step: its chunks, messages, state, staging, checkpoint and usage.

        The lease is freed with it, unless `keep_lease`: the run goes on under it. The drained
        calls of a suspended step come first; `pending` are the calls the step suspends on
        for people, `awaited` those it suspends on for its children.
        """
        messages = [*self._drained_messages(), *messages]
        if self.branch_from is not None and messages:
            messages[0] = replace(messages[0], parent_id=self.branch_from)
        outcomes = [*self.drained, *outcomes]
        custom_state, warnings = apply_merge_ops(
            self.state.custom_state,
            StepWrites(ops=[op for o in outcomes for op in o.draft.ops()]),
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
        changes = [o.draft.staged_change(o.call.id) for o in outcomes if o.draft.ops()]
        # The writer is held from before the transaction begins (see `BatchedWriter.held`).
        with writer.held(), tracing.span("commit", status=status.value):
            writer.flush()  # What it streamed is stored first, up to the checkpoint's sequence.
            with transaction.atomic():
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
                    forget_tool_calls=bool(outcomes),  # The commit holds the calls now.
                )
                get_usage_store().record_entries(self._usage(reply, outcomes))
                if custom_state != self.state.custom_state:  # Tools wrote it: tell its clients.
                    stored = AgentState(state=custom_state, version=committed.new_version)
                    transaction.on_commit(lambda: broadcast_state(self.session_id, stored))
        metrics.STEPS_COMMITTED.labels(self.state.agent_type).inc()

    def _usage(self, reply: _Reply, outcomes: list[ToolOutcome]) -> list[UsageEntry]:
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

    def _chunk(self, chunk_type, **fields: Any):
        return chunk_type(
            step=self.step,
            session_id=self.session_id,
            agent_type=self.state.agent_type,
            **fields,
        )


def _parse_output(agent: Agent, call: ToolCall) -> tuple[Any, str | None]:
    """Return the validated structured output, or the problem with it."""
    try:
        return agent.parse_output(call.arguments), None
    except ToolInputInvalid as error:
        return None, error.message


def _answer(entry: dict[str, Any]) -> tuple[Any, bool]:
    """Return the result of a suspended call that did not run here, and whether it failed.

    A client's result, a rejection, or a sub-agent's outcome.
    """
    if "subSessionId" in entry:
        return subagents.child_outcome(get_session_store().load_state(entry["subSessionId"]))
    submission = entry["submission"]
    if entry["kind"] == "client":
        return submission["result"], False
    because = f": {submission['reason']}" if submission.get("reason") else "."
    return {"error": f"The user rejected this tool call{because}"}, True


def _tool_message(call: ToolCall, result: Any) -> Message:
    content = result if isinstance(result, str) else json.dumps(result, default=str)
    return Message(role=MessageRole.TOOL, content=content, tool_call_id=call.id, name=call.name)
