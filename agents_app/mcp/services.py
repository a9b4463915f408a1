"""Writes: the MCP servers a session adds and removes while it lives.

Only an agent defined with `mcp_session_servers=True` lets its sessions add servers, and only
servers reached by URL: a session never starts a process. A change is rung, once committed, on
the session's MCP group, whose WebSocket clients are sent the servers again.
"""

import hashlib
from collections.abc import Collection, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from agents_app.definitions.mcp_servers import DEFAULT_TIMEOUT_SECONDS, InvalidServer, McpServer
from agents_app.definitions.registry import session_agent
from agents_app.mcp.models import SessionMcpServer
from sessions_app.errors import HelixError
from sessions_app.selectors import session_for_user
from streams_app.backends.doorbell import bell

CHANGED = "helix.mcp.changed"


class McpServerNotFound(HelixError):
    code = "mcp-server-not-found"
    http_status = 404

    def __init__(self, session_id: str, name: str) -> None:
        super().__init__(
            f"Session {session_id!r} has no MCP server {name!r} of its own.",
            session_id=session_id,
            name=name,
        )


class McpServerExists(HelixError):
    code = "mcp-server-exists"
    http_status = 409

    def __init__(self, session_id: str, name: str) -> None:
        super().__init__(
            f"Session {session_id!r} already has an MCP server named {name!r}.",
            session_id=session_id,
            name=name,
        )


class McpSessionServersDisabled(HelixError):
    """The session's agent does not let sessions add MCP servers."""

    code = "mcp-session-servers-disabled"
    http_status = 403

    def __init__(self, session_id: str, agent_type: str) -> None:
        super().__init__(
            f"Agent {agent_type!r} does not let its sessions add MCP servers "
            "(define it with mcp_session_servers=True).",
            session_id=session_id,
            agent_type=agent_type,
        )


class InvalidMcpServer(HelixError):
    code = "invalid-mcp-server"
    http_status = 400


def changes_group(session_id: str) -> str:
    """Return the channel-layer group told when the session's MCP servers change."""
    return "helix.mcp." + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def announce_change(session_id: str) -> None:
    """Ring the session's MCP group: its clients are sent the servers again."""
    bell.ring_group(
        changes_group(session_id), {"type": CHANGED}, f"MCP clients of session {session_id}"
    )


def session_mcp_server_add(
    *,
    user: AbstractBaseUser,
    session_id: str,
    name: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    allowed_tools: Collection[str] | None = None,
    denied_tools: Collection[str] = (),
    needs_approval: bool | Collection[str] = False,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> McpServer:
    """Add an MCP server, reached at `url`, to the user's session; return it.

    Raises `SessionNotFound` (also for another user's session), `McpSessionServersDisabled`,
    `InvalidMcpServer` and `McpServerExists` (the agent's servers' names are taken too).
    """
    with transaction.atomic():
        state = session_for_user(session_id=session_id, user=user)
        agent = session_agent(state)
        if not agent.mcp_session_servers:
            raise McpSessionServersDisabled(session_id, state.agent_type)
        try:
            server = McpServer(
                name=name,
                url=url,
                headers=headers or {},
                allowed_tools=allowed_tools,
                denied_tools=denied_tools,
                needs_approval=needs_approval,
                timeout_seconds=timeout_seconds,
            )
        except InvalidServer as error:
            raise InvalidMcpServer(str(error), name=name) from None
        if any(own.name == name for own in agent.mcp_servers):
            raise McpServerExists(session_id, name)
        approval = server.needs_approval
        try:
            with transaction.atomic():
                SessionMcpServer.objects.create(
                    session_id=session_id,
                    name=server.name,
                    url=server.url,
                    headers=dict(server.headers),
                    allowed_tools=(
                        None if server.allowed_tools is None else sorted(server.allowed_tools)
                    ),
                    denied_tools=sorted(server.denied_tools),
                    needs_approval=approval is True,
                    approval_tools=[] if isinstance(approval, bool) else sorted(approval),
                    timeout_seconds=server.timeout_seconds,
                )
        except IntegrityError:
            raise McpServerExists(session_id, name) from None
        transaction.on_commit(lambda: announce_change(session_id))
    return server


def session_mcp_server_remove(*, user: AbstractBaseUser, session_id: str, name: str) -> None:
    """Remove the MCP server `name` the user's session added.

    Raises `SessionNotFound` (also for another user's session) and `McpServerNotFound`.
    """
    with transaction.atomic():
        session_for_user(session_id=session_id, user=user)
        deleted, _ = SessionMcpServer.objects.filter(session_id=session_id, name=name).delete()
        if not deleted:
            raise McpServerNotFound(session_id, name)
        transaction.on_commit(lambda: announce_change(session_id))
