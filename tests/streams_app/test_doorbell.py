"""Notices through the configured channel layer (in-memory here, Redis pub/sub in CI).

Readers here poll only every 30 s, so whatever they receive sooner came by notice.
"""

import asyncio
import logging

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from streams_app.backends import notices
from streams_app.backends.base import ChunkEvent
from streams_app.backends.orm import ORMStreamManager
from streams_app.doorbell import send

from .test_manager_conformance import text

SLOW_POLL = 30.0


async def next_deltas(reader, timeout: float = 3.0) -> list[str]:
    events = await reader.next_events(timeout=timeout)
    return [event.chunk["delta"] for event in events if isinstance(event, ChunkEvent)]


@pytest.mark.django_db(transaction=True)
def test_a_committed_write_wakes_readers_without_polling():
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write(text("a"))

    async def scenario():
        readers = [await manager.acreate_reader("st") for _ in range(3)]
        try:
            replayed = [await next_deltas(reader) for reader in readers]
            await writer.awrite(text("b"))
            async with asyncio.timeout(3):
                followed = [await next_deltas(reader) for reader in readers]
        finally:
            for reader in readers:
                await reader.aclose()
        return replayed, followed

    replayed, followed = async_to_sync(scenario)()
    assert replayed == [["a"]] * 3
    assert followed == [["b"]] * 3


@pytest.mark.django_db
def test_a_notice_that_skips_a_sequence_sends_the_reader_to_the_store():
    """Inside the test's transaction writes never ring; the test rings for chunk 3 alone, as
    if the notice for chunk 2 had been lost."""
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write(text("a"))

    async def scenario():
        reader = await manager.acreate_reader("st")
        try:
            first = await next_deltas(reader)
            await writer.awrite_many([text("b"), text("c")])
            third = (await manager.aget_all_chunks("st"))[-1]
            await send("st", notices.chunks_notice([(third.sequence, third.chunk)]))
            return first, await next_deltas(reader)
        finally:
            await reader.aclose()

    assert async_to_sync(scenario)() == (["a"], ["b", "c"])


@pytest.mark.django_db
def test_a_notice_repeating_delivered_chunks_is_ignored():
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write_many([text("a"), text("b")])

    async def scenario():
        reader = await manager.acreate_reader("st")
        try:
            first = await next_deltas(reader)
            chunks = await manager.aget_all_chunks("st")
            await send("st", notices.chunks_notice([(c.sequence, c.chunk) for c in chunks]))
            return first, await next_deltas(reader, timeout=0.5)
        finally:
            await reader.aclose()

    assert async_to_sync(scenario)() == (["a", "b"], [])


@override_settings(
    CHANNEL_LAYERS={
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1", "socket_connect_timeout": 1}]},
        }
    }
)
def test_a_ring_that_cannot_reach_the_layer_is_logged_not_raised(caplog):
    with caplog.at_level(logging.WARNING, logger="streams_app.doorbell"):
        async_to_sync(send)("st", notices.changed_notice())

    assert "Could not notify readers of stream st" in caplog.text
