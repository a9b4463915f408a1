"""Read-side selectors of the durable record."""

from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from sessions_app.errors import SessionNotFound
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    Checkpoint,
    MessageHit,
    PaginatedMessages,
    PaginatedSessions,
    RunRecord,
    SessionState,
)
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import UsageEntry, UsageKind, UsageRollup


def session_for_user(*, session_id: str, user: AbstractBaseUser | AnonymousUser) -> SessionState:
    """Return the session if `user` owns it.

    Raises `SessionNotFound` alike for a missing session and for another user's, so an id
    reveals nothing about sessions the caller does not own (DESIGN invariant 6).
    """
    if (state := existing_session_for_user(session_id=session_id, user=user)) is None:
        raise SessionNotFound(session_id)
    return state


def existing_session_for_user(
    *, session_id: str, user: AbstractBaseUser | AnonymousUser
) -> SessionState | None:
    """Return the session if `user` owns it, or None if no session has that id.

    Another user's session raises `SessionNotFound`, as `session_for_user` does: a caller that
    makes a session under an id nobody uses must never take another user's.
    """
    if not user.is_authenticated:
        raise SessionNotFound(session_id)
    state = get_session_store().load_state(session_id)
    if state is not None and state.owner_id != user.pk:
        raise SessionNotFound(session_id)
    return state


asession_for_user = database_sync_to_async(session_for_user)


def session_list(*, user: AbstractBaseUser, **filters: Any) -> PaginatedSessions:
    """Return a page of the user's own sessions; `filters` are those of `list_sessions`."""
    return get_session_store().list_sessions(owner_id=user.pk, **filters)


def session_messages(
    *, user: AbstractBaseUser, session_id: str, offset: int, limit: int
) -> PaginatedMessages:
    """Return a page of the user's session's messages in sequence order."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().get_messages(session_id, offset=offset, limit=limit)


def session_search(
    *, user: AbstractBaseUser, session_id: str, query: str, limit: int
) -> list[MessageHit]:
    """Return the user's session's messages holding `query` as a phrase, best first."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().search_messages(session_id, query, limit=limit)


def user_search(*, user: AbstractBaseUser, query: str, limit: int) -> list[MessageHit]:
    """Return the messages of all the user's sessions holding every word of `query`."""
    return get_session_store().search_owner_messages(user.pk, query, limit=limit)


def session_runs(*, user: AbstractBaseUser, session_id: str) -> list[RunRecord]:
    """Return the runs of the user's session by turn."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().list_runs(session_id)


def session_checkpoints(
    *, user: AbstractBaseUser, session_id: str, limit: int | None = None
) -> list[Checkpoint]:
    """Return the checkpoints of the user's session, newest first."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().list_checkpoints(session_id, limit=limit)


def session_usage_rollup(
    *, user: AbstractBaseUser, session_id: str, run_id: str | None = None
) -> UsageRollup:
    """Return the usage of the user's session summed up (of one run if `run_id` is given)."""
    session_for_user(session_id=session_id, user=user)
    return get_usage_store().get_rollup(session_id, run_id=run_id)


def session_usage_entries(
    *,
    user: AbstractBaseUser,
    session_id: str,
    kinds: list[UsageKind] | None = None,
    run_id: str | None = None,
) -> list[UsageEntry]:
    """Return the usage entries of the user's session, of the given kinds and run."""
    session_for_user(session_id=session_id, user=user)
    return get_usage_store().get_entries(session_id, kinds=kinds, run_id=run_id)
