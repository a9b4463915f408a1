"""The deterministic, offline adapter: the default, which drives the demo agents and the tests.

A script is a function ``(request, context) -> Turn``. The adapter takes it from its options
(``"script"``: a dotted path or the function itself, from ``HELIX["LLM"]["OPTIONS"]`` or the
agent's `llm` config), else from the registry by agent type, else it echoes the last user
message.

A turn plays as: its reasoning, then its text, as deltas of a few words each, the k-th due `k *
delay` seconds after the turn began (on its own clock, as a model server streams: a reader that
falls behind finds the next deltas waiting, and the reply takes no longer); then its tool calls,
with ids derived from the run, the step and their position, so a step run again asks for the
same calls; then usage (words stand in for tokens) and `Finish`. A turn's `error` is raised
after `error_after` text deltas (by default after all of them), before any tool call. `close()`
from any thread ends the iteration within one delay, quietly (`LLMStream`).

The step is the number of assistant replies since the last user message: 0 when a turn starts.
"""

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from agents_app.llm.base import (
    AdapterContext,
    Finish,
    FinishReason,
    LLMError,
    LLMEvent,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
    parse_tool_arguments,
)
from sessions_app.stores.types import MessageRole

WORDS_PER_DELTA = 3
DEFAULT_MODEL = "scripted"


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call the scripted model makes; string arguments are parsed as a model's JSON."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """What the scripted model answers in one step.

    `usage` replaces the computed usage; `finish` replaces the finish reason (``tool_calls``
    when the turn calls tools, else ``stop``).
    """

    text: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    usage: Usage | None = None
    error: LLMError | None = None
    error_after: int | None = None
    delay: float = 0.0
    reasoning: str = ""
    finish: FinishReason | None = None


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
    if not turns:
        raise ValueError("sequence_script needs at least one turn.")

    def script(request: LLMRequest, context: AdapterContext) -> Turn:
        return turns[min(turn_step(request), len(turns) - 1)]

    return script


def echo(request: LLMRequest, context: AdapterContext) -> Turn:
    """Answer with the last user message, as the default script."""
    users = [m for m in request.messages if m.role == MessageRole.USER]
    return Turn(text=f"You said: {users[-1].content}" if users else "Hello.")


def word_pieces(text: str, words: int = WORDS_PER_DELTA) -> list[str]:
    """Split `text` into pieces of a few words each that concatenate back to it exactly."""
    tokens = re.findall(r"\s*\S+", text)
    pieces = ["".join(tokens[start : start + words]) for start in range(0, len(tokens), words)]
    rest = text[sum(map(len, tokens)) :]
    if rest:
        pieces = [*pieces[:-1], pieces[-1] + rest] if pieces else [rest]
    return pieces


def resolve_script(options: dict[str, Any], agent_type: str) -> Script:
    """Return the script the options name, else the one registered for the agent type, else echo."""
    named = options.get("script")
    if callable(named):
        return named
    if named:
        try:
            return import_string(named)
        except ImportError as error:
            raise ImproperlyConfigured(f"Scripted LLM script {named!r}: {error}") from error
    return script_for(agent_type) or echo


class ScriptedAdapter:
    """Play a script (options: `script`, `model`)."""

    def __init__(self, options: dict[str, Any], context: AdapterContext) -> None:
        self.context = context
        self.model = options.get("model") or DEFAULT_MODEL
        self.script = resolve_script(options, context.agent_type)

    def stream(self, request: LLMRequest) -> "ScriptedStream":
        return ScriptedStream(self, request)


class ScriptedStream:
    """The scripted reply to one request; the script runs when iteration starts."""

    def __init__(self, adapter: ScriptedAdapter, request: LLMRequest) -> None:
        self.adapter = adapter
        self.request = request
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def __iter__(self) -> Iterator[LLMEvent]:
        if self._closed.is_set():
            return
        turn = self.adapter.script(self.request, self.adapter.context)
        for event in self._play(turn):
            if self._closed.is_set():
                return
            yield event

    def _play(self, turn: Turn) -> Iterator[LLMEvent]:
        deltas: list[TextDelta | ReasoningDelta] = [
            *map(ReasoningDelta, word_pieces(turn.reasoning)),
            *map(TextDelta, word_pieces(turn.text)),
        ]
        texts = 0
        began = time.monotonic()
        for due, delta in enumerate(deltas, start=1):
            if isinstance(delta, TextDelta):
                if turn.error is not None and texts == turn.error_after:
                    raise turn.error.with_traceback(None)
                texts += 1
            if turn.delay:
                self._closed.wait(max(0.0, began + due * turn.delay - time.monotonic()))
            yield delta
        if turn.error is not None:
            raise turn.error.with_traceback(None)
        calls = [self._tool_call(call, index) for index, call in enumerate(turn.tool_calls)]
        yield from calls
        yield turn.usage or self._usage(turn, calls)
        yield Finish(turn.finish or ("tool_calls" if calls else "stop"))

    def _tool_call(self, call: ScriptedToolCall, index: int) -> ToolCall:
        if isinstance(call.arguments, str):
            arguments, invalid = parse_tool_arguments(call.arguments)
        else:
            arguments, invalid = dict(call.arguments), False
        step = turn_step(self.request)
        call_id = call.id or f"call_{self.adapter.context.run_id[:12]}_{step}_{index}"
        return ToolCall(call_id, call.name, arguments, invalid_arguments=invalid)

    def _usage(self, turn: Turn, calls: list[ToolCall]) -> Usage:
        request = self.request
        prompt = _words(request.system) + sum(
            _words(m.content) + _words(json.dumps(m.tool_calls)) * bool(m.tool_calls)
            for m in request.messages
        )
        reasoning = _words(turn.reasoning)
        completion = (
            _words(turn.text) + reasoning + sum(_words(json.dumps(c.arguments)) for c in calls)
        )
        return Usage(
            model=request.model or self.adapter.model,
            prompt_tokens=prompt,
            completion_tokens=completion,
            reasoning_tokens=reasoning,
            total_tokens=prompt + completion,
        )


def _words(text: str) -> int:
    return len(text.split())
