"""Write-side services of the live record."""

from datetime import datetime, timedelta

from django.utils import timezone

from sessions_app.conf import helix_setting
from streams_app.backends import get_stream_manager
from streams_app.backends.base import StreamManager


def purge_expired_streams(
    *,
    manager: StreamManager | None = None,
    now: datetime | None = None,
    retention: timedelta | None = None,
) -> int:
    """Delete ended and failed streams untouched for the retention period; return how many.

    The retention defaults to ``HELIX["STREAM_RETENTION_DAYS"]``. Active and paused streams
    are kept however old: a suspended run may still resume them.
    """
    manager = manager or get_stream_manager()
    if retention is None:
        retention = timedelta(days=helix_setting("STREAM_RETENTION_DAYS", 7))
    return manager.purge_streams((now or timezone.now()) - retention)
