"""Helix over ASGI: its WebSocket routes and its `/mcp` endpoint, around a project's Django app.

A project's `asgi.py` ends with ``application = helix_application(application)``, after
``application = get_asgi_application()``, which sets Django up (this module needs the app
registry). A project that routes sockets of its own passes them as `websocket_routes`, or
builds its `ProtocolTypeRouter` from `http_application` and `websocket_application`.
"""

from collections.abc import Sequence
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import URLPattern, URLResolver, re_path

from agents_app.mcp.http import mcp_application
from agents_app.routing import websocket_urlpatterns
from sessions_app.auth import WebsocketTokenOrSession


def helix_application(
    django_application: Any, *, websocket_routes: Sequence[URLPattern | URLResolver] = ()
) -> ProtocolTypeRouter:
    """Return the project's ASGI application: HTTP to Django (and `/mcp` to the MCP endpoint),
    WebSocket to Helix's routes and then to `websocket_routes`."""
    return ProtocolTypeRouter(
        {
            "http": http_application(django_application),
            "websocket": websocket_application(websocket_routes),
        }
    )


def http_application(django_application: Any) -> Any:
    """Return `django_application` with the MCP endpoint (`docs/mcp.md`) at `/mcp`."""
    return URLRouter([re_path(r"^mcp/?$", mcp_application()), re_path(r"", django_application)])


def websocket_application(routes: Sequence[URLPattern | URLResolver] = ()) -> Any:
    """Return Helix's WebSocket routes, then `routes`, for clients that authenticate.

    A handshake with `Authorization: Token <key>` is let in by its key; any other needs the
    session cookie and an `Origin` among `ALLOWED_HOSTS`.
    """
    router = URLRouter([*websocket_urlpatterns, *routes])
    return WebsocketTokenOrSession(
        token_app=router,
        session_app=AllowedHostsOriginValidator(AuthMiddlewareStack(router)),
    )
