"""The `ExecutionState` lifecycle hooks see, and how the run-control services call hooks."""

from typing import Any

from agents_app.definitions.hooks import (
    AbortResult,
    AfterContext,
    BeforeContext,
    ExecutionStatus,
    call_hook,
)
from agents_app.errors import HookRefused
from agents_app.runs import control
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus

_SETTLED: dict[str, ExecutionStatus] = {
    SessionStatus.COMPLETED: "completed",
    SessionStatus.FAILED: "failed",
    SessionStatus.INTERRUPTED: "interrupted",
}


class SessionExecution:
    """A session's current execution, as of when it was looked at."""

    def __init__(self, session_id: str | None) -> None:
        store = get_session_store()
        state = store.load_state(session_id) if session_id else None
        run = store.get_current_run(session_id) if state is not None else None
        self.session_id = state.session_id if state is not None else None
        self.run_id = run.run_id if run is not None else None
        self.is_executing = run is not None and run.status == RunStatus.RUNNING
        self.status: ExecutionStatus = (
            "running"
            if self.is_executing
            else _SETTLED.get(state.status, "idle")
            if state
            else "idle"
        )

    def interrupt(self, reason: str | None = None) -> None:
        """Ask the running step to stop and commit; it can resume later."""
        if self.is_executing:
            get_session_store().set_interrupt_flag(self.session_id, reason)

    def abort(self, reason: str | None = None) -> None:
        """Stop the execution for good."""
        if self.session_id is not None:
            control.abort_session(self.session_id, reason)


def before(hook, body: dict[str, Any], session_id: str | None) -> None:
    """Run a `before_*` hook; raise `HookRefused` if it refuses the request.

    Without a hook nothing is looked at: the execution state costs two queries.
    """
    if hook is None:
        return
    result = call_hook(hook, BeforeContext(body=body, execution_state=SessionExecution(session_id)))
    if isinstance(result, AbortResult):
        raise HookRefused(result.status, result.body, result.headers)


def after(hook, started, agent_type: str) -> None:
    """Run an `after_*` hook for the run a service `started`."""
    call_hook(
        hook,
        AfterContext(session_id=started.session_id, run_id=started.run_id, agent_type=agent_type),
    )
