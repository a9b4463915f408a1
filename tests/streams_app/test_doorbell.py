"""Notices through the configured channel layer (in-memory here, Redis pub/sub in CI), and
through layers set up for one test.

Readers here poll only every 30 s, so whatever they receive sooner came by notice.
"""

import asyncio
import json
import logging
import re
import threading
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.test import override_settings

from streams_app.backends import notices
from streams_app.backends.doorbell import (
    MAX_QUEUED_RINGS,
    ChannelSubscription,
    RedisPublisher,
    _Bell,
    bell,
    send,
    stream_group,
)
from streams_app.backends.orm import ORMStreamManager
from streams_app.backends.rules import MAX_NOTICE_BYTES, notice_for
from streams_app.backends.types import ChunkBatch, ChunkEvent
from streams_app.chunks import chunk_to_wire
from streams_app.models import Stream, StreamChunk
from tests.streams_app.writing import text

SLOW_POLL = 30.0


def redis_pubsub(**host) -> dict:
    """Return channel-layer settings for Redis pub/sub on the host these options describe."""
    return {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [host]},
        }
    }


def redis_lists(**host) -> dict:
    """Return channel-layer settings for Redis lists (`channels_redis.core`), which send only
    from event loops, on the host these options describe."""
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [host]},
        }
    }


LAYER_AWAY = redis_pubsub(address="redis://127.0.0.1:1", socket_connect_timeout=1)


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


@pytest.mark.django_db(transaction=True)
def test_chunks_stored_for_several_streams_in_one_batch_wake_each_streams_readers():
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    streams = ("one", "two", "three")
    writers = [manager.create_writer(s, "run-1", "researcher") for s in streams]

    async def scenario():
        readers = [await manager.acreate_reader(s) for s in streams]
        try:
            for reader in readers:  # Nothing stored yet: each reader now waits on notices.
                await reader.next_events(timeout=0.1)
            await database_sync_to_async(manager.append_batches)(
                [ChunkBatch(w.stream_id, w.to_wire([text(w.stream_id)])) for w in writers]
            )
            async with asyncio.timeout(3):
                return [await next_deltas(reader) for reader in readers]
        finally:
            for reader in readers:
                await reader.aclose()

    assert async_to_sync(scenario)() == [[s] for s in streams]


def store_unannounced(stream_id: str, *labels: str) -> list[tuple[int, dict]]:
    """Store chunks the way the manager does but ring nobody, as if their notices were lost."""
    stream = Stream.objects.get(pk=stream_id)
    rows = [
        StreamChunk.objects.create(
            stream=stream,
            sequence=stream.last_sequence + offset,
            step=0,
            type="text_delta",
            chunk=chunk_to_wire({**text(label), "agentType": "researcher"}),
        )
        for offset, label in enumerate(labels, start=1)
    ]
    Stream.objects.filter(pk=stream_id).update(
        last_sequence=rows[-1].sequence, chunk_count=stream.chunk_count + len(rows)
    )
    return [(row.sequence, row.chunk) for row in rows]


def test_a_notice_carries_small_chunks_measured_once_and_names_large_ones_only(monkeypatch):
    small = [(1, text("a"))]
    large = [(2, text("x" * MAX_NOTICE_BYTES))]
    encodings = []
    encode = json.dumps
    monkeypatch.setattr(
        json, "dumps", lambda value, **kw: encodings.append(1) or encode(value, **kw)
    )

    # The rows a statement sent them in were small: they are, and are not encoded again.
    assert notice_for(small, encoded_within=200) == notices.chunks_notice(small)
    assert encodings == []
    # Rows past the limit (other streams' chunks with them) say nothing: they are measured.
    assert notice_for(small, encoded_within=MAX_NOTICE_BYTES + 1) == notices.chunks_notice(small)
    assert notice_for(large, encoded_within=MAX_NOTICE_BYTES + 200) == notices.changed_notice()
    assert notice_for(large) == notices.changed_notice()
    assert len(encodings) == 3


