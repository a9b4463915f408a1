"""Rules every `StreamManager` backend applies the same way."""

import json
from collections.abc import Collection
from typing import Any

from streams_app.backends import notices
from streams_app.backends.types import StreamStatus
from streams_app.errors import StreamClosed

LIVE_STATUSES = frozenset({StreamStatus.ACTIVE, StreamStatus.PAUSED})
# Chunks larger than this together are announced without being carried: readers fetch them.
MAX_NOTICE_BYTES = 32 * 1024


def check_can(
    stream_id: str, status: StreamStatus, action: str, allowed: Collection[StreamStatus]
) -> None:
    """Raise `StreamClosed` unless a stream in `status` allows `action`."""
    if status not in allowed:
        raise StreamClosed(stream_id, status, action)


def notice_for(
    sequenced: list[tuple[int, dict[str, Any]]], *, encoded_within: int | None = None
) -> dict[str, Any]:
    """Return the notice for newly stored chunks: carrying them unless they are large.

    `encoded_within` is the length of JSON the caller encoded them in, with more around them
    (a statement's rows): small enough, it says they are small without encoding them again.
    """
    size = encoded_within
    if size is None or size > MAX_NOTICE_BYTES:  # Measure them on their own.
        size = len(json.dumps([chunk for _, chunk in sequenced], separators=(",", ":")))
    return (
        notices.chunks_notice(sequenced) if size <= MAX_NOTICE_BYTES else notices.changed_notice()
    )
