"""Run control: start, resume, retry, interrupt and abort (DESIGN "One turn, end to end").

Each service checks the caller owns the session, runs the agent's `before_*` hook (which may
refuse), writes what the run needs in one transaction, enqueues the first step when that
transaction commits, then runs the `after_*` hook.
"""

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from agents_app.definitions.agent import Agent
from agents_app.definitions.hooks import AgentHooks
from agents_app.definitions.inputs import input_messages
from agents_app.definitions.registry import AgentFactoryContext, get_registry, session_agent
from agents_app.errors import AgentTypeMismatch, InvalidResume, RunNotActive
from agents_app.runs import control, execution, launch
from agents_app.runs.launch import StartedRun, begin_run
from sessions_app.retries import retried_on_conflict
from sessions_app.selectors import existing_session_for_user, session_for_user
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    Checkpoint,
    Message,
    MessageRole,
    SessionState,
    SessionStatus,
)
from streams_app.backends import get_stream_manager

RESUMABLE = frozenset({SessionStatus.INTERRUPTED})
# Statuses a session may start a new run from; `active` is a fresh session's.
STARTABLE = frozenset(
    {
        SessionStatus.ACTIVE,
        SessionStatus.COMPLETED,
        SessionStatus.FAILED,
        SessionStatus.INTERRUPTED,
    }
)


def agent_session_create(
    *,
    user: AbstractBaseUser,
    agent_type: str,
    user_id: str | None = None,
    tags: Sequence[str] = (),
    metadata: Mapping[str, str] | None = None,
    expires_at: datetime | None = None,
    name: str | None = None,
    model: str | None = None,
    source: str | None = None,
    parent_session_id: str | None = None,
) -> SessionState:
    """Create a session of `agent_type` for `user`, holding the agent's initial state.

    A parent session must be one of `user`'s (`SessionNotFound` otherwise).
    """
    agent = get_registry().resolve(
        agent_type, AgentFactoryContext(session_id="", run_id="", user_id=user_id)
    )
    if parent_session_id is not None:
        session_for_user(session_id=parent_session_id, user=user)
    return _create_session(
        agent,
        None,
        agent_type=agent_type,
        user=user,
        user_id=user_id,
        tags=tags,
        metadata=metadata,
        expires_at=expires_at,
        name=name,
        model=model,
        source=source,
        parent_session_id=parent_session_id,
    )


def agent_start(
    *,
    user: AbstractBaseUser,
    agent_type: str,
    message: Any,
    session_id: str | None = None,
    user_id: str | None = None,
    tags: Sequence[str] = (),
    metadata: Mapping[str, str] | None = None,
) -> StartedRun:
    """Start a run of `agent_type` on a new session, or on the caller's session `session_id`.

    `message` is a string or a list of user messages with files (`agents_app.definitions.inputs`).
    While the session runs a run, `HELIX["RUN_CONCURRENCY"]` says what happens: `reject` raises
    `RunNotActive`; `enqueue` and `interrupt` queue the run (`StartedRun.queued`; no `after_start`
    then), and `interrupt` also interrupts the running one.
    """
    messages = input_messages(message)
    run_id = uuid.uuid4().hex
    # Ownership first, before any hook; a free id makes a new session.
    found = (
        None if session_id is None else existing_session_for_user(session_id=session_id, user=user)
    )
    existing = found is not None
    agent = get_registry().resolve(
        agent_type,
        AgentFactoryContext(session_id=session_id or "", run_id=run_id, user_id=user_id),
    )
    hooks = agent.hooks or AgentHooks()
    body = {
        "agentType": agent_type,
        "input": {"message": message},
        "sessionId": session_id,
        "userId": user_id,
        "tags": list(tags),
        "metadata": dict(metadata or {}),
    }
    execution.before(hooks.before_start, body, session_id if existing else None)
    policy = launch.concurrency_policy()
    # The session read for ownership serves the first try unless a hook ran since; a try
    # again after a conflict reads it afresh.
    read = found if hooks.before_start is None else None

    @retried_on_conflict
    def begin() -> StartedRun:
        nonlocal read
        with transaction.atomic():
            state, read = read, None
            if state is None and existing:
                state = session_for_user(session_id=session_id, user=user)
            if state is None:
                state = _create_session(
                    agent,
                    session_id,
                    agent_type=agent_type,
                    user=user,
                    user_id=user_id,
                    tags=tags,
                    metadata=metadata,
                )
            elif state.agent_type != agent_type:
                raise AgentTypeMismatch(state.session_id, state.agent_type, agent_type)
            elif state.aborted or state.status not in STARTABLE:
                raise RunNotActive(state.session_id, state.status, "start a run of")
            elif control.is_running(state.session_id):
                if policy == "reject":
                    raise RunNotActive(state.session_id, "running", "start a run of")
                if queued := launch.queue_run(state, run_id, message):
                    return queued
                state = session_for_user(session_id=session_id, user=user)  # Its run just ended.
            return begin_run(state, run_id, messages)

    started = begin()
    if started.queued:  # It begins when the running run ends.
        return started
    execution.after(hooks.after_start, started, agent_type)
    return started


