"""A WebSocket client of a session's stream, through the whole ASGI application."""

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from helix_project.asgi import application
from tests.streams_app.conftest import session_cookie


async def connect(session_id: str, user=None, query: str = "") -> WebsocketCommunicator:
    """Return a client of the session's stream socket, signed in as `user` if given."""
    headers = [(b"origin", b"http://localhost")]
    if user is not None:
        cookie = await database_sync_to_async(session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    path = f"/ws/sessions/{session_id}/stream" + (f"?{query}" if query else "")
    return WebsocketCommunicator(application, path, headers=headers)
