"""An adapter for any server that speaks OpenAI's streaming chat completions.

OpenAI itself, vLLM, Ollama, llama.cpp's server, and the many proxies in front of them, through
the official `openai` SDK's sync client. Options (``HELIX["LLM"]["OPTIONS"]``, under the
agent's `llm` config):

- `model` (required here or in the agent's config), `temperature`, `max_tokens`, `tool_choice`:
  defaults for what the request leaves unset;
- `base_url` (else ``OPENAI_BASE_URL``, else OpenAI), `api_key` (else ``OPENAI_API_KEY``; a
  placeholder for a local server given by `base_url` without one), `organization`;
- `timeout` in seconds (the SDK's own default otherwise), `max_retries` (0: the executor
  retries, with its backoff), `default_headers`;
- `extra_body`: fields added to every request body (``{"reasoning_effort": "low"}``, vLLM's
  ``{"top_k": 20}``, ...), under the request's own `extra`;
- `max_tokens_param`: the body field for `max_tokens` (``max_completion_tokens`` for OpenAI's
  reasoning models).

Each reply is read by a thread of its own, so `close()` ends the iteration at once even while
the server has not answered yet; it also shuts the connection down, so the server stops
generating. Streaming requests ask for ``Connection: close``: a connection is never reused
after its stream, so shutting it down can never cut another request short.
"""

import contextlib
import functools
import json
import os
import queue
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk

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
from sessions_app.stores.types import Message, MessageRole

# The key sent to a server given by `base_url` when none is configured (local servers take any).
PLACEHOLDER_API_KEY = "not-needed"
FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    "error": "error",
}
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
# Where servers put reasoning text in a delta: llama.cpp and older vLLM, then newer vLLM/Ollama.
REASONING_FIELDS = ("reasoning_content", "reasoning")