def agent_resume(
    *,
    user: AbstractBaseUser,
    session_id: str,
    mode: str = "continue",
    checkpoint_id: str | None = None,
    modify_state: Mapping[str, Any] | None = None,
    append_messages: Any = (),
) -> StartedRun:
    """Resume an interrupted session in a new run.

    `continue` runs on from where it stopped; `retry` first drops its last step; `branch`
    first goes back to the checkpoint `checkpoint_id`. `modify_state` keys replace those of
    the custom state, and `append_messages` (user input) are added before the run starts.
    """
    messages = input_messages(append_messages) if append_messages else []
    hooks = _hooks(session_for_user(session_id=session_id, user=user))
    body = {
        "options": {
            "mode": mode,
            "checkpointId": checkpoint_id,
            "modifyState": modify_state,
            "appendMessages": append_messages or [],
        }
    }
    execution.before(hooks.before_resume, body, session_id)

    @retried_on_conflict
    def begin() -> tuple[SessionState, StartedRun]:
        with transaction.atomic():
            state = session_for_user(session_id=session_id, user=user)
            if state.aborted or state.status not in RESUMABLE or control.is_running(session_id):
                raise RunNotActive(session_id, state.status, "resume")
            state = _restored(state, mode, checkpoint_id)
            if modify_state:
                state = replace(state, custom_state={**(state.custom_state or {}), **modify_state})
            started = _begin_again(state, messages)
        return state, started

    state, started = begin()
    execution.after(hooks.after_resume, started, state.agent_type)
    return started


def agent_retry(*, user: AbstractBaseUser, session_id: str) -> StartedRun:
    """Run a failed session again, in a new run, from its last checkpoint."""
    hooks = _hooks(session_for_user(session_id=session_id, user=user))
    execution.before(hooks.before_retry, {"sessionId": session_id}, session_id)

    @retried_on_conflict
    def begin() -> tuple[SessionState, StartedRun]:
        with transaction.atomic():
            state = session_for_user(session_id=session_id, user=user)
            failed = state.status == SessionStatus.FAILED
            if state.aborted or not failed or control.is_running(session_id):
                raise RunNotActive(session_id, state.status, "retry")
            checkpoint = get_session_store().get_latest_checkpoint(session_id)
            if checkpoint is not None:
                state = _at_checkpoint(state, checkpoint)
            started = _begin_again(state, [])
        return state, started

    state, started = begin()
    execution.after(hooks.after_retry, started, state.agent_type)
    return started


def agent_regenerate(*, user: AbstractBaseUser, session_id: str) -> StartedRun:
    """Answer the session's last user message again, in a new run, on a branch of its own.

    The reply it had stays stored on its branch; the new one becomes the active branch, and
    the model sees the conversation up to that user message only.
    """
    with transaction.atomic():
        state = session_for_user(session_id=session_id, user=user)
        if state.aborted or state.status not in STARTABLE or control.is_running(session_id):
            raise RunNotActive(session_id, state.status, "regenerate a reply of")
        history = get_session_store().get_history(session_id)
        asked = next((m for m in reversed(history) if m.role == MessageRole.USER), None)
        if asked is None:
            raise InvalidResume(session_id, "it has no user message to answer again")
        return begin_run(state, uuid.uuid4().hex, [], branch_from=asked.id)


