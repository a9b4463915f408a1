"""Read-side selectors of the durable record."""

from channels.db import database_sync_to_async
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from sessions_app.errors import SessionNotFound
from sessions_app.stores import get_session_store
from sessions_app.stores.types import SessionState


def session_for_user(*, session_id: str, user: AbstractBaseUser | AnonymousUser) -> SessionState:
    """Return the session if `user` owns it.

    Raises `SessionNotFound` alike for a missing session and for another user's, so an id
    reveals nothing about sessions the caller does not own (DESIGN invariant 6).
    """
    state = get_session_store().load_state(session_id) if user.is_authenticated else None
    if state is None or state.owner_id != user.pk:
        raise SessionNotFound(session_id)
    return state


asession_for_user = database_sync_to_async(session_for_user)
