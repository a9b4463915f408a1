"""Stream chunk types: a discriminated union validated on every write.

Every chunk carries its `type`, the `step` that produced it, the `sessionId` and `agentType` of
its agent, and a `timestamp` (milliseconds since the epoch). Chunks are stored and sent in their
wire form: JSON with camelCase keys, as the reference clients expect.
"""

import time
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from streams_app.errors import InvalidChunk


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Chunk(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    step: int = Field(ge=0)
    session_id: str = Field(min_length=1)
    agent_type: str = Field(min_length=1)
    timestamp: int = Field(default_factory=_now_ms, ge=0)


class TextDelta(_Chunk):
    type: Literal["text_delta"] = "text_delta"
    delta: str
    message_id: str | None = None


class ReasoningDelta(_Chunk):
    type: Literal["reasoning_delta"] = "reasoning_delta"
    delta: str
    message_id: str | None = None


class ToolCallStart(_Chunk):
    type: Literal["tool_call_start"] = "tool_call_start"
    tool_call_id: str
    tool_name: str
    input: Any = None


class ToolResult(_Chunk):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False


class ToolApprovalRequest(_Chunk):
    type: Literal["tool_approval_request"] = "tool_approval_request"
    tool_call_id: str
    tool_name: str
    input: Any = None


class ToolApprovalResponse(_Chunk):
    type: Literal["tool_approval_response"] = "tool_approval_response"
    tool_call_id: str
    decision: Literal["approve", "reject"]
    reason: str | None = None


class StepStart(_Chunk):
    type: Literal["step_start"] = "step_start"
    run_id: str


class RunCompleted(_Chunk):
    type: Literal["run_completed"] = "run_completed"
    output: Any = None


class RunInterrupted(_Chunk):
    type: Literal["run_interrupted"] = "run_interrupted"
    reason: str | None = None


class RunFailed(_Chunk):
    type: Literal["run_failed"] = "run_failed"
    error: str


class RunResumed(_Chunk):
    type: Literal["run_resumed"] = "run_resumed"
    run_id: str
    previous_run_id: str | None = None


class RunSuspended(_Chunk):
    type: Literal["run_suspended"] = "run_suspended"
    reason: Literal["client_tool", "awaiting_children", "step_partial"]
    pending_tool_call_ids: list[str] = Field(default_factory=list)


class SubagentStart(_Chunk):
    type: Literal["subagent_start"] = "subagent_start"
    sub_session_id: str
    sub_agent_type: str
    tool_call_id: str


class SubagentEnd(_Chunk):
    type: Literal["subagent_end"] = "subagent_end"
    sub_session_id: str
    sub_agent_type: str
    tool_call_id: str
    output: Any = None
    error: str | None = None


class StatePatch(_Chunk):
    """Custom-state changes as RFC 6902 operations."""

    type: Literal["state_patch"] = "state_patch"
    patches: list[dict[str, Any]]


class StateSnapshot(_Chunk):
    type: Literal["state_snapshot"] = "state_snapshot"
    state: Any = None


class Custom(_Chunk):
    """A tool's own event, named by the tool."""

    type: Literal["custom"] = "custom"
    name: str = Field(min_length=1)
    data: Any = None


class Error(_Chunk):
    type: Literal["error"] = "error"
    error: str
    code: str | None = None
    recoverable: bool = False


Chunk = Annotated[
    TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolResult
    | ToolApprovalRequest
    | ToolApprovalResponse
    | StepStart
    | RunCompleted
    | RunInterrupted
    | RunFailed
    | RunResumed
    | RunSuspended
    | SubagentStart
    | SubagentEnd
    | StatePatch
    | StateSnapshot
    | Custom
    | Error,
    Field(discriminator="type"),
]
CHUNK_ADAPTER: TypeAdapter[Chunk] = TypeAdapter(Chunk)
CHUNK_TYPES = frozenset(get_args(get_args(Chunk)[0]))


def parse_chunk(data: Any) -> Chunk:
    """Return the typed chunk a wire-form dict describes; raise `InvalidChunk` if it is not one.

    A chunk of one of the union's types is returned as it is: it was validated when it was made
    (nothing makes one with `model_construct` or assigns to one after).
    """
    if type(data) in CHUNK_TYPES:
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump(by_alias=True)
    try:
        return CHUNK_ADAPTER.validate_python(data)
    except ValidationError as error:
        raise InvalidChunk(error) from None


def chunk_to_wire(chunk: Chunk | dict[str, Any]) -> dict[str, Any]:
    """Return a chunk, validated, in its JSON wire form; raise `InvalidChunk` if it is not one."""
    return parse_chunk(chunk).model_dump(mode="json", by_alias=True)
