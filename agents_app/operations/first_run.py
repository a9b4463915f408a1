"""The first user: on a database with no user at all, a staff superuser to sign in with.

`manage.py serve` calls `first_superuser_create` on every start and prints the login it returns;
the password exists in clear only in that return value, so it can be shown once and never again.
"""

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

FIRST_USERNAME = "admin"


@dataclass(frozen=True, kw_only=True)
class FirstLogin:
    """The username and password of the superuser made on the first start."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"FirstLogin(username={self.username!r}, password=...)"


def first_superuser_create(*, username: str = FIRST_USERNAME) -> FirstLogin | None:
    """Create a superuser with a random password if no user exists; return its login, else None.

    Two starts at once on an empty database make one superuser: the other finds the username
    taken and returns None.
    """
    user_model = get_user_model()
    manager = user_model._default_manager
    if manager.exists():
        return None
    password = secrets.token_urlsafe(16)
    try:
        with transaction.atomic():
            manager.create_superuser(**{user_model.USERNAME_FIELD: username, "password": password})
    except IntegrityError:
        return None
    return FirstLogin(username=username, password=password)
