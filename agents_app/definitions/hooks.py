"""Lifecycle hooks (reference 001 "Lifecycle Hooks"): optional, sync or async callables.

An agent's `AgentHooks` say what to run around its runs:

- `before_start`, `before_resume`, `before_retry` receive a `BeforeContext` (the request body
  and the session's `ExecutionState`) before anything is written; returning an `AbortResult`
  refuses the request: the client gets that response (status, JSON body, headers) as it is.
- `after_start`, `after_resume`, `after_retry` receive an `AfterContext` once the run is
  recorded and its first step enqueued.
- `on_complete` receives a `CompleteContext` when a run completes, fails or is interrupted
  (at least once: a redelivered step may repeat it).
- `transform_request(raw_body)` turns a custom start body into a `StartAgentRequest` (or a
  dict of that shape); `transform_response(response, TransformResponseContext)` reshapes the
  start answer.

The reference's per-server `env` has no counterpart: hooks read `django.conf.settings`.
"""

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

from asgiref.sync import async_to_sync
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agents_app.definitions.inputs import UserInputMessage

ExecutionStatus = Literal["idle", "running", "paused", "interrupted", "completed", "failed"]
CompletionStatus = Literal["completed", "failed", "interrupted"]


class ExecutionState(Protocol):
    """What a hook may ask of, and do to, the session's current execution."""

    @property
    def session_id(self) -> str | None:
        """Return the session of the current execution, or None if there is none."""

    @property
    def run_id(self) -> str | None:
        """Return the run of the current execution, or None if there is none."""

    @property
    def is_executing(self) -> bool:
        """Return whether a run is executing now."""

    @property
    def status(self) -> ExecutionStatus:
        """Return the current execution's status."""

    def interrupt(self, reason: str | None = None) -> None:
        """Stop the execution softly; it can resume."""

    def abort(self, reason: str | None = None) -> None:
        """Stop the execution for good; it cannot resume."""


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class StartInput(_Body):
    """What a run starts from: a message or user messages, optionally a state and history."""

    message: str | list[UserInputMessage]
    state: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None


class StartAgentRequest(_Body):
    """A start request (reference 001 `StartAgentRequestV2`); camelCase on the wire.

    `session_id` may be omitted: the start then creates a session with an id of its own.
    """

    agent_type: str = Field(min_length=1)
    input: StartInput
    session_id: str | None = None
    user_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class AbortResult:
    """A `before_*` hook's refusal: the response to answer with, its status 4xx or 5xx.

    The JSON `body` goes to the client as it is, not wrapped in the error shape.
    """

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise TypeError(f"AbortResult.status must be an int, not {self.status!r}.")
        if not 400 <= self.status <= 599:
            raise ValueError(f"AbortResult.status must be 4xx or 5xx, not {self.status}.")


@dataclass(frozen=True, kw_only=True)
class BeforeContext:
    """What a `before_*` hook receives: the request body and the session's execution.

    `body` is the request as on the wire (camelCase keys); `request` is the HTTP request,
    when one asked.
    """

    body: Mapping[str, Any]
    execution_state: ExecutionState
    request: Any = None


class BeforeStartContext(BeforeContext):
    """What `before_start` receives; `body` has the shape of a `StartAgentRequest`."""


class BeforeResumeContext(BeforeContext):
    """What `before_resume` receives."""


class BeforeRetryContext(BeforeContext):
    """What `before_retry` receives."""


@dataclass(frozen=True, kw_only=True)
class AfterContext:
    """What an `after_*` hook receives once the run is recorded and its first step enqueued."""

    session_id: str
    run_id: str
    agent_type: str


class AfterStartContext(AfterContext):
    """What `after_start` receives."""


class AfterResumeContext(AfterContext):
    """What `after_resume` receives."""


class AfterRetryContext(AfterContext):
    """What `after_retry` receives."""


@dataclass(frozen=True, kw_only=True)
class CompleteContext:
    """What `on_complete` receives: how the run ended, with its output or error."""

    session_id: str
    run_id: str
    status: CompletionStatus
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class TransformResponseContext:
    """What `transform_response` receives beside the response it reshapes."""

    session_id: str
    agent_type: str


Hook = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class AgentHooks:
    """An agent's lifecycle hooks; each is optional and may be sync or async."""

    before_start: Hook | None = None
    after_start: Hook | None = None
    before_resume: Hook | None = None
    after_resume: Hook | None = None
    before_retry: Hook | None = None
    after_retry: Hook | None = None
    on_complete: Hook | None = None
    transform_request: Hook | None = None
    transform_response: Hook | None = None

    def __post_init__(self) -> None:
        for hook in fields(self):
            value = getattr(self, hook.name)
            if value is not None and not callable(value):
                raise TypeError(f"Hook {hook.name} must be callable, not {value!r}.")


def call_hook(hook: Hook | None, *args: Any) -> Any:
    """Call a sync or async hook from sync code and return its result; no hook returns None.

    An async hook runs through `async_to_sync`, so its `sync_to_async` calls run in the
    calling thread. Do not call this from a thread running an event loop.
    """
    if hook is None:
        return None
    result = hook(*args)
    if inspect.isawaitable(result):
        return async_to_sync(_awaited)(result)
    return result


def call_before_hook(hook: Hook | None, context: Any) -> AbortResult | None:
    """Call a `before_*` hook; return its `AbortResult`, or None to go on.

    Raise `TypeError` if it returns anything else, so a mistyped refusal is not ignored.
    """
    result = call_hook(hook, context)
    if result is not None and not isinstance(result, AbortResult):
        raise TypeError(
            f"A before hook returns None or an AbortResult, not {type(result).__name__}."
        )
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
