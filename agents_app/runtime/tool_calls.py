"""Running the tool calls of one step, in parallel, each with its own context and state draft.

Every call gets a `StateDraft` of the state the step began with; its writes become the merge
ops of a staged change of its own, so parallel calls merge without losing each other's writes.
A tool that raises becomes a tool result marked as an error, and the step goes on.

A call runs at most once, whatever happens to the worker: it is recorded in the session store
before it runs and its outcome after (`begin_tool_calls`, `finish_tool_call`). An attempt that
takes over a dead one's step is given those records (`StepScope.earlier`): a finished call's
outcome is replayed, its state writes, metrics and custom chunks included, and a call that was
running when its worker died is not run again; its result says it was cut off. A call of an
idempotent tool (`Tool.idempotent`) keeps no records: the attempt that takes over runs it again.
"""

import contextvars
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from pydantic import BaseModel

from agents_app.definitions.agent import Tool, ToolInputInvalid
from agents_app.definitions.state import StateDraft
from agents_app.llm.base import ToolCall
from agents_app.observability import metrics, tracing
from sessions_app.connections import release_connection
from sessions_app.storable import storable
from sessions_app.stores import get_session_store
from sessions_app.stores.types import ToolCallRecord, merge_op_from_json, merge_op_to_json
from streams_app.backends.batching import BatchedWriter
from streams_app.chunks import Custom, ToolCallStart, ToolResult

logger = logging.getLogger(__name__)
# Parallel calls per step; more wait for a free thread.
MAX_PARALLEL_TOOL_CALLS = 8
CUT_OFF = (
    "This tool call was cut off: the worker running it stopped before the step finished, so "
    "it may or may not have taken effect. It was not run again."
)


@dataclass(frozen=True, kw_only=True)
class StepScope:
    """What every tool call of a step shares."""

    session_id: str
    run_id: str
    agent_type: str
    step: int
    step_id: str
    writer: BatchedWriter
    # The calls earlier attempts at this step began, by id (an attempt that took over).
    earlier: Mapping[str, ToolCallRecord] = field(default_factory=dict)


@dataclass(kw_only=True)
class ToolCallContext:
    """The `ToolContext` a tool's `execute` receives."""

    scope: StepScope
    tool_call_id: str
    state: StateDraft
    custom_metrics: list[tuple[str, str, float]] = field(default_factory=list)
    emitted: list[tuple[str, Any]] = field(default_factory=list)  # (name, data), in order.

    @property
    def session_id(self) -> str:
        return self.scope.session_id

    @property
    def run_id(self) -> str:
        return self.scope.run_id

    @property
    def agent_type(self) -> str:
        return self.scope.agent_type

    @property
    def step(self) -> int:
        return self.scope.step

    def emit(self, data: Any, *, name: str | None = None) -> None:
        """Write a custom chunk to the session's stream."""
        chunk = Custom(
            step=self.step,
            session_id=self.session_id,
            agent_type=self.agent_type,
            name=name or "custom",
            data=storable(data),
        )
        self.scope.writer.write(chunk)
        self.emitted.append((chunk.name, chunk.data))

    def record_usage(self, metric_type: str, name: str, value: float) -> None:
        """Record a custom usage metric, committed with the step."""
        self.custom_metrics.append((metric_type, name, value))


@dataclass(frozen=True, kw_only=True)
class ToolOutcome:
    """One tool call's result, its state writes, and what it cost."""

    call: ToolCall
    result: Any
    is_error: bool
    draft: StateDraft
    duration_ms: int
    custom_metrics: list[tuple[str, str, float]]
    # Whether the store holds a record of the call, which the step's commit removes.
    recorded: bool = False


def run_tool_calls(
    tools: Mapping[str, Tool],
    calls: Sequence[ToolCall],
    scope: StepScope,
    custom_state: dict[str, Any] | None,
    *,
    announce: bool = True,
) -> list[ToolOutcome]:
    """Run the calls in parallel threads; return their outcomes in call order.

    Each call's start (unless not `announce`, when an earlier step announced it) and result go
    to the stream. The calls that run are recorded first, together. A lone call runs in the
    step's own thread: there is nothing to run beside it.
    """
    fresh = [call.id for call in calls if _recorded(tools.get(call.name), call, scope)]
    if fresh:
        get_session_store().begin_tool_calls(scope.session_id, scope.step_id, fresh)
    release_connection()  # Tools may take long: the pool lends it meanwhile, to them too.
    if len(calls) < 2:
        return [
            _run_one(tools.get(call.name), call, scope, custom_state, announce) for call in calls
        ]
    with ThreadPoolExecutor(
        max_workers=min(MAX_PARALLEL_TOOL_CALLS, len(calls)), thread_name_prefix="helix-tool"
    ) as pool:
        futures = [  # Each in a copy of the step's context: its trace span, for one.
            pool.submit(
                contextvars.copy_context().run,
                _run_in_thread,
                tools.get(call.name),
                call,
                scope,
                custom_state,
                announce,
            )
            for call in calls
        ]
        return [future.result() for future in futures]


