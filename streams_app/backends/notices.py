"""Notices: how a stream tells its readers that something changed.

A notice is a hint, never the record. `chunks` notices carry the chunks just stored so that a
reader already at the previous sequence can deliver them without reading the store; `changed`
notices only say "look at the store" (status changed, chunks went away). Either may be lost.
"""

import asyncio
from collections import deque
from typing import Any

CHUNKS = "stream.chunks"
CHANGED = "stream.changed"
# Notices a reader holds before it stops keeping them and just looks at the store.
MAX_PENDING_NOTICES = 256


def chunks_notice(chunks: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """Return the notice that announces new chunks and carries them."""
    return {"type": CHUNKS, "chunks": [[sequence, chunk] for sequence, chunk in chunks]}


def changed_notice() -> dict[str, Any]:
    """Return the notice that tells readers to look at the store."""
    return {"type": CHANGED}


class NoticeQueue:
    """Notices waiting for one reader; push and wait from the reader's event loop only."""

    def __init__(self) -> None:
        self._notices: deque[dict[str, Any]] = deque()
        self._arrived = asyncio.Event()

    def push(self, notice: dict[str, Any]) -> None:
        """Queue a notice; past the limit, replace everything with one `changed` notice."""
        if len(self._notices) >= MAX_PENDING_NOTICES:
            self._notices.clear()
            notice = changed_notice()
        self._notices.append(notice)
        self._arrived.set()

    async def wait(self, timeout: float) -> list[dict[str, Any]] | None:
        """Return the queued notices, waiting up to `timeout` s for one; `None` if none came."""
        if not self._notices:
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except TimeoutError:
                return None
        notices = list(self._notices)
        self._notices.clear()
        self._arrived.clear()
        return notices
