"""The expired-session sweep (reference 003 `expiredSessionCleanup`).

An operator runs it on a schedule (`cleanup_expired_sessions`, or the Celery beat entry) to
reclaim sessions whose `expires_at` has passed, typically human-in-the-loop waits nobody came
back to. Each batch is one short transaction: the store takes the sessions under their row
locks, and their streams are failed or deleted with them.
"""

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agents_app.runs import dispatch
from sessions_app.stores import get_session_store
from sessions_app.stores.types import LIVE_STATUSES, SessionStatus
from streams_app.backends import get_stream_manager

DEFAULT_EXPIRY_ERROR = "Session expired"
EXPIRED_FAILURE_REASON = "expired"
# Small enough that a batch's transaction holds its row locks for a few milliseconds.
DEFAULT_BATCH_SIZE = 100


@dataclass(kw_only=True, slots=True)
class ReapReport:
    """What a sweep did; in a dry run, `reaped` lists what it would have failed or deleted."""

    cutoff: datetime
    dry_run: bool
    delete: bool
    reaped: list[str] = field(default_factory=list)
    batches: int = 0


def reap_expired_sessions(
    *,
    session_ids: Collection[str] | None = None,
    now: datetime | None = None,
    error: str = DEFAULT_EXPIRY_ERROR,
    delete: bool = False,
    older_than: timedelta | None = None,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Callable[[ReapReport], None] | None = None,
) -> ReapReport:
    """Fail (or delete) sessions that expired `older_than` ago or earlier, batch by batch.

    Failed sessions' streams fail too, so their readers stop; deleted sessions take their
    streams with them. A parent is told when a child of it is reaped. Only `session_ids` are
    considered when given, at most `limit` sessions are reaped, and `progress` is called
    after each batch. Sessions whose step is running are left for a later sweep. A dry run
    lists what would be reaped and changes nothing.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative.")
    if older_than is not None and older_than < timedelta(0):
        raise ValueError("older_than must not be negative.")
    cutoff = (now or timezone.now()) - (older_than or timedelta(0))
    report = ReapReport(cutoff=cutoff, dry_run=dry_run, delete=delete)
    if dry_run:
        _would_reap(report, limit, session_ids)
        return report
    while limit is None or len(report.reaped) < limit:
        size = batch_size if limit is None else min(batch_size, limit - len(report.reaped))
        batch = _reap_batch(report, size, error, session_ids)
        if not batch:
            break
        report.reaped.extend(batch)
        report.batches += 1
        if progress is not None:
            progress(report)
        if len(batch) < size:
            break
    return report


def _reap_batch(
    report: ReapReport, size: int, error: str, session_ids: Collection[str] | None
) -> list[str]:
    """Reap one batch in one transaction; return the ids reaped."""
    streams = get_stream_manager()
    with transaction.atomic():
        taken = get_session_store().reap_expired_sessions(
            report.cutoff,
            error=error,
            failure_reason=EXPIRED_FAILURE_REASON,
            delete=report.delete,
            session_ids=session_ids,
            limit=size,
        )
        stream_ids = [session.stream_id for session in taken]
        if report.delete:
            streams.delete_streams(stream_ids)
        else:
            streams.fail_streams(stream_ids, error)
        for session in taken:
            if session.parent_session_id is not None:
                dispatch.child_finished_on_commit(session.parent_session_id, session.session_id)
    return [session.session_id for session in taken]


def _would_reap(report: ReapReport, limit: int | None, session_ids: Collection[str] | None) -> None:
    """List in `report.reaped` what a real sweep would reap now, leaving everything as it is."""
    store = get_session_store()
    statuses = frozenset(SessionStatus) if report.delete else LIVE_STATUSES
    wanted = None if session_ids is None else set(session_ids)
    cursor = None
    while limit is None or len(report.reaped) < limit:
        batch = store.list_expired_sessions(
            report.cutoff, statuses=statuses, after=cursor, limit=DEFAULT_BATCH_SIZE
        )
        report.reaped.extend(
            summary.session_id
            for summary in batch
            if wanted is None or summary.session_id in wanted
        )
        if len(batch) < DEFAULT_BATCH_SIZE:
            break
        cursor = batch[-1].expires_at, batch[-1].session_id
    if limit is not None:
        del report.reaped[limit:]
