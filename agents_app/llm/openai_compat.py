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

The request's body is sent as it is, by a thread of its own, so `close()` ends the iteration at
once even while the server has not answered yet; the reply is read, as its server-sent events'
JSON, in the iterating thread, whose reading `close()` ends by shutting the connection down, so
the server stops generating (what the SDK's typed request and chunks would cost a step:
`bench/model_stream.py`). Connections are kept for the next request, as the SDK keeps them:
`close()` shuts one down only while its reply is unfinished, when no other request can have it.
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

import httpx2
import openai

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
        """Return the JSON body of the chat completion request for `request`."""
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
        return {**body, **(options.get("extra_body") or {}), **request.extra}


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
    """An exception the request's thread hands to the consumer."""

    error: BaseException


_END = object()
# What reading an event raises when it is not JSON, or not a chunk's JSON.
_MALFORMED = (ValueError, TypeError, AttributeError)


class OpenAICompatStream:
    """One streamed chat completion; the request is sent when iteration starts.

    A thread of its own sends the request and waits for the server's answer, so `close()`
    ends the iteration at once even while the server has not answered yet. The reply is then
    read in the iterating thread: a step waiting on its model holds that one thread, and each
    event reaches it without a hand-over. `close()` from another thread wakes it by shutting
    the connection down.

    `_response` is the reply while it is unfinished; reading it over, the stream drops it
    before closing it, which may hand its connection back to the client's pool for another
    request. Both happen under `_lock`, so `close()` never shuts a connection down that another
    request may be using.
    """

    def __init__(self, client: openai.OpenAI, body: dict[str, Any]) -> None:
        self.client = client
        self.body = body
        self._closed = threading.Event()
        self._lock = threading.Lock()  # Guards `_response` and the hand-over against `close()`.
        self._response: Any = None
        self._answered: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._started = False

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            if self._response is not None:  # Unfinished: its connection serves it alone.
                _shut_down(self._response)
        self._answered.put(_END)

    def __iter__(self) -> Iterator[LLMEvent]:
        if self._started:
            raise RuntimeError("A model stream can be iterated only once.")
        self._started = True
        if self._closed.is_set():
            return
        threading.Thread(target=self._request, name="helix-llm-request", daemon=True).start()
        answered = self._answered.get()
        if answered is _END:
            return
        if isinstance(answered, _Raised):
            raise answered.error
        try:
            yield from _events(answered.response, self.body["model"], self._closed)
        except (httpx2.HTTPError, httpx2.StreamError, *_MALFORMED) as error:
            if not self._closed.is_set():  # Else the connection was shut down by `close()`.
                raise _read_error(error) from None
        finally:
            with self._lock:
                self._response = None
            answered.close()
            self.close()

    def _request(self) -> None:
        """Send the request; hand the answered stream, or the error, to the consumer.

        A stream answered after `close()` is closed here: the consumer has gone.
        """
        try:
            answered = _send(self.client, self.body)
        except openai.OpenAIError as error:
            self._answered.put(_Raised(_llm_error(error)))
            return
        except Exception as error:  # Not swallowed: the consumer raises it.
            self._answered.put(_Raised(error))
            return
        with self._lock:
            closed = self._closed.is_set()
            if not closed:
                self._response = answered.response
                self._answered.put(answered)
        if closed:
            _shut_down(answered.response)
            answered.close()


def _send(client: openai.OpenAI, body: dict[str, Any]) -> openai.Stream[Any]:
    """Send the chat completion request with `body` as it is; return the answered stream.

    Through the client's `post`, as `chat.completions.create` sends it (auth, retries,
    errors), but without the SDK's walk of the body against its parameter types, which cost
    9.5 ms of CPU a request for a conversation of 76 messages and 8 tools: the body is JSON
    already.
    """
    return client.post(
        "/chat/completions",
        body=body,
        cast_to=object,
        options={"security": {"bearer_auth": True}},
        stream=True,
        stream_cls=openai.Stream[object],
    )


