"""The one small protocol every LLM adapter speaks, and the factory that builds adapters.

An adapter streams one model reply as events: text and reasoning deltas as they arrive, each
tool call once its arguments are complete, usage, and why the reply finished. The executor
iterates the events in a worker thread and may `close()` the stream from another thread (an
interrupt), after which iteration ends promptly without an error.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from django.utils.module_loading import import_string

from sessions_app.conf import helix_setting
from sessions_app.stores.types import Message

DEFAULT_BACKEND = "agents_app.llm.scripted.ScriptedAdapter"
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "other"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: the JSON schema of its input."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A complete tool call; arguments that were not a JSON object arrive as `{"_raw": ...}`."""

    id: str
    name: str
    arguments: dict[str, Any]
    invalid_arguments: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
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
    """A model call failed; `retryable` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class LLMStream(Protocol):
    def __iter__(self) -> Iterator[LLMEvent]: ...

    def close(self) -> None:
        """Stop the stream; safe from any thread. Iteration then ends without an error."""


class LLMAdapter(Protocol):
    def stream(self, request: LLMRequest) -> LLMStream:
        """Start streaming the model's reply to `request`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterContext:
    session_id: str
    agent_type: str
    run_id: str


def build_adapter(context: AdapterContext, llm_config: dict[str, Any] | None = None) -> LLMAdapter:
    """Return the adapter ``HELIX["LLM"]`` configures, the agent's `llm_config` over its options.

    ``HELIX["LLM"]`` is ``{"BACKEND": dotted path, "OPTIONS": {...}}``; the backend is called
    with the merged options and `context`. The default is the offline scripted adapter.
    """
    config = helix_setting("LLM", {}) or {}
    backend = import_string(config.get("BACKEND", DEFAULT_BACKEND))
    return backend({**config.get("OPTIONS", {}), **(llm_config or {})}, context)