class OpenAICompatAdapter:
    """Stream chat completions from an OpenAI-compatible server."""

    def __init__(self, options: dict[str, Any], context: AdapterContext) -> None:
        self.context = context
        self.options = options
        base_url = options.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        api_key = options.get("api_key") or os.environ.get("OPENAI_API_KEY")
        self.client = _client(
            base_url=base_url,
            api_key=api_key or (PLACEHOLDER_API_KEY if base_url else None),
            organization=options.get("organization"),
            timeout=options.get("timeout"),
            max_retries=int(options.get("max_retries", 0)),
            default_headers=tuple(sorted((options.get("default_headers") or {}).items())),
        )

    def stream(self, request: LLMRequest) -> "OpenAICompatStream":
        return OpenAICompatStream(self.client, self.request_body(request))

    def request_body(self, request: LLMRequest) -> dict[str, Any]:
        """Return the keyword arguments of the SDK's `chat.completions.create` for `request`."""
        options = self.options
        model = request.model or options.get("model")
        if not model:
            raise LLMError(
                'No model: set "model" in HELIX["LLM"]["OPTIONS"] or in the agent\'s llm config.',
                retryable=False,
            )
        body: dict[str, Any] = {
            "model": model,
            "messages": openai_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
            tool_choice = request.tool_choice or options.get("tool_choice")
            if tool_choice:
                body["tool_choice"] = _tool_choice(tool_choice)
        temperature = _first_set(request.temperature, options.get("temperature"))
        if temperature is not None:
            body["temperature"] = temperature
        max_tokens = _first_set(request.max_tokens, options.get("max_tokens"))
        if max_tokens is not None:
            body[options.get("max_tokens_param") or "max_tokens"] = max_tokens
        extra_body = {**(options.get("extra_body") or {}), **request.extra}
        return {
            **body,
            "extra_body": extra_body or None,
            "extra_headers": {"Connection": "close"},
        }


def openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Return the chat-completions `messages` for a system prompt and a conversation."""
    converted: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == MessageRole.ASSISTANT:
            converted.append(_assistant_message(message))
        elif message.role == MessageRole.TOOL:
            converted.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
        elif message.role == MessageRole.USER:
            converted.append({"role": "user", "content": _user_content(message)})
        else:
            converted.append({"role": str(message.role), "content": message.content})
    return converted


def _assistant_message(message: Message) -> dict[str, Any]:
    converted: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        converted["content"] = message.content or None
        converted["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
            for call in message.tool_calls
        ]
    return converted


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    """Return the text, or content parts: images as `image_url`, other files as a note."""
    files = [part for part in message.parts if part.get("type") == "file"]
    if not files:
        return message.content
    content: list[dict[str, Any]] = []
    if message.content:
        content.append({"type": "text", "text": message.content})
    for part in files:
        media_type = part.get("mediaType") or "application/octet-stream"
        if media_type.startswith("image/"):
            content.append({"type": "image_url", "image_url": {"url": part["url"]}})
        else:
            name = part.get("filename") or "unnamed"
            note = f"[Attached file {name} ({media_type}); its content is not shown.]"
            content.append({"type": "text", "text": note})
    return content


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _first_set(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


@functools.lru_cache(maxsize=16)
def _client(
    *,
    base_url: str | None,
    api_key: str | None,
    organization: str | None,
    timeout: float | None,
    max_retries: int,
    default_headers: tuple[tuple[str, str], ...],
) -> openai.OpenAI:
    """Return a client for these settings, shared by the adapters that use them."""
    try:
        return openai.OpenAI(
            base_url=base_url,
            api_key=api_key,
            organization=organization,
            max_retries=max_retries,
            default_headers=dict(default_headers) or None,
            **({"timeout": float(timeout)} if timeout is not None else {}),
        )
    except openai.OpenAIError as error:
        raise LLMError(f"Cannot set up the OpenAI client: {error}", retryable=False) from error


@dataclass(frozen=True, slots=True)
class _Raised:
    """An exception the reader thread hands to the consumer."""

    error: BaseException


_END = object()


class OpenAICompatStream:
    """One streamed chat completion; the request is sent when iteration starts."""

    def __init__(self, client: openai.OpenAI, body: dict[str, Any]) -> None:
        self.client = client
        self.body = body
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._started = False

    def close(self) -> None:
        self._closed.set()
        self._items.put(_END)
        with self._lock:
            response = self._response
        if response is not None:
            _shut_down(response)

    def __iter__(self) -> Iterator[LLMEvent]:
        if self._started:
            raise RuntimeError("A model stream can be iterated only once.")
        self._started = True
        if self._closed.is_set():
            return
        threading.Thread(target=self._read, name="helix-llm-stream", daemon=True).start()
        try:
            while True:
                item = self._items.get()
                if item is _END or self._closed.is_set():
                    return
                if isinstance(item, _Raised):
                    raise item.error
                yield item
        finally:
            self.close()

    def _read(self) -> None:
        """Put the reply's events on the queue, then `_END`; runs in a thread of its own.

        After `close()` the consumer has gone: what is left, errors included, goes nowhere.
        """
        try:
            with contextlib.closing(self._events()) as events:
                for event in events:
                    if self._closed.is_set():
                        return
                    self._items.put(event)
        except openai.OpenAIError as error:
            self._items.put(_Raised(_llm_error(error)))
        except ValueError as error:  # A chunk that is not JSON.
            message = f"The model server sent a malformed stream: {error}"
            self._items.put(_Raised(LLMError(message, retryable=True)))
        except Exception as error:  # Not swallowed: the consumer raises it.
            self._items.put(_Raised(error))
        finally:
            self._items.put(_END)

    def _events(self) -> Iterator[LLMEvent]:
        chunks = self.client.chat.completions.create(**self.body)
        with self._lock:
            self._response = chunks.response
        if self._closed.is_set():
            _shut_down(chunks.response)
            chunks.close()
            return
        reply = _Reply(model=self.body["model"])
        with chunks:
            for chunk in chunks:
                yield from reply.add(chunk)
        if reply.finish is None:
            raise LLMError("The model's stream ended before the reply finished.", retryable=True)
        yield from reply.tool_calls()
        yield Finish(reply.finish)


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Reply:
    """The state of one streamed reply: tool calls being assembled, the finish reason."""

    model: str
    calls: list[_PartialCall] = field(default_factory=list)
    by_index: dict[int, _PartialCall] = field(default_factory=dict)
    finish: FinishReason | None = None
    calls_sent: bool = False

    def add(self, chunk: ChatCompletionChunk) -> Iterator[LLMEvent]:
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            extra = delta.model_extra or {}
            reasoning = next((extra[key] for key in REASONING_FIELDS if extra.get(key)), None)
            if isinstance(reasoning, str):
                yield ReasoningDelta(reasoning)
            if delta.content:
                yield TextDelta(delta.content)
            if delta.refusal:
                yield TextDelta(delta.refusal)
            for fragment in delta.tool_calls or ():
                self._add_fragment(fragment)
            if choice.finish_reason:
                self.finish = FINISH_REASONS.get(choice.finish_reason, "other")
                if self.calls and self.finish == "stop":  # Some servers say "stop" after calls.
                    self.finish = "tool_calls"
                yield from self.tool_calls()
        if chunk.usage is not None:
            yield _usage(chunk.model or self.model, chunk.usage)

    def _add_fragment(self, fragment: Any) -> None:
        """Add a piece of a tool call; the first piece at an index names the call."""
        index = fragment.index if fragment.index is not None else len(self.calls)
        call = self.by_index.get(index)
        if call is None or (fragment.id and call.id and fragment.id != call.id):
            # A new call; a different id at a used index is one too (Ollama numbers all 0).
            call = self.by_index[index] = _PartialCall()
            self.calls.append(call)
        if fragment.id and not call.id:
            call.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and function.name != call.name:
                call.name += function.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def tool_calls(self) -> Iterator[ToolCall]:
        """Yield the assembled tool calls, once."""
        if self.calls_sent:
            return
        self.calls_sent = True
        for call in self.calls:
            arguments, invalid = parse_tool_arguments("".join(call.arguments))
            call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            yield ToolCall(call_id, call.name, arguments, invalid_arguments=invalid)


def _usage(model: str, usage: Any) -> Usage:
    prompt = usage.prompt_tokens or 0
    completion = usage.completion_tokens or 0
    completion_details = usage.completion_tokens_details
    prompt_details = usage.prompt_tokens_details
    return Usage(
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=(completion_details and completion_details.reasoning_tokens) or 0,
        cached_tokens=(prompt_details and prompt_details.cached_tokens) or 0,
        total_tokens=usage.total_tokens or prompt + completion,
    )


def _llm_error(error: openai.OpenAIError) -> LLMError:
    """Return the `LLMError` for an SDK error: retryable when trying again may help."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        retryable = status in RETRYABLE_STATUSES or status >= 500
        if error.code == "insufficient_quota":  # A 429 that waiting does not cure.
            retryable = False
        message = f"The model server answered {status}: {error.message}"
        return LLMError(message, retryable=retryable, status_code=status)
    if isinstance(error, openai.APITimeoutError):
        return LLMError("The model server timed out.", retryable=True)
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        return LLMError(f"Cannot reach the model server: {cause or error}", retryable=True)
    if isinstance(error, openai.APIError):  # An error event in the middle of the stream.
        return LLMError(f"The model server failed mid-stream: {error.message}", retryable=True)
    return LLMError(str(error), retryable=False)


def _shut_down(response: Any) -> None:
    """Shut the response's connection down, waking the thread blocked reading it.

    Closing a socket does not wake a thread blocked in `recv` on it; shutting it down does,
    and tells the server the client has gone. HTTP/2 streams share a connection: left alone.
    """
    if response.is_closed or response.http_version not in ("HTTP/1.0", "HTTP/1.1"):
        return
    network_stream = response.extensions.get("network_stream")
    sock = network_stream.get_extra_info("socket") if network_stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
