"""Who is calling a plain (non-DRF) async view: a session login, or an API token."""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest
from rest_framework.authtoken.models import Token


async def arequest_user(request: HttpRequest) -> AbstractBaseUser | AnonymousUser:
    """Return the signed-in user, else the active user of an `Authorization: Token <key>`."""
    user = await request.auser()
    if user.is_authenticated:
        return user
    keyword, _, key = request.headers.get("Authorization", "").partition(" ")
    if keyword != "Token" or not key:
        return user
    token = await Token.objects.select_related("user").filter(key=key.strip()).afirst()
    return token.user if token is not None and token.user.is_active else user
