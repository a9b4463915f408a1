from django.urls import path

from agents_app.state_consumer import AgentStateConsumer

websocket_urlpatterns = [
    path("agents/<str:agent>/<session_id:name>", AgentStateConsumer.as_asgi()),
]


def state_socket_path(agent_kebab: str, name: str) -> str:
    """Return the path of an agent's state WebSocket (the route above)."""
    return f"/agents/{agent_kebab}/{name}"
