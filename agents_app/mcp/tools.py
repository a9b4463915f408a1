"""MCP tools as agent tools: the executor's one seam, `mcp_tools`, and results as JSON.

A server's tool reaches the model as `<server>__<tool>` with the input schema the server gives.
Its call is an ordinary server tool call (recorded before and after it runs, so it runs at most
once; an approval tool suspends the run), made synchronously through the process's connection
to the server. Its result is what the server answered, as JSON the model reads:

- text only: the text; structured content (with only text beside it): that structure;
- anything else: `{"content": [...], "structuredContent": ...}`, each content block as MCP has
  it (an image is `{"type": "image", "mimeType", "data"}`, an embedded resource
  `{"type": "resource", "resource": {"uri", "mimeType", "text" or "blob"}}`).

A result the server marks `isError`, a protocol error, a timeout and an unreachable server
become error results; none of them fails the step.
"""

import functools
import hashlib
import logging
import re
from typing import TYPE_CHECKING, Any

from agents_app.definitions.agent import NAME_PATTERN, Agent, SchemaInput, Tool, ToolContext
from agents_app.definitions.mcp_servers import SEPARATOR, McpServer
from agents_app.mcp import conf
from agents_app.mcp.pool import connection_pool
from agents_app.mcp.selectors import agent_mcp_servers
from sessions_app.stores.types import SessionState

if TYPE_CHECKING:
    import mcp_types as types

logger = logging.getLogger(__name__)

MAX_NAME = 64
UNFIT = re.compile(r"[^a-zA-Z0-9_-]")


class McpToolFailed(Exception):
    """The server answered the call with an error result (`isError`)."""


def mcp_tools(agent: Agent, state: SessionState) -> list[Tool]:
    """Return the tools of the MCP servers the session's agent uses, for one step.

    Servers not connected yet are connected in parallel, each waited for at most
    `HELIX["MCP_CONNECT_TIMEOUT_SECONDS"]`. A server that cannot be reached keeps the tools it
    was last listed with in this process (their calls fail, saying why); one never listed here
    offers none. Either way the step goes on.
    """
    servers = agent_mcp_servers(agent, state.session_id)
    if not servers:
        return []
    catalogs = connection_pool().catalogs(servers, timeout=conf.connect_timeout_seconds())
    tools: dict[str, Tool] = {}
    for server, catalog in zip(servers, catalogs, strict=True):
        if catalog.state != "ready":
            logger.warning(
                "MCP server %s of session %s is %s: %s",
                server.name,
                state.session_id,
                catalog.state,
                catalog.error or "not connected yet",
            )
        for listed in catalog.tools:
            if not server.offers(listed.name):
                continue
            tool = as_tool(server, listed)
            if tool.name in tools:
                logger.warning("MCP tools named %s collide; the first is kept", tool.name)
                continue
            tools[tool.name] = tool
    return list(tools.values())


def tool_name(server: str, tool: str) -> str:
    """Return the name the model knows a server's tool by: `<server>__<tool>`, made to fit."""
    name = f"{server}{SEPARATOR}{UNFIT.sub('_', tool)}"
    if len(name) > MAX_NAME or not NAME_PATTERN.fullmatch(name):
        digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"
    return name


def as_tool(server: McpServer, listed: "types.Tool") -> Tool:
    """Return the agent tool that calls the server's tool `listed`."""
    schema = dict(listed.input_schema or {})
    schema["type"] = "object"
    return Tool(
        name=tool_name(server.name, listed.name),
        description=listed.description or listed.title or f"{listed.name} ({server.name})",
        input_schema=schema,
        execute=functools.partial(call_mcp_tool, server, listed.name),
        needs_approval=server.approval_needed(listed.name),
    )


def call_mcp_tool(server: McpServer, name: str, arguments: SchemaInput, ctx: ToolContext) -> Any:
    """Call the server's tool once and return its result as JSON; raise on an error result."""
    result = connection_pool().call_tool(
        server, name, arguments.model_dump(), timeout=server.timeout_seconds
    )
    try:
        return tool_result(result)
    except McpToolFailed as failure:
        raise McpToolFailed(server.redact(str(failure))) from None


def tool_result(result: "types.CallToolResult") -> Any:
    """Return a call's result as the JSON the model reads; raise `McpToolFailed` if it failed."""
    blocks = [_content(block) for block in result.content]
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    if result.is_error:
        raise McpToolFailed("\n".join(texts) or "The tool reported an error.")
    if len(texts) == len(blocks):
        if result.structured_content is not None:
            return result.structured_content
        return "\n".join(texts)
    value: dict[str, Any] = {"content": blocks}
    if result.structured_content is not None:
        value["structuredContent"] = result.structured_content
    return value


def _content(block: Any) -> dict[str, Any]:
    wire = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    wire.pop("_meta", None)
    wire.pop("annotations", None)
    return wire
