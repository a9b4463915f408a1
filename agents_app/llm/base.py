"""The one small protocol every LLM adapter speaks, and the factory that builds adapters.

An adapter streams one model reply as events: reasoning and text deltas as they arrive, each
tool call once its arguments are complete, usage, and then why the reply finished. The executor
iterates the events in a worker thread and may `close()` the stream from another thread (an
interrupt): iteration then ends promptly and quietly, without an error and without `Finish`.
"""

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from sessions_app.conf import helix_setting
from sessions_app.errors import InvalidJSON
from sessions_app.parsers import json_loads
from sessions_app.stores.types import Message

DEFAULT_BACKEND = "agents_app.llm.scripted.ScriptedAdapter"
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "other"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: the JSON schema of its input."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call to the model.

    Assistant messages carry `tool_calls` as ``[{"id", "name", "arguments": dict}]``; tool
    results are `tool` messages with `tool_call_id` and `name`; user messages may carry file
    `parts` (``{"type": "file", "mediaType", "url": data URI, "filename"}``). `tool_choice` is
    ``"auto"``, ``"none"``, ``"required"`` or a tool's name; `extra` goes to the provider as is.
    """

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call; arguments that were not a JSON object arrive as `{"_raw": ...}`."""

    id: str
    name: str
    arguments: dict[str, Any]
    invalid_arguments: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason


LLMEvent = TextDelta | ReasoningDelta | ToolCall | Usage | Finish


class LLMError(Exception):
    """A model call failed; `retryable` says whether trying again may help.

    `status_code` is the provider's HTTP status, when there was one.
    """

    def __init__(self, message: str, *, retryable: bool, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status_code = status_code

    def __reduce__(self) -> tuple[Any, ...]:
        rebuild = functools.partial(
            type(self), retryable=self.retryable, status_code=self.status_code
        )
        return rebuild, (self.message,)


class LLMStream(Protocol):
    """One model reply, iterated once.

    `close()` is safe from any thread and at any time, before, during or after iteration. It
    stops the reply promptly (the HTTP response is closed, so the server stops generating);
    iteration then ends without an error: a consumer tells a closed stream from a finished one
    by the missing `Finish` event, or by knowing it closed the stream.
    """

    def __iter__(self) -> Iterator[LLMEvent]: ...

    def close(self) -> None: ...


class LLMAdapter(Protocol):
    def stream(self, request: LLMRequest) -> LLMStream:
        """Return the stream of the model's reply to `request`; nothing is sent before iteration."""
        ...


@dataclass(frozen=True, slots=True)
class AdapterContext:
    """Who is asking: the session, its agent type and the run (reference `LLMAdapterContext`)."""

    session_id: str
    agent_type: str
    run_id: str


def build_adapter(context: AdapterContext, llm_config: dict[str, Any] | None = None) -> LLMAdapter:
    """Return the adapter ``HELIX["LLM"]`` configures, the agent's `llm_config` over its options.

    ``HELIX["LLM"]`` is ``{"BACKEND": dotted path, "OPTIONS": {...}}``. The backend, an adapter
    class or a factory function, is called with the merged options and `context`; a factory can
    pick a different adapter or model per agent type. The default is the offline scripted adapter.
    """
    config = helix_setting("LLM", None) or {}
    path = config.get("BACKEND") or DEFAULT_BACKEND
    try:
        backend = import_string(path)
    except ImportError as error:
        raise ImproperlyConfigured(f'HELIX["LLM"]["BACKEND"] {path!r}: {error}') from error
    return backend({**config.get("OPTIONS", {}), **(llm_config or {})}, context)


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], bool]:
    """Return a tool call's arguments from their JSON text, and whether they were invalid.

    Empty text is no arguments; text that is not a JSON object becomes ``{"_raw": text}``, as
    does one nested too deeply or holding numbers JSON cannot carry (`sessions_app.parsers`).
    """
    if not raw.strip():
        return {}, False
    try:
        arguments = json_loads(raw)
    except InvalidJSON:
        return {"_raw": raw}, True
    if not isinstance(arguments, dict):
        return {"_raw": raw}, True
    return arguments, False
