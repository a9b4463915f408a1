"""Lifecycle hooks (reference 001 "Lifecycle Hooks"): optional, sync or async callables.

`before_*` hooks may refuse a request by returning an `AbortResult`; `on_complete` runs when a
run completes, fails or is interrupted (at least once: a redelivered step may repeat it);
`transform_request` and `transform_response` reshape the start request and its answer.
"""

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

ExecutionStatus = Literal["idle", "running", "paused", "interrupted", "completed", "failed"]


class ExecutionState(Protocol):
    """What a hook may ask of and do to the session's current execution."""

    session_id: str | None
    run_id: str | None
    is_executing: bool
    status: ExecutionStatus

    def interrupt(self, reason: str | None = None) -> None:
        """Stop the execution softly; it can resume."""

    def abort(self, reason: str | None = None) -> None:
        """Stop the execution for good."""


@dataclass(frozen=True, kw_only=True)
class AbortResult:
    """A `before_*` hook's refusal: the HTTP status and JSON body to answer with."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BeforeContext:
    """What `before_start`, `before_resume` and `before_retry` receive."""

    body: dict[str, Any]
    execution_state: ExecutionState


@dataclass(frozen=True, kw_only=True)
class AfterContext:
    """What `after_start`, `after_resume` and `after_retry` receive."""

    session_id: str
    run_id: str
    agent_type: str


@dataclass(frozen=True, kw_only=True)
class CompleteContext:
    session_id: str
    run_id: str
    status: Literal["completed", "failed", "interrupted"]
    result: Any = None
    error: str | None = None


Hook = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class AgentHooks:
    before_start: Hook | None = None
    after_start: Hook | None = None
    before_resume: Hook | None = None
    after_resume: Hook | None = None
    before_retry: Hook | None = None
    after_retry: Hook | None = None
    on_complete: Hook | None = None
    transform_request: Hook | None = None
    transform_response: Hook | None = None


def call_hook(hook: Hook | None, *args: Any) -> Any:
    """Call a sync or async hook from sync code and return its result; no hook returns None."""
    if hook is None:
        return None
    result = hook(*args)
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