def agent_interrupt(*, user: AbstractBaseUser, session_id: str, reason: str | None = None) -> None:
    """Raise the durable interrupt flag of a running session; its step stops and commits.

    A session waiting for its sub-agents passes the flag on to them; it stops once they have.
    """
    state = session_for_user(session_id=session_id, user=user)
    if not control.is_interruptible(state):
        raise RunNotActive(session_id, state.status, "interrupt")
    control.interrupt_session(session_id, reason)


def agent_abort(*, user: AbstractBaseUser, session_id: str, reason: str | None = None) -> None:
    """End the session's run for good: it fails, its stream fails, and it cannot resume."""
    state = session_for_user(session_id=session_id, user=user)
    if state.aborted or state.status in (SessionStatus.COMPLETED, SessionStatus.FAILED):
        raise RunNotActive(session_id, state.status, "abort")
    control.abort_session(session_id, reason)


def _create_session(
    agent: Agent,
    session_id: str | None,
    *,
    agent_type: str,
    user: AbstractBaseUser,
    user_id: str | None,
    tags: Sequence[str],
    metadata: Mapping[str, str] | None,
    expires_at: datetime | None = None,
    name: str | None = None,
    model: str | None = None,
    source: str | None = None,
    parent_session_id: str | None = None,
) -> SessionState:
    """Create the user's session of `agent_type`, holding `agent`'s initial state."""
    return get_session_store().create_session(
        session_id,
        agent_type=agent_type,
        owner_id=user.pk,
        user_id=user_id,
        tags=tags,
        metadata=metadata,
        custom_state=agent.make_initial_state(),
        expires_at=expires_at,
        name=name,
        model=model,
        source=source,
        parent_session_id=parent_session_id,
    )


def _restored(state: SessionState, mode: str, checkpoint_id: str | None) -> SessionState:
    """Return the state a resume in `mode` starts from, messages cut back to match."""
    store = get_session_store()
    if mode == "continue":
        return state
    if mode == "retry":
        checkpoints = store.list_checkpoints(state.session_id, limit=2)
        if len(checkpoints) < 2:
            raise InvalidResume(state.session_id, "there is no step to retry")
        return _at_checkpoint(state, checkpoints[1])
    if mode == "branch":
        checkpoint = checkpoint_id and store.get_checkpoint(state.session_id, checkpoint_id)
        if not checkpoint:
            raise InvalidResume(state.session_id, f"it has no checkpoint {checkpoint_id!r}")
        return _at_checkpoint(state, checkpoint)
    raise InvalidResume(state.session_id, f"unknown mode {mode!r}")


def _at_checkpoint(state: SessionState, checkpoint: Checkpoint) -> SessionState:
    """Return the state as `checkpoint` kept it, having cut the messages back to it."""
    get_session_store().truncate_messages(state.session_id, checkpoint.message_count)
    return replace(
        state,
        custom_state=checkpoint.state.get("custom_state"),
        step_count=checkpoint.step_count,
        output=checkpoint.state.get("output"),
    )


def _begin_again(state: SessionState, messages: list[Message]) -> StartedRun:
    """Begin a new run of a session that ran before (resume, retry), and say on its stream
    which run it follows."""
    previous = get_session_store().get_current_run(state.session_id)
    started = begin_run(state, uuid.uuid4().hex, messages)
    writer = get_stream_manager().create_writer(state.stream_id, started.run_id, state.agent_type)
    launch.write_run_resumed(
        writer, state, started.run_id, previous_run_id=previous.run_id if previous else None
    )
    return started


def _hooks(state: SessionState) -> AgentHooks:
    """Return the hooks of the session's agent (none if it has none)."""
    return session_agent(state).hooks or AgentHooks()
