"""Write-side services of the live record."""

from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from sessions_app.conf import helix_setting
from sessions_app.retries import retried_on_conflict
from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamManager


def session_delete(*, user: AbstractBaseUser, session_id: str) -> None:
    """Delete the user's session, everything recorded under it and its stream, at once."""
    state = session_for_user(session_id=session_id, user=user)
    session_and_stream_delete(session_id=session_id, stream_id=state.stream_id)


@retried_on_conflict
def session_and_stream_delete(*, session_id: str, stream_id: str) -> None:
    """Delete a session, everything recorded under it and its stream, at once; callers check
    who may.

    A step committing meanwhile may hold the stream's row and wait for the session's, which
    this holds and then waits for the stream's: PostgreSQL breaks the deadlock by aborting one
    transaction, and this one, aborted, is run again once the step has committed.
    """
    with transaction.atomic():
        get_session_store().delete_session(session_id)
        get_stream_manager().delete_stream(stream_id)


def purge_expired_streams(
    *,
    manager: StreamManager | None = None,
    now: datetime | None = None,
    retention: timedelta | None = None,
    batch_size: int | None = None,
) -> int:
    """Delete ended and failed streams untouched for the retention period; return how many.

    The retention defaults to ``HELIX["STREAM_RETENTION_DAYS"]``. Active and paused streams
    are kept however old: a suspended run may still resume them. With `batch_size`, streams go
    that many per statement, so no one statement holds its locks for long.
    """
    manager = manager or get_stream_manager()
    if retention is None:
        retention = timedelta(days=helix_setting("STREAM_RETENTION_DAYS", 7))
    finished_before = (now or timezone.now()) - retention
    if batch_size is None:
        return manager.purge_streams(finished_before)
    purged = 0
    while batch := manager.purge_streams(finished_before, limit=batch_size):
        purged += batch
    return purged
