"""Write-side services of the durable record."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from sessions_app.errors import SessionNotFound
from sessions_app.selectors import session_for_user
from sessions_app.stores import get_session_store
from sessions_app.stores.base import SessionStateStore
from sessions_app.stores.types import LIVE_STATUSES, RunStatus, SessionState, SessionStatus

DEFAULT_EXPIRY_ERROR = "Session expired"
EXPIRED_FAILURE_REASON = "expired"


def session_update_labels(
    *, user: AbstractBaseUser, session_id: str, labels: dict[str, Any]
) -> SessionState:
    """Replace the labels (tags, metadata, expiry) of the user's session; return its state."""
    session_for_user(session_id=session_id, user=user)
    return get_session_store().update_labels(session_id, labels)


@dataclass(kw_only=True, slots=True)
class CleanupReport:
    """What one sweep did; in a dry run, `reaped` lists what it would have failed."""

    now: datetime
    dry_run: bool
    scanned: int = 0
    reaped: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def expired_session_cleanup(
    store: SessionStateStore,
    *,
    now: datetime | None = None,
    error: str = DEFAULT_EXPIRY_ERROR,
    batch_size: int = 100,
    dry_run: bool = False,
) -> CleanupReport:
    """Fail every live session whose `expires_at` has passed, recording `error` on it.

    Each session is failed by a compare-and-set against the version it was listed at, so a
    session that changed since (extended, resumed, finished, deleted) is skipped and left for
    the next sweep, two sweeps at once never fail a session twice, and a worker that later
    commits with its old expected version is rejected instead of resurrecting it.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    report = CleanupReport(now=now or timezone.now(), dry_run=dry_run)
    cursor = None
    while True:
        batch = store.list_expired_sessions(report.now, after=cursor, limit=batch_size)
        for summary in batch:
            report.scanned += 1
            if dry_run or _reap(store, summary.session_id, summary.version, error):
                report.reaped.append(summary.session_id)
            else:
                report.skipped.append(summary.session_id)
        if len(batch) < batch_size:
            return report
        cursor = (batch[-1].expires_at, batch[-1].session_id)


@transaction.atomic
def _reap(store: SessionStateStore, session_id: str, version: int, error: str) -> bool:
    """Fail one expired session, and its unfinished run, if it is still as it was listed.

    Return whether it was failed.
    """
    try:
        result = store.compare_and_set_status(
            session_id,
            LIVE_STATUSES,
            SessionStatus.FAILED,
            error=error,
            failure_reason=EXPIRED_FAILURE_REASON,
            expected_version=version,
        )
    except SessionNotFound:
        return False
    run = store.get_current_run(session_id) if result.ok else None
    if run is not None and run.status in (RunStatus.RUNNING, RunStatus.SUSPENDED):
        store.update_run_status(run.run_id, RunStatus.FAILED, error=error)
    return result.ok