@pytest.mark.django_db(transaction=True)
def test_a_notice_that_skips_a_sequence_sends_the_reader_to_the_store():
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    manager.create_writer("st", "run-1", "researcher").write(text("a"))

    async def scenario():
        reader = await manager.acreate_reader("st")
        try:
            first = await next_deltas(reader)
            stored = await database_sync_to_async(store_unannounced)("st", "b", "c")
            await send("st", notices.chunks_notice(stored[-1:]))  # Chunk 3 only: 2 was lost.
            return first, await next_deltas(reader)
        finally:
            await reader.aclose()

    assert async_to_sync(scenario)() == (["a"], ["b", "c"])


@pytest.mark.django_db(transaction=True)
def test_a_notice_repeating_delivered_chunks_is_ignored():
    manager = ORMStreamManager(poll_interval=SLOW_POLL)
    manager.create_writer("st", "run-1", "researcher").write_many([text("a"), text("b")])

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


@override_settings(CHANNEL_LAYERS=LAYER_AWAY)
def test_a_ring_that_cannot_reach_the_layer_is_logged_not_raised(caplog):
    with caplog.at_level(logging.WARNING, logger="streams_app.backends.doorbell"):
        async_to_sync(send)("st", notices.changed_notice())

    assert "Could not notify readers of stream st" in caplog.text


async def receive_notices(subscription: ChannelSubscription, count: int) -> list[dict]:
    received: list[dict] = []
    async with asyncio.timeout(5):
        while len(received) < count:
            received += await subscription.wait(1.0) or []
    return received


def test_rings_from_many_threads_reach_readers_each_in_the_order_it_was_rung():
    threads, rings = 4, 20

    def ring_from(thread: int) -> None:
        for n in range(rings):
            bell.ring("st", {"type": notices.CHANGED, "thread": thread, "n": n})

    async def scenario():
        subscription = ChannelSubscription("st")
        await subscription.start()  # Its loop becomes the bell's: rings go out from here.
        try:
            ringers = [threading.Thread(target=ring_from, args=(t,)) for t in range(threads)]
            for ringer in ringers:
                ringer.start()
            for ringer in ringers:
                await asyncio.to_thread(ringer.join)
            return await receive_notices(subscription, threads * rings)
        finally:
            await subscription.close()

    received = async_to_sync(scenario)()
    by_thread = {t: [m["n"] for m in received if m["thread"] == t] for t in range(threads)}
    assert by_thread == {t: list(range(rings)) for t in range(threads)}


def test_rings_published_together_reach_redis_in_one_round_trip_and_every_group_in_order(
    private_redis,
):
    streams, rings = ("a", "b", "c"), 10
    server = redis.Redis.from_url(private_redis.url)

    def reads() -> int:
        """Return how many reads of its clients' commands the server made (INFO counts one)."""
        return server.info("stats")["total_reads_processed"]

    async def send_together(rings: list) -> None:
        await asyncio.to_thread(publisher.publish, rings)

    async def scenario():
        subscriptions = [ChannelSubscription(stream) for stream in streams]
        for subscription in subscriptions:
            await subscription.start()
        try:
            await send_together([("warm", notices.changed_notice(), "nobody")])  # Connects.
            before = await asyncio.to_thread(reads)
            await send_together(
                [
                    (
                        stream_group(stream),
                        {"type": notices.CHANGED, "n": n},
                        f"readers of {stream}",
                    )
                    for n in range(rings)
                    for stream in streams
                ]
            )
            sent_in = await asyncio.to_thread(reads) - before - 1
            received = [await receive_notices(s, rings) for s in subscriptions]
            return sent_in, received
        finally:
            for subscription in subscriptions:
                await subscription.close()

    with override_settings(CHANNEL_LAYERS=redis_pubsub(address=private_redis.url)):
        publisher = RedisPublisher.for_layer(get_channel_layer())
        sent_in, received = async_to_sync(scenario)()

    assert sent_in == 1  # 30 PUBLISH commands, one after another, would take 30 reads.
    assert [[message["n"] for message in got] for got in received] == [list(range(rings))] * 3


