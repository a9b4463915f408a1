"""`/mcp`: the ASGI endpoint in front of the SDK's streamable HTTP session manager.

It authenticates as the REST API does (`Authorization: Token <key>`, or `Bearer <key>` as MCP
clients send it, or the Django session cookie) and answers 401 otherwise; a request carrying
the session cookie from another site's page (an `Origin` neither this host nor among
`CSRF_TRUSTED_ORIGINS`) is refused, and so is a `Host` not among `ALLOWED_HOSTS`.
The session manager runs stateless: every request stands alone, so any Daphne process serves
any client (the conversation is the Helix session the call names). Daphne runs no ASGI lifespan,
so the manager is started by the first request, in a task of that process's loop; that request
also loads the SDK, in a thread beside the loop (a process that serves no MCP never loads it).
"""

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http.request import split_domain_port, validate_host
from rest_framework.authtoken.models import Token

from sessions_app.errors import error_body

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

TOKEN_KEYWORDS = ("Token", "Bearer")
# Session managers by event loop (one per process under Daphne; tests may run several loops).
_managers: dict[int, tuple["StreamableHTTPSessionManager", asyncio.Event, asyncio.Task]] = {}


class McpEndpoint:
    """Authenticate the request, then hand it to the process's MCP session manager."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", []))
        host = headers.get(b"host", b"").decode("latin-1")
        if not validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS):
            await _answer(send, 400, "bad-host", f"Host {host!r} is not allowed.")
            return
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if authorization:
            user = await _token_user(authorization)
        else:
            user = scope.get("user")
            origin = headers.get(b"origin", b"").decode("latin-1")
            if user is not None and origin and not _same_site(origin, host):
                await _answer(send, 403, "bad-origin", "Cross-site requests are refused.")
                return
        if user is None or not user.is_authenticated:
            await _answer(
                send,
                401,
                "not-authenticated",
                "Send Authorization: Bearer <API token>, or sign in.",
                [(b"www-authenticate", b'Bearer realm="helix"')],
            )
            return
        manager = await _running_manager()
        await manager.handle_request({**scope, "user": user}, receive, send)


def mcp_application() -> Any:
    """Return the `/mcp` ASGI application, reading the session cookie where no token is sent."""
    return AuthMiddlewareStack(McpEndpoint())


async def _running_manager() -> "StreamableHTTPSessionManager":
    loop = asyncio.get_running_loop()
    entry = _managers.get(id(loop))
    if entry is None or entry[2].done():
        new_manager = await asyncio.to_thread(_manager_maker)
        entry = _managers.get(id(loop))  # Another request may have made one meanwhile.
        if entry is None or entry[2].done():
            manager, started = new_manager(), asyncio.Event()
            task = loop.create_task(_run(manager, started))
            entry = _managers[id(loop)] = (manager, started, task)
    await entry[1].wait()
    return entry[0]


def _manager_maker() -> Callable[[], "StreamableHTTPSessionManager"]:
    """Load the SDK and the server; return what makes a stateless session manager of it."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from agents_app.mcp.server import build_server

    return lambda: StreamableHTTPSessionManager(app=build_server(), stateless=True)


async def _run(manager: "StreamableHTTPSessionManager", started: asyncio.Event) -> None:
    """Hold the manager's task group open for the life of the process."""
    try:
        async with manager.run():
            started.set()
            await asyncio.Event().wait()
    finally:
        started.set()


@database_sync_to_async
def _token_user(authorization: str) -> AbstractBaseUser | None:
    keyword, _, key = authorization.partition(" ")
    if keyword not in TOKEN_KEYWORDS or not key.strip():
        return None
    token = Token.objects.select_related("user").filter(key=key.strip()).first()
    return token.user if token is not None and token.user.is_active else None


def _same_site(origin: str, host: str) -> bool:
    """Return whether a page at `origin` may use the session cookie here (as CSRF allows)."""
    return urlsplit(origin).netloc == host or origin in settings.CSRF_TRUSTED_ORIGINS


async def _answer(
    send: Any,
    status: int,
    code: str,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})
