"""The deterministic, offline adapter: the default, which drives the demo agents and the tests.

A script is a function `(request, context) -> Turn` registered for an agent type (or named by
dotted path in the options as `script`). A turn's text streams as deltas of a few words,
`delay` seconds apart; its tool calls follow, with ids derived from the run, the turn's step
and their position, so a step run again asks for the same calls. A turn with an `error` raises
it after its text. Usage counts words, as a stand-in for tokens.
"""

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string

from agents_app.llm.base import (
    AdapterContext,
    Finish,
    LLMError,
    LLMEvent,
    LLMRequest,
    TextDelta,
    ToolCall,
    Usage,
)
from sessions_app.stores.types import MessageRole

WORDS_PER_DELTA = 3


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Turn:
    """What the scripted model answers in one step."""

    text: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    error: LLMError | None = None
    delay: float = 0.0


Script = Callable[[LLMRequest, AdapterContext], Turn]
_scripts: dict[str, Script] = {}
_scripts_lock = threading.Lock()


def register_script(agent_type: str, script: Script) -> None:
    """Make `script` answer for `agent_type`."""
    with _scripts_lock:
        _scripts[agent_type] = script


def unregister_script(agent_type: str) -> None:
    """Forget the script of `agent_type`, if it has one."""
    with _scripts_lock:
        _scripts.pop(agent_type, None)


def script_for(agent_type: str) -> Script | None:
    """Return the script registered for `agent_type`, if any."""
    with _scripts_lock:
        return _scripts.get(agent_type)


def turn_step(request: LLMRequest) -> int:
    """Return how many replies the model gave since the last user message: 0 at a turn's start."""
    step = 0
    for message in reversed(request.messages):
        if message.role == MessageRole.USER:
            break
        if message.role == MessageRole.ASSISTANT:
            step += 1
    return step


def sequence_script(*turns: Turn) -> Script:
    """Return a script that answers turn i at step i of a turn (the last turn thereafter)."""

    def script(request: LLMRequest, context: AdapterContext) -> Turn:
        return turns[min(turn_step(request), len(turns) - 1)]

    return script


def echo(request: LLMRequest, context: AdapterContext) -> Turn:
    """Answer with the last user message, as the default script."""
    users = [m for m in request.messages if m.role == MessageRole.USER]
    return Turn(text=f"You said: {users[-1].content}" if users else "Hello.")


class ScriptedAdapter:
    """Play the script of the context's agent type (options: `script`, `model`)."""

    def __init__(self, options: dict[str, Any], context: AdapterContext) -> None:
        self.context = context
        self.model = options.get("model") or "scripted"
        named = options.get("script")
        self.script = import_string(named) if named else script_for(context.agent_type) or echo

    def stream(self, request: LLMRequest) -> "ScriptedStream":
        return ScriptedStream(self, request)


class ScriptedStream:
    def __init__(self, adapter: ScriptedAdapter, request: LLMRequest) -> None:
        self.adapter = adapter
        self.request = request
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def __iter__(self) -> Iterator[LLMEvent]:
        context, request = self.adapter.context, self.request
        turn = self.adapter.script(request, context)
        words = turn.text.split(" ") if turn.text else []
        for start in range(0, len(words), WORDS_PER_DELTA):
            if self._closed.wait(turn.delay) if turn.delay else self._closed.is_set():
                return
            piece = " ".join(words[start : start + WORDS_PER_DELTA])
            yield TextDelta(piece if start == 0 else " " + piece)
        if turn.error is not None:
            raise turn.error
        step = turn_step(request)
        for index, call in enumerate(turn.tool_calls):
            call_id = call.id or f"call_{context.run_id[:12]}_{step}_{index}"
            yield ToolCall(id=call_id, name=call.name, arguments=dict(call.arguments))
        prompt = sum(len(m.content.split()) for m in request.messages) + len(request.system.split())
        completion = len(words) + sum(len(c.arguments) for c in turn.tool_calls)
        yield Usage(
            model=self.adapter.model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
        )
        yield Finish("tool_calls" if turn.tool_calls else "stop")
