"""What a call of an agent's tool at `/mcp` does: start a run, follow it, interrupt it.

A call without a session id starts a new session (its `source` is `mcp`); one with a session id
continues that session, which must be the caller's: another user's answers as a missing one
does. The run is an ordinary run on the workers; the call follows the session's stream from
the run's first chunk to its last, passing its text on as it comes.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser

from agents_app.runs import control
from agents_app.runs.services import agent_interrupt, agent_session_create, agent_start
from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from streams_app.backends import get_stream_manager
from streams_app.backends.types import ChunkEvent, EndEvent, FailEvent

SOURCE = "mcp"
ENDINGS = {
    "run_completed": "completed",
    "run_failed": "failed",
    "run_interrupted": "interrupted",
    "run_suspended": "suspended",
}
# The chunks after which a queued run begins: those that end the run before it.
TURN_OVER = {"run_completed", "run_failed", "run_interrupted"}

RunStatus = Literal["completed", "failed", "interrupted", "suspended"]


@dataclass(frozen=True, kw_only=True)
class CalledRun:
    """The run a call started: its chunks follow `from_sequence` on the session's stream.

    A `queued` run begins when the session's running run ends: its chunks follow that run's.
    """

    session_id: str
    stream_id: str
    run_id: str
    from_sequence: int
    queued: bool = False


@dataclass(frozen=True, kw_only=True)
class RunEnding:
    """How a followed run ended (or stopped, for a suspended one)."""

    status: RunStatus
    output: Any = None
    error: str | None = None


def agent_call_start(
    *, user: AbstractBaseUser, agent_type: str, message: str, session_id: str | None = None
) -> CalledRun:
    """Start a run of `agent_type` with `message`, on a new session or the user's `session_id`.

    Raises `SessionNotFound` for a missing session and for another user's alike, and what
    `agent_start` raises.
    """
    if session_id is None:
        session_id = agent_session_create(
            user=user, agent_type=agent_type, source=SOURCE
        ).session_id
    else:
        session_for_user(session_id=session_id, user=user)
    store = get_session_store()
    running = store.get_current_run(session_id)  # Read first: a queued run follows its chunks.
    before = 0 if running is None else running.metadata.get("fromSequence", 0)
    started = agent_start(user=user, agent_type=agent_type, message=message, session_id=session_id)
    if started.queued:  # It begins after the running run, whose chunks come first.
        return CalledRun(
            session_id=session_id,
            stream_id=started.stream_id,
            run_id=started.run_id,
            from_sequence=before,
            queued=True,
        )
    run = next(r for r in reversed(store.list_runs(session_id)) if r.run_id == started.run_id)
    return CalledRun(
        session_id=session_id,
        stream_id=started.stream_id,
        run_id=started.run_id,
        from_sequence=run.metadata.get("fromSequence", 0),
    )


def agent_call_interrupt(*, user: AbstractBaseUser, session_id: str) -> None:
    """Interrupt the session's run because its caller cancelled the call (if it still runs)."""
    if control.is_running(session_id):
        agent_interrupt(user=user, session_id=session_id, reason="The MCP call was cancelled.")


async def follow_run(run: CalledRun, on_text: Callable[[str], Awaitable[None]]) -> RunEnding:
    """Follow the run on its stream to its end, handing `on_text` each piece of its text."""
    manager = get_stream_manager()
    reader = await manager.acreate_resumable_reader(run.stream_id, run.from_sequence)
    if reader is None:
        info = await manager.aget_stream_info(run.stream_id)
        return RunEnding(status="failed", error=info.error if info else "The run failed.")
    waiting = run.queued
    try:
        async for event in reader:
            if isinstance(event, FailEvent):
                return RunEnding(status="failed", error=event.error)
            if isinstance(event, EndEvent):
                return RunEnding(status="completed", output=event.final_output)
            if not isinstance(event, ChunkEvent) or event.chunk.get("sessionId") != run.session_id:
                continue  # A resync, or a sub-agent's chunk copied into the stream.
            kind = event.chunk["type"]
            if waiting:
                waiting = kind not in TURN_OVER
            elif kind == "text_delta":
                await on_text(event.chunk["delta"])
            elif kind in ENDINGS:
                return _ending(ENDINGS[kind], event.chunk)
    finally:
        await reader.aclose()
    return RunEnding(status="failed", error="The stream ended before the run did.")


def _ending(status: RunStatus, chunk: dict[str, Any]) -> RunEnding:
    if status == "completed":
        return RunEnding(status=status, output=chunk.get("output"))
    if status == "suspended":
        waiting_for = ", ".join(chunk.get("pendingToolCallIds") or []) or "a person"
        return RunEnding(status=status, error=f"The run waits for {waiting_for}.")
    return RunEnding(status=status, error=chunk.get("error") or chunk.get("reason"))
