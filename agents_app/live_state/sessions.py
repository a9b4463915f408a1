"""Opening an agent's live state to a WebSocket client (reference 004, `/agents/{agent}/{name}`).

A client names an agent type in kebab case and an instance; the instance name is the id of the
session that holds the agent's state. The first signed-in user to open a name creates the
session and owns it; anyone else is refused as if it did not exist. Anonymous clients may
connect only to agents whose `state_sync.allow_anonymous` says so, and only to sessions that no
one owns (those they create themselves).
"""

from dataclasses import dataclass, replace
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import (
    AgentFactoryContext,
    AgentNotFound,
    get_registry,
    kebab_case,
)
from agents_app.definitions.state_sync import SERVER, Connection
from agents_app.errors import AgentTypeMismatch
from agents_app.live_state.agent_state import AgentState, agent_state_get, set_agent_state
from sessions_app.errors import HelixError, SessionAlreadyExists, SessionNotFound
from sessions_app.stores import get_session_store
from sessions_app.stores.rules import check_identifier
from sessions_app.stores.types import SessionState

DEFAULT_NAME = "default"


class ConnectionReadonly(HelixError):
    """A readonly connection tried to write the agent's state."""

    code = "connection-readonly"
    http_status = 403

    def __init__(self) -> None:
        super().__init__("Connection is readonly")


@dataclass(frozen=True, kw_only=True)
class OpenedStateSession:
    """What a client's connection to an agent's state starts from."""

    session: SessionState
    agent: Agent
    agent_kebab: str
    connection: Connection
    state: AgentState


def state_session_open(
    *,
    user: AbstractBaseUser | AnonymousUser,
    agent_kebab: str,
    name: str = DEFAULT_NAME,
    connection_id: str,
) -> OpenedStateSession:
    """Return the state session `name` of the `agent_kebab` agent, creating it for `user`.

    Raises `AgentNotFound` for an agent type no one registered, `SessionNotFound` alike for
    an invalid name, another user's session and an anonymous user the agent does not admit,
    and `AgentTypeMismatch` for the user's session of another agent type.
    """
    registry = get_registry()
    agent_type = registry.find_by_kebab(agent_kebab)
    if agent_type is None:
        raise AgentNotFound(agent_kebab, [kebab_case(t) for t in registry.registered_types()])
    try:
        session_id = check_identifier("session id", name)
    except ValueError:
        raise SessionNotFound(str(name)) from None
    agent = registry.resolve(agent_type, AgentFactoryContext(session_id=session_id, run_id=""))
    anonymous = not user.is_authenticated
    if anonymous and not agent.state_sync.allow_anonymous:
        raise SessionNotFound(session_id)
    owner_id = None if anonymous else user.pk
    store = get_session_store()
    with transaction.atomic():
        session = store.load_state(session_id)
        if session is None:
            try:
                session = store.create_session(
                    session_id,
                    agent_type=agent_type,
                    owner_id=owner_id,
                    custom_state=agent.make_initial_state(),
                )
            except SessionAlreadyExists:  # Opened by someone else meanwhile.
                session = store.load_state(session_id)
        if session is None or session.owner_id != owner_id:
            raise SessionNotFound(session_id)
        if session.agent_type != agent_type:
            raise AgentTypeMismatch(session_id, session.agent_type, agent_type)
        connection = Connection(id=connection_id, user_id=owner_id)
        readonly = agent.state_sync.readonly_connection
        if readonly is not None and readonly(connection):
            connection = replace(connection, readonly=True)
        state = agent_state_get(session_id)
    return OpenedStateSession(
        session=session,
        agent=agent,
        agent_kebab=agent_kebab,
        connection=connection,
        state=state,
    )


astate_session_open = database_sync_to_async(state_session_open)


@dataclass(frozen=True)
class SessionRpcContext:
    """The `RpcContext` of a client's call: its session and connection, and the state.

    `state` and `set_state` use the database: call them from sync methods; async methods
    use `astate()` and `aset_state()`.
    """

    session_id: str
    connection: Connection

    @property
    def state(self) -> dict[str, Any] | None:
        """Return the agent's state as stored now."""
        return agent_state_get(self.session_id).state

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Write the agent's state as the server: validated, stored and broadcast to all.

        Raises `ConnectionReadonly` when the calling connection is readonly.
        """
        if self.connection.readonly:
            raise ConnectionReadonly()
        set_agent_state(self.session_id, state, source=SERVER)

    async def astate(self) -> dict[str, Any] | None:
        """Return the agent's state as stored now."""
        return (await database_sync_to_async(agent_state_get)(self.session_id)).state

    async def aset_state(self, state: dict[str, Any] | None) -> None:
        """Write the agent's state as `set_state` does."""
        await database_sync_to_async(self.set_state)(state)
