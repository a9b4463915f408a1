"""Who is calling where DRF does not authenticate: plain async views and WebSockets.

Both accept a session login or an API token (`Authorization: Token <key>`), as the REST API does.
"""

from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest
from rest_framework.authtoken.models import Token


async def arequest_user(request: HttpRequest) -> AbstractBaseUser | AnonymousUser:
    """Return the signed-in user, else the active user of an `Authorization: Token <key>`."""
    user = await request.auser()
    if user.is_authenticated:
        return user
    return await _token_user(request.headers.get("Authorization", "")) or user


@database_sync_to_async  # Drops stale connections around the query, as long-lived ASGI needs.
def _token_user(authorization: str) -> AbstractBaseUser | None:
    """Return the active user whose token an `Authorization` header carries, or `None`."""
    keyword, _, key = authorization.partition(" ")
    if keyword != "Token" or not key.strip():
        return None
    token = Token.objects.select_related("user").filter(key=key.strip()).first()
    return token.user if token is not None and token.user.is_active else None


class WebsocketTokenOrSession:
    """Route a WebSocket handshake by how it authenticates.

    One with `Authorization: Token <key>` goes to `token_app` with `scope["user"]` set (the
    anonymous user for an unknown key). Its origin is not checked: a browser cannot send that
    header cross-site. Any other goes to `session_app`, which checks the origin and reads the
    session cookie.
    """

    def __init__(self, token_app: Any, session_app: Any) -> None:
        self.token_app = token_app
        self.session_app = session_app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers", []))
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if not authorization.startswith("Token "):
            return await self.session_app(scope, receive, send)
        user = await _token_user(authorization)
        scope = {**scope, "user": user or AnonymousUser()}
        return await self.token_app(scope, receive, send)
