"""Write-side services of the durable record."""

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionState


def session_update_labels(
    *, user: AbstractBaseUser, session_id: str, labels: dict[str, Any]
) -> SessionState:
    """Replace the labels (tags, metadata, expiry) of the user's session; return its state."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().update_labels(session_id, labels)