def _run_in_thread(*args: Any) -> ToolOutcome:
    """Run one call in a pool thread, which closes its own connection after it."""
    try:
        return _run_one(*args)
    finally:
        connections.close_all()


def _run_one(
    tool: Tool | None,
    call: ToolCall,
    scope: StepScope,
    custom_state: dict[str, Any] | None,
    announce: bool,
) -> ToolOutcome:
    """Run one call, announcing it (if `announce`) and its result on the stream."""
    context = ToolCallContext(
        scope=scope, tool_call_id=call.id, state=StateDraft(custom_state or {})
    )
    if announce:
        _write(
            scope, ToolCallStart, tool_call_id=call.id, tool_name=call.name, input=call.arguments
        )
    earlier = scope.earlier.get(call.id)
    if earlier is None:
        outcome = _run_afresh(tool, call, context)
    elif earlier.outcome is None:  # Its worker died while it ran.
        outcome = _outcome(
            call, context, {"error": CUT_OFF}, is_error=True, duration_ms=0, recorded=True
        )
    else:
        outcome = _replay(call, context, earlier.outcome)
    _write(
        scope,
        ToolResult,
        tool_call_id=call.id,
        tool_name=call.name,
        result=outcome.result,
        is_error=outcome.is_error,
    )
    return outcome


def _recorded(tool: Tool | None, call: ToolCall, scope: StepScope) -> bool:
    """Return whether the call runs now on record: a known tool that is not idempotent, valid
    JSON, not begun by a dead attempt."""
    return (
        tool is not None
        and not tool.idempotent
        and not call.invalid_arguments
        and call.id not in scope.earlier
    )


def _run_afresh(tool: Tool | None, call: ToolCall, context: ToolCallContext) -> ToolOutcome:
    """Run a call no earlier attempt began; record its outcome where its start is on record."""
    scope, store = context.scope, get_session_store()
    recorded = _recorded(tool, call, scope)  # Else it is idempotent, or fails before it runs.
    started = time.monotonic()
    with tracing.span("tool", tool_name=call.name, tool_call_id=call.id) as span:
        result, is_error = _execute(tool, call, context)
        result = storable(result)  # Stored as every backend can store it (a binary file's text).
        span.set_attribute("helix.tool_error", is_error)
    elapsed = time.monotonic() - started
    metrics.TOOL_SECONDS.labels(scope.agent_type).observe(elapsed)
    duration_ms = round(elapsed * 1000)
    outcome = _outcome(
        call, context, result, is_error=is_error, duration_ms=duration_ms, recorded=recorded
    )
    if recorded:
        store.finish_tool_call(
            scope.session_id,
            scope.step_id,
            call.id,
            {
                "result": result,
                "isError": is_error,
                "durationMs": duration_ms,
                "ops": [merge_op_to_json(op) for op in context.state.ops()],
                "metrics": context.custom_metrics,
                "emitted": context.emitted,
            },
        )
    return outcome


def _replay(call: ToolCall, context: ToolCallContext, recorded: dict[str, Any]) -> ToolOutcome:
    """Return the outcome a dead attempt recorded, its custom chunks written again."""
    context.state.replay([merge_op_from_json(op) for op in recorded["ops"]])
    context.custom_metrics = [tuple(metric) for metric in recorded["metrics"]]
    for name, data in recorded["emitted"]:
        context.emit(data, name=name)
    return _outcome(
        call,
        context,
        recorded["result"],
        is_error=recorded["isError"],
        duration_ms=recorded["durationMs"],
        recorded=True,
    )


def _outcome(
    call: ToolCall,
    context: ToolCallContext,
    result: Any,
    *,
    is_error: bool,
    duration_ms: int,
    recorded: bool = False,
) -> ToolOutcome:
    return ToolOutcome(
        call=call,
        result=result,
        is_error=is_error,
        draft=context.state,
        duration_ms=duration_ms,
        custom_metrics=context.custom_metrics,
        recorded=recorded,
    )


def _execute(tool: Tool | None, call: ToolCall, context: ToolCallContext) -> tuple[Any, bool]:
    """Return the tool's JSON-able result and whether it is an error."""
    if tool is None:
        return {"error": f"Unknown tool {call.name!r}."}, True
    if call.invalid_arguments:
        return {"error": "The tool arguments were not valid JSON."}, True
    try:
        return tool.run(call.arguments, context), False
    except ToolInputInvalid as error:
        return {"error": str(error)}, True
    except Exception as error:  # A tool's failure is the model's to handle, not the step's.
        logger.warning("Tool %s failed in step %s", call.name, context.step, exc_info=True)
        return {"error": f"{type(error).__name__}: {error}"}, True


def _write(scope: StepScope, chunk_type: type[BaseModel], **fields: Any) -> None:
    scope.writer.write(
        chunk_type(
            step=scope.step, session_id=scope.session_id, agent_type=scope.agent_type, **fields
        )
    )
