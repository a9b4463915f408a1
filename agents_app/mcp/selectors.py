"""Reads: the MCP servers a session's agent uses, and what a server offers now."""

from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser

from agents_app.definitions.agent import Agent
from agents_app.definitions.mcp_servers import McpServer
from agents_app.definitions.registry import session_agent
from agents_app.mcp import conf
from agents_app.mcp.models import SessionMcpServer
from agents_app.mcp.pool import connection_pool
from sessions_app.selectors import session_for_user

if TYPE_CHECKING:
    from agents_app.mcp.client import Catalog


def session_own_mcp_servers(*, session_id: str) -> list[McpServer]:
    """Return the servers the session added, oldest first."""
    rows = SessionMcpServer.objects.filter(session_id=session_id).order_by("created_at", "id")
    return [row.as_server() for row in rows]


def agent_mcp_servers(agent: Agent, session_id: str) -> list[McpServer]:
    """Return the agent's servers, then those its session added (if the agent allows that)."""
    servers = list(agent.mcp_servers)
    if agent.mcp_session_servers:
        servers += session_own_mcp_servers(session_id=session_id)
    return servers


def session_mcp_server_list(
    *, user: AbstractBaseUser, session_id: str
) -> list[tuple[McpServer, str]]:
    """Return the user's session's servers, each with where it comes from: agent or session."""
    agent = session_agent(session_for_user(session_id=session_id, user=user))
    servers = [(server, "agent") for server in agent.mcp_servers]
    if agent.mcp_session_servers:
        servers += [(s, "session") for s in session_own_mcp_servers(session_id=session_id)]
    return servers


def mcp_server_catalog(server: McpServer) -> "Catalog":
    """Return what the server offers, connecting it first if needed (waits a connect timeout)."""
    return connection_pool().catalogs([server], timeout=conf.connect_timeout_seconds())[0]
