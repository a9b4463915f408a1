"""Every WebSocket route of Helix: a session's stream and an agent's live state.

`agents_app.asgi` serves them. A project with sockets of its own may put these routes in its
own `URLRouter` instead, behind `sessions_app.auth.WebsocketTokenOrSession`, which lets in API
tokens as well as session logins.
"""

from django.urls import path

from agents_app.live_state.consumer import AgentStateConsumer
from streams_app.routing import websocket_urlpatterns as stream_routes

websocket_urlpatterns = [
    *stream_routes,
    path("agents/<str:agent>/<session_id:name>", AgentStateConsumer.as_asgi()),
]


def state_socket_path(agent_kebab: str, name: str) -> str:
    """Return the path of an agent's state WebSocket (the route above)."""
    return f"/agents/{agent_kebab}/{name}"
