"""One attempt at one step, holding the session's lease: its phases run in order."""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.utils import timezone

from agents_app import conf
from agents_app.definitions.agent import OUTPUT_TOOL_NAME
from agents_app.definitions.registry import AgentFactoryContext, get_registry
from agents_app.llm.base import AdapterContext, LLMError, ToolCall
from agents_app.mcp.tools import mcp_tools
from agents_app.memory.session import memory_tools, session_memory
from agents_app.runtime.ending import Ending
from agents_app.runtime.model_call import ModelCall
from agents_app.runtime.suspension import Suspension
from agents_app.runtime.tool_calls import StepScope, ToolOutcome, run_tool_calls
from agents_app.runtime.types import LeaseLost, Reply, StepOutcome
from agents_app.runtime.watcher import StepWatch
from agents_app.subagents import companions
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.types import Message, RunRecord, SessionState, ToolCallRecord
from streams_app.backends import get_stream_manager
from streams_app.backends.batching import BatchedWriter


class Attempt(ModelCall, Suspension, Ending):
    """One attempt at one step, holding the session's lease."""

    def __init__(
        self,
        store: SessionStateStore,
        state: SessionState,
        run: RunRecord,
        step: int,
        holder: str,
        *,
        history_revision: int | None = None,
        history: list[Message] | None = None,
    ) -> None:
        """`history_revision` is the session's as the claim read it; `history` the active
        branch the run's previous step left at that revision, if the step goes on with it."""
        self.store = store
        self.streams = get_stream_manager()
        self.state = state
        self.run_record = run
        self.step = step
        self.holder = holder
        self.step_id = f"{run.run_id}:{step}"
        self.llm_stream = None
        self.history_revision = history_revision
        # The active branch: the previous step's, or as the model call reads it.
        self.active: list[Message] | None = history
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

    def run(self, *, recover: bool, writer: BatchedWriter | None = None) -> StepOutcome:
        """Run the step; first undo what an attempt that died at it left, if `recover`.

        It writes its chunks with `writer`, the run's previous step's, when it goes on under
        the lease that step kept; otherwise it opens its own.
        """
        if recover:
            self._recover()
        writer = writer or self.open_writer()
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

    def _run_tools(
        self, reply: Reply, writer: BatchedWriter, held: list[ToolCall]
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

    def _chunk(self, chunk_type, **fields: Any):
        return chunk_type(
            step=self.step,
            session_id=self.session_id,
            agent_type=self.state.agent_type,
            **fields,
        )
