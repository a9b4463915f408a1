from django.urls import path

from streams_app.consumers import StreamConsumer

websocket_urlpatterns = [
    path("ws/sessions/<session_id:session_id>/stream", StreamConsumer.as_asgi()),
]


def websocket_path(session_id: str) -> str:
    """Return the path of the session's WebSocket stream (the route above)."""
    return f"/ws/sessions/{session_id}/stream"
