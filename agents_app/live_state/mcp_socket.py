"""The MCP methods a client calls over the agent's WebSocket (`rpc`), as Cloudflare's agents have.

- `addMcpServer(name, url, options?)`: add a server reached at `url` to the session; `options`
  may hold `headers` (or, as the `agents` client sends them, `transport.headers`),
  `allowedTools`, `deniedTools`, `needsApproval` and `timeoutSeconds`. Cloudflare's long form
  `(name, url, callbackHost, agentsPrefix, options)` is read too. Returns `{id, state}`, with
  `error` when the server could not be reached.
- `removeMcpServer(id)`: remove one of the session's own servers.

They run for the socket's user, with the services' checks; a readonly connection may not call
them. The agent's own callables of the same names come first.
"""

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from agents_app.definitions.state_sync import RpcContext, callable_method
from agents_app.live_state.sessions import ConnectionReadonly
from agents_app.mcp.selectors import mcp_server_catalog
from agents_app.mcp.services import session_mcp_server_add, session_mcp_server_remove

OPTION_POSITION = {3: 2, 5: 4}  # Where the options object is, by the number of arguments.


def socket_method(name: str, user: AbstractBaseUser) -> Callable | None:
    """Return the MCP method `name` bound to the socket's user, or None if there is none."""
    if name == "addMcpServer":

        @callable_method
        def add(context: RpcContext, *args: Any) -> dict[str, Any]:
            return add_mcp_server(user, context, *args)

        return add
    if name == "removeMcpServer":

        @callable_method
        def remove(context: RpcContext, server_id: str) -> None:
            remove_mcp_server(user, context, server_id)

        return remove
    return None


def add_mcp_server(
    user: AbstractBaseUser, context: RpcContext, name: str, url: str, *rest: Any
) -> dict[str, Any]:
    """Add a server to the session and connect it; return its id and state."""
    if context.connection.readonly:
        raise ConnectionReadonly()
    options = _options(rest)
    transport = options.get("transport") or {}
    server = session_mcp_server_add(
        user=user,
        session_id=context.session_id,
        name=name,
        url=url,
        headers=options.get("headers") or transport.get("headers") or {},
        allowed_tools=options.get("allowedTools"),
        denied_tools=options.get("deniedTools") or (),
        needs_approval=options.get("needsApproval", False),
        **({"timeout_seconds": options["timeoutSeconds"]} if "timeoutSeconds" in options else {}),
    )
    catalog = mcp_server_catalog(server)
    reply: dict[str, Any] = {"id": server.name, "state": catalog.state}
    if catalog.error:
        reply["error"] = catalog.error
    return reply


def remove_mcp_server(user: AbstractBaseUser, context: RpcContext, server_id: str) -> None:
    """Remove one of the session's own servers."""
    if context.connection.readonly:
        raise ConnectionReadonly()
    session_mcp_server_remove(user=user, session_id=context.session_id, name=server_id)


def _options(rest: tuple[Any, ...]) -> dict[str, Any]:
    """Return the options object of `addMcpServer`'s arguments after the url, or none."""
    given = len(rest) + 2
    if given in OPTION_POSITION and isinstance(rest[OPTION_POSITION[given] - 2], dict):
        return rest[OPTION_POSITION[given] - 2]
    return {}