def _events(response: httpx2.Response, model: str, closed: threading.Event) -> Iterator[LLMEvent]:
    """Yield the events of an answered reply, read from its server-sent events as they arrive.

    Each event's JSON is read as it is: the SDK's stream would build a typed chunk of each one,
    which costs several times the reading (`bench/model_stream.py`).
    """
    reply = _Reply(model=model)
    events = _sse_data(response.iter_lines())
    for data in events:
        if closed.is_set():
            return
        if data.startswith("[DONE]"):
            for _ in events:  # Its body ends here: read to the end, so its connection is kept.
                pass
            break
        chunk = json.loads(data)
        if isinstance(chunk, dict) and chunk.get("error"):
            message = f"The model server failed mid-stream: {_error_message(chunk)}"
            raise LLMError(message, retryable=True)
        yield from reply.add(chunk)
    if closed.is_set():  # Its connection was shut down by `close()`.
        return
    if reply.finish is None:
        raise LLMError("The model's stream ended before the reply finished.", retryable=True)
    yield from reply.tool_calls()
    yield Finish(reply.finish)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """Yield the data of each server-sent event (its `data` lines joined), as the SSE format
    says: an event ends at a blank line; comments and other fields are left out."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


def _error_message(chunk: dict[str, Any]) -> str:
    error = chunk["error"]
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else "An error occurred during streaming"


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

    def add(self, chunk: dict[str, Any]) -> Iterator[LLMEvent]:
        """Yield the events of one `chat.completion.chunk`, as its JSON reads."""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = next((delta[key] for key in REASONING_FIELDS if delta.get(key)), None)
            if isinstance(reasoning, str):
                yield ReasoningDelta(reasoning)
            if content := delta.get("content"):
                yield TextDelta(content)
            if refusal := delta.get("refusal"):
                yield TextDelta(refusal)
            for fragment in delta.get("tool_calls") or ():
                self._add_fragment(fragment)
            if finish := choice.get("finish_reason"):
                self.finish = FINISH_REASONS.get(finish, "other")
                if self.calls and self.finish == "stop":  # Some servers say "stop" after calls.
                    self.finish = "tool_calls"
                yield from self.tool_calls()
        if (usage := chunk.get("usage")) is not None:
            yield _usage(chunk.get("model") or self.model, usage)

    def _add_fragment(self, fragment: dict[str, Any]) -> None:
        """Add a piece of a tool call; the first piece at an index names the call."""
        index = fragment.get("index")
        index = index if index is not None else len(self.calls)
        call = self.by_index.get(index)
        fragment_id = fragment.get("id")
        if call is None or (fragment_id and call.id and fragment_id != call.id):
            # A new call; a different id at a used index is one too (Ollama numbers all 0).
            call = self.by_index[index] = _PartialCall()
            self.calls.append(call)
        if fragment_id and not call.id:
            call.id = fragment_id
        function = fragment.get("function")
        if function is not None:
            name = function.get("name")
            if name and name != call.name:
                call.name += name
            if arguments := function.get("arguments"):
                call.arguments.append(arguments)

    def tool_calls(self) -> Iterator[ToolCall]:
        """Yield the assembled tool calls, once."""
        if self.calls_sent:
            return
        self.calls_sent = True
        for call in self.calls:
            arguments, invalid = parse_tool_arguments("".join(call.arguments))
            call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            yield ToolCall(call_id, call.name, arguments, invalid_arguments=invalid)


def _usage(model: str, usage: dict[str, Any]) -> Usage:
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    completion_details = usage.get("completion_tokens_details") or {}
    prompt_details = usage.get("prompt_tokens_details") or {}
    return Usage(
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
        cached_tokens=prompt_details.get("cached_tokens") or 0,
        total_tokens=usage.get("total_tokens") or prompt + completion,
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
    if isinstance(error, openai.APIError):  # An answer the SDK could not take.
        return LLMError(f"The model server failed: {error.message}", retryable=True)
    return LLMError(str(error), retryable=False)


def _read_error(error: Exception) -> LLMError:
    """Return the `LLMError` for an error met reading a reply: retryable, all of them."""
    if isinstance(error, httpx2.TimeoutException):
        return LLMError("The model server timed out.", retryable=True)
    if isinstance(error, _MALFORMED):
        return LLMError(f"The model server sent a malformed stream: {error}", retryable=True)
    return LLMError(f"The model server's stream broke off: {error}", retryable=True)


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
