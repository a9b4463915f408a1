"""How a quiet reader polls the store: spread across readers, backing off, reset by notices.

The reader is shared by every backend; the in-memory one keeps its looks free of database time.
"""

import asyncio
import itertools
import time

from asgiref.sync import async_to_sync

from streams_app.backends.memory import InMemoryStreamManager
from streams_app.backends.reader import MAX_POLL_BACKOFF, POLL_JITTER
from tests.streams_app.writing import text


class CountingManager(InMemoryStreamManager):
    """Records when readers look at the store."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.looks: list[float] = []

    def read_snapshot(self, stream_id, after, limit):
        self.looks.append(time.monotonic())
        return super().read_snapshot(stream_id, after, limit)


def test_a_quiet_reader_looks_less_and_less_often_until_a_notice_comes():
    interval = 0.02
    manager = CountingManager(poll_interval=interval)
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write(text("a"))

    async def scenario():
        reader = await manager.acreate_reader("st")
        try:
            await reader.next_events()
            manager.looks.clear()
            quiet_from = time.monotonic()
            await reader.next_events(timeout=1.0)
            quiet = [quiet_from, *manager.looks]
            await writer.awrite(text("b"))
            delivered = await reader.next_events(timeout=1.0)
            manager.looks.clear()
            notified_at = time.monotonic()
            await reader.next_events(timeout=0.5)
            return quiet, delivered, notified_at, list(manager.looks)
        finally:
            await reader.aclose()

    quiet, delivered, notified_at, after_notice = async_to_sync(scenario)()
    gaps = [later - earlier for earlier, later in itertools.pairwise(quiet)]
    # Polling every interval would look 50 times in the quiet second; doubling waits, about 10.
    assert len(gaps) <= 14
    longest = MAX_POLL_BACKOFF * interval
    assert longest * (1 - POLL_JITTER) <= max(gaps) < 2 * longest
    assert [event.chunk["delta"] for event in delivered] == ["b"]
    # The notice brought the wait back to one interval, far below the backed-off one.
    assert after_notice[0] - notified_at < longest * (1 - POLL_JITTER)


def test_readers_woken_by_one_notice_spread_their_looks():
    interval = 0.2
    manager = CountingManager(poll_interval=interval)
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write(text("a"))

    async def scenario():
        readers = [await manager.acreate_reader("st") for _ in range(20)]
        try:
            for reader in readers:
                await reader.next_events()
            await writer.awrite(text("b"))
            await asyncio.gather(*(reader.next_events() for reader in readers))
            manager.looks.clear()
            await asyncio.gather(*(reader.next_events(timeout=0.3) for reader in readers))
            return sorted(manager.looks)[: len(readers)]
        finally:
            for reader in readers:
                await reader.aclose()

    first_looks = async_to_sync(scenario)()
    # Each reader's first look falls anywhere in a window half an interval wide; without the
    # spread, all twenty would land within a few milliseconds of each other.
    assert first_looks[-1] - first_looks[0] >= 0.2 * interval