def test_rings_on_redis_pub_sub_go_out_in_order_with_no_event_loop(private_redis):
    ringing = _Bell()  # Its own: no readers' loop adopted.

    def ring(numbers: range) -> None:
        for n in numbers:
            ringing.ring("st", {"type": notices.CHANGED, "n": n})

    async def scenario():
        subscription = ChannelSubscription("st")
        await subscription.start()
        try:
            await asyncio.to_thread(ring, range(20))
            return await receive_notices(subscription, 20)
        finally:
            await subscription.close()

    with override_settings(CHANNEL_LAYERS=redis_pubsub(address=private_redis.url)):
        received = async_to_sync(scenario)()

    assert [message["n"] for message in received] == list(range(20))
    assert ringing._own is None  # No loop of its own,
    assert ringing._sender is None  # and none of another's used.


FAILED = r"Could not notify (\d+) groups"


@override_settings(CHANNEL_LAYERS=LAYER_AWAY)
def test_a_ring_the_publisher_cannot_deliver_is_logged_and_the_rings_after_it_still_go(caplog):
    ringing = _Bell()

    def given_up() -> int:
        return sum(int(n) for n in re.findall(FAILED, caplog.text))

    with caplog.at_level(logging.WARNING, logger="streams_app.backends.doorbell"):
        ringing.ring("st", notices.changed_notice())  # Returns at once: a thread sends it.
        ringing.ring("st", notices.changed_notice())
        deadline = time.monotonic() + 10
        while given_up() < 2:  # Each tried and given up, the second after the first failed.
            assert time.monotonic() < deadline, f"{given_up()} of 2 rings given up"
            time.sleep(0.05)

    assert not ringing._queued
    assert ringing._own is None  # Sent from the publisher's thread, not from a loop.


def test_rings_queued_for_the_bells_own_loop_go_out_from_the_readers_loop_once_it_runs(
    private_redis,
):
    # Redis lists: a layer sent to from event loops only (Redis pub/sub needs none).
    ringing = _Bell()  # Its own: no readers' loop adopted, so it sends from a loop thread.
    own = ringing._loop()
    busy = threading.Event()
    own.call_soon_threadsafe(busy.wait)  # Its loop is held up: what is rung stays queued.

    def ring(numbers: range) -> None:
        for n in numbers:
            ringing.ring("st", {"type": notices.CHANGED, "n": n})

    async def scenario():
        readers = asyncio.get_running_loop()
        subscription = ChannelSubscription("st")
        await subscription.start()
        try:
            await asyncio.to_thread(ring, range(10))
            ringing.adopt(readers)  # The readers' loop comes up meanwhile,
            await asyncio.to_thread(ring, range(10, 20))
            busy.set()  # and the own loop's sender, when it runs, hands the queue over.
            received = await receive_notices(subscription, 20)
            return received, ringing._sender.get_loop() is readers
        finally:
            busy.set()
            await subscription.close()

    with override_settings(CHANNEL_LAYERS=redis_lists(address=private_redis.url)):
        received, sent_from_readers_loop = async_to_sync(scenario)()

    assert [message["n"] for message in received] == list(range(20))
    assert sent_from_readers_loop


def test_a_message_the_layer_refuses_does_not_hold_up_the_rings_after_it(caplog):
    async def scenario():
        subscription = ChannelSubscription("st")
        await subscription.start()
        try:
            bell.ring("st", {"type": notices.CHANGED, "lock": threading.Lock()})  # No copy.
            bell.ring("st", notices.changed_notice())
            return await receive_notices(subscription, 1)
        finally:
            await subscription.close()

    with caplog.at_level(logging.ERROR, logger="streams_app.backends.doorbell"):
        received = async_to_sync(scenario)()

    assert received == [notices.changed_notice()]
    assert "Could not notify readers of stream st" in caplog.text


@override_settings(CHANNEL_LAYERS=redis_lists(address="redis://127.0.0.1:1"))
def test_rings_kept_while_the_layer_is_away_are_bounded_and_the_newest_kept():
    ringing = _Bell()  # Its own: its loop's sender fails on each ring, the layer away.
    for n in range(MAX_QUEUED_RINGS + 1000):
        ringing.ring("st", {"type": notices.CHANGED, "n": n})
    kept = [message["n"] for _, message, _ in list(ringing._queued)]
    ringing._queued.clear()  # Its sender stops: it would log a failure for each ring left.

    assert len(kept) <= MAX_QUEUED_RINGS
    assert kept[-1] == MAX_QUEUED_RINGS + 999
