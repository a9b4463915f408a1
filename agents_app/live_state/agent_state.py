"""Live agent state (reference 004): read it, write it, tell every connected client.

The state is the session's custom state. A write is validated by the agent, stored with a
version bump, and, once committed, rung on the session's channel-layer group, whose WebSocket
connections (`agents_app.live_state.consumer`) pass it on to their clients; `on_state_update` runs
after that, best effort. The channel layer is only a doorbell: a client that missed a ring gets
the stored state when it connects again. `update_agent_state`, `merge_agent_state` and
`reset_agent_state` are the helpers for Celery tasks; each is safe to run twice.
"""

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents_app import conf
from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import session_agent
from agents_app.definitions.state import json_copy, storable_json_copy
from agents_app.definitions.state_sync import SERVER, Connection, StateSource
from sessions_app.errors import HelixError, SessionBusy, SessionNotFound, VersionConflict
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionState
from streams_app.backends.doorbell import bell

logger = logging.getLogger(__name__)

# A merge that keeps meeting other writes gives up after this many tries.
MERGE_ATTEMPTS = 20


class StateRejected(HelixError):
    """The agent's `validate_state_change` refused the state; its reason is only logged."""

    code = "state-rejected"
    http_status = 422

    def __init__(self, session_id: str) -> None:
        super().__init__("State update rejected", session_id=session_id)


class StateTooLarge(HelixError):
    code = "state-too-large"
    http_status = 413

    def __init__(self, session_id: str, size: int, limit: int) -> None:
        super().__init__(
            f"State is {size} bytes; the limit is {limit}.",
            session_id=session_id,
            size=size,
            limit=limit,
        )


@dataclass(frozen=True, kw_only=True)
class AgentState:
    """The agent's state as stored, and the session version that stored it."""

    state: dict[str, Any] | None
    version: int


def state_group(session_id: str) -> str:
    """Return the channel-layer group of a session's state (layer names allow few characters)."""
    return "helix.state." + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def agent_state_get(session_id: str) -> AgentState:
    """Return the agent's state; an agent's `initial_state` is stored on first access."""
    store = get_session_store()
    session = _load(session_id)
    if session.custom_state is None:
        initial = session_agent(session).make_initial_state()
        if initial is not None:
            try:
                version = store.set_custom_state(
                    session_id, initial, expected_version=session.version
                )
                return AgentState(state=initial, version=version)
            except (VersionConflict, SessionBusy):  # Written meanwhile: read what is there.
                session = _load(session_id)
    return AgentState(state=session.custom_state, version=session.version)


def set_agent_state(
    session_id: str,
    state: dict[str, Any] | None,
    *,
    source: StateSource = SERVER,
    expected_version: int | None = None,
) -> AgentState:
    """Validate, store and broadcast the agent's whole new state; return it with its version.

    Raises `ValueError` for a state with no JSON form or holding what no database stores (a
    NUL character, an unpaired surrogate: `sessions_app.storable`), `StateRejected` when the
    agent's validation refuses it, `StateTooLarge` past `HELIX_MAX_AGENT_STATE_BYTES`,
    `SessionBusy` while a step runs and `VersionConflict` for a stale `expected_version`;
    nothing is written then.
    """
    session = _load(session_id)
    agent = session_agent(session)
    state = _checked(session_id, state)
    validate = agent.state_sync.validate_state_change
    if validate is not None:
        try:
            validate(json_copy(state, "The state"), source)
        except Exception as error:  # Any refusal rejects; the reason is only logged.
            logger.info("State of %s rejected: %s", session_id, error)
            raise StateRejected(session_id) from error
    version = get_session_store().set_custom_state(
        session_id, state, expected_version=expected_version
    )
    stored = AgentState(state=state, version=version)
    exclude = source.id if isinstance(source, Connection) else None
    # At once, or when the caller's transaction commits.
    transaction.on_commit(lambda: broadcast_state(session_id, stored, exclude=exclude))
    transaction.on_commit(lambda: _on_state_update(agent, session_id, stored, source))
    return stored


def broadcast_state(session_id: str, stored: AgentState, *, exclude: str | None = None) -> None:
    """Ring the session's state group with the state; `exclude` is the writer's connection."""
    message = {
        "type": "agent.state",
        "state": stored.state,
        "version": stored.version,
        "exclude": exclude,
    }
    bell.ring_group(state_group(session_id), message, f"clients of session {session_id}'s state")


# Helpers for Celery tasks (reference 004's workflow step helpers)


def update_agent_state(session_id: str, state: dict[str, Any] | None) -> AgentState:
    """Replace the agent's state, as the server."""
    return set_agent_state(session_id, state)


def merge_agent_state(session_id: str, partial: dict[str, Any]) -> AgentState:
    """Merge `partial` into the agent's state (its keys replace the state's), as the server.

    The merge is applied to the state as stored when it is written: a write meanwhile makes it
    read again and retry, so no concurrent write is lost.
    """
    for _ in range(MERGE_ATTEMPTS):
        current = agent_state_get(session_id)
        merged = {**(current.state or {}), **partial}
        try:
            return set_agent_state(session_id, merged, expected_version=current.version)
        except VersionConflict as conflict:
            last_conflict = conflict
    raise last_conflict


def reset_agent_state(session_id: str) -> AgentState:
    """Put the agent's state back to its `initial_state` (`None` without one), as the server."""
    return set_agent_state(session_id, session_agent(_load(session_id)).make_initial_state())


def _load(session_id: str) -> SessionState:
    session = get_session_store().load_state(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    return session


def _checked(session_id: str, state: Any) -> dict[str, Any] | None:
    if state is not None and not isinstance(state, dict):
        raise StateRejected(session_id)
    state = storable_json_copy(state, "The state")
    size = len(json.dumps(state, separators=(",", ":")).encode())
    limit = conf.max_agent_state_bytes()
    if size > limit:
        raise StateTooLarge(session_id, size, limit)
    return state


def _on_state_update(agent: Agent, session_id: str, stored: AgentState, source: Any) -> None:
    hook = agent.state_sync.on_state_update
    if hook is None:
        return
    try:
        hook(stored.state, source)
    except Exception:  # Best effort: the write stands, the failure is logged.
        logger.exception("on_state_update of session %s failed", session_id)
