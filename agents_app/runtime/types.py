"""What a step attempt produces and hands back: its outcome, the model's reply, tool messages."""

import json
from dataclasses import dataclass
from typing import Any

from agents_app.llm.base import ToolCall, Usage
from sessions_app.stores.types import Message, MessageRole, StepClaim
from streams_app.backends.batching import BatchedWriter


class LeaseLost(Exception):
    """The attempt's lease ran out and another worker took the step."""


@dataclass(frozen=True)
class StepOutcome:
    """What the task does after a step: nothing, go on with `next_step`, or retry later.

    With a `next_step`, `holder` still holds the session's lease: the run goes on under it,
    in this task or, once the task has handed the next step to the broker, after
    `hand_over` releases it. Then `claim` is the lease and the session as the step's commit
    left them, `writer` the stream writer the step wrote with, and `history` the active
    branch it left (when nothing else changed it during the step): the next step goes on
    with them when it runs in this task.
    """

    next_step: int | None = None
    retry_after: float | None = None
    holder: str | None = None
    claim: StepClaim | None = None
    writer: BatchedWriter | None = None
    history: list[Message] | None = None


@dataclass(frozen=True)
class Reply:
    """What the model said in one step."""

    text: str
    tool_calls: list[ToolCall]
    usage: list[Usage]


def tool_message(call: ToolCall, result: Any) -> Message:
    content = result if isinstance(result, str) else json.dumps(result, default=str)
    return Message(role=MessageRole.TOOL, content=content, tool_call_id=call.id, name=call.name)
