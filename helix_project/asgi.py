"""ASGI entry point: HTTP goes to Django (`/mcp` to the MCP endpoint), WebSocket to the
Channels router."""

import os

import django
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
django.setup(set_prefix=False)

from agents_app.observability import tracing  # noqa: E402  (needs the app registry)

tracing.configure()  # Before the handler loads the middleware: Django's tracing is one.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from agents_app.mcp.http import mcp_application  # noqa: E402
from helix_project.routing import websocket_urlpatterns  # noqa: E402
from sessions_app.auth import WebsocketTokenOrSession  # noqa: E402

websocket_router = URLRouter(websocket_urlpatterns)
application = ProtocolTypeRouter(
    {
        "http": URLRouter([re_path(r"^mcp/?$", mcp_application()), re_path(r"", django_asgi_app)]),
        "websocket": WebsocketTokenOrSession(
            token_app=websocket_router,
            session_app=AllowedHostsOriginValidator(AuthMiddlewareStack(websocket_router)),
        ),
    }
)
