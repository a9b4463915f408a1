"""The doorbell: channel-layer notices that a stream changed (DESIGN invariant 8).

The channel layer may drop a notice, and Redis may be down: readers then find the change on their
next poll of the database, so a failed ring is logged and otherwise ignored.

Writes run in sync code (Celery tasks, `sync_to_async` threads) and ring after commit. Sends go
to a long-lived event loop rather than a new one per call, which would cost the Redis layers a
connection per notice: the loop readers in this process run on, when there is one (an
in-process layer must be used from the loop its readers wait on), else a private loop thread.

Rings queue in the process, and one task on that loop sends what is queued, in order: a busy
worker wakes its loop once per burst of rings, not once per ring (a coroutine handed to the loop
for each ring cost a busy worker a fifth of its time), and on Redis pub/sub a burst reaches
Redis in one round trip (`send_groups`), not one per ring.
"""

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import threading
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from redis.exceptions import RedisError

from streams_app.backends.notices import NoticeQueue
from streams_app.backends.reader import Subscription

logger = logging.getLogger(__name__)

LAYER_ERRORS = (ChannelFull, RedisError, OSError)
# Rings a process keeps while its sender cannot keep up (the layer away): past this, the oldest
# are dropped, as the layer may drop any, and readers find their changes by polling.
MAX_QUEUED_RINGS = 10_000


def stream_group(stream_id: str) -> str:
    """Return the channel-layer group of a stream (layer names allow few characters)."""
    return "helix.stream." + hashlib.sha256(stream_id.encode()).hexdigest()[:40]


class _Bell:
    def __init__(self) -> None:
        self._home: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # Guards everything below.
        self._pid = os.getpid()
        self._queued: collections.deque[tuple[str, dict[str, Any], str]] = collections.deque(
            maxlen=MAX_QUEUED_RINGS
        )
        self._sending_on: asyncio.AbstractEventLoop | None = None  # Where the sender runs.
        self._sender: asyncio.Task | None = None  # Held: the loop keeps only a weak reference.

    def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send from `loop`, the loop this process's readers wait on, while it runs."""
        self._home = loop

    def ring(self, stream_id: str, notice: dict[str, Any]) -> None:
        """Send a notice to the stream's readers without waiting for it to go out."""
        self.ring_group(stream_group(stream_id), notice, f"readers of stream {stream_id}")

    def ring_group(self, group: str, message: dict[str, Any], receivers: str) -> None:
        """Send a message to a channel-layer group without waiting for it to go out.

        Messages go out in the order they were rung.
        """
        with self._lock:
            if self._pid != os.getpid():  # A forked child has none of its parent's threads.
                self._pid, self._own, self._sending_on = os.getpid(), None, None
                self._queued.clear()
            self._queued.append((group, message, receivers))
            if self._sending_on is not None and self._sending_on.is_running():
                return  # Its sender takes this one too.
            loop = self._sending_on = self._loop()
        loop.call_soon_threadsafe(self._start_sending, loop)

    def _loop(self) -> asyncio.AbstractEventLoop:
        home = self._home
        if home is not None and home.is_running():
            return home
        if self._own is None:
            self._own = asyncio.new_event_loop()
            threading.Thread(
                target=self._own.run_forever, name="helix-doorbell", daemon=True
            ).start()
        return self._own

    def _start_sending(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sending_on is loop:  # Else a ring moved sending to another loop meanwhile.
            self._sender = loop.create_task(self._send_queued(loop))

    async def _send_queued(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send what is queued, oldest first, until nothing is: all that waits at once."""
        while True:
            with self._lock:
                if not self._queued or self._sending_on is not loop:
                    if self._sending_on is loop:
                        self._sending_on = None
                    return
                if (readers := self._loop()) is not loop:  # Their loop came up: it sends now.
                    self._sending_on = readers
                    readers.call_soon_threadsafe(self._start_sending, readers)
                    return
                rings = list(self._queued)
                self._queued.clear()
            await send_groups(rings)


bell = _Bell()


async def send(stream_id: str, notice: dict[str, Any]) -> None:
    """Send a notice to the stream's readers now; log and swallow layer failures."""
    await send_group(stream_group(stream_id), notice, f"readers of stream {stream_id}")


async def send_group(group: str, message: dict[str, Any], receivers: str) -> None:
    """Send a message to a channel-layer group now; log and swallow layer failures.

    `receivers` names the group's members in the log.
    """
    try:
        await get_channel_layer().group_send(group, message)
    except LAYER_ERRORS:
        logger.warning("Could not notify %s", receivers, exc_info=True)


async def send_groups(rings: list[tuple[str, dict[str, Any], str]]) -> None:
    """Send messages to channel-layer groups now, in order; log and swallow failures.

    Each ring is a group, its message and who its members are, for the log. On Redis pub/sub
    the messages go to each Redis server in one pipeline: one round trip for all, where
    `group_send` makes one each. A group's messages keep their order there too.
    """
    layer = get_channel_layer()
    if len(rings) > 1 and isinstance(layer, RedisPubSubChannelLayer):
        try:
            await _publish_together(layer, rings)
        except LAYER_ERRORS:
            logger.warning("Could not notify %d groups", len(rings), exc_info=True)
        except Exception:  # Nothing may stop the sender: the rings after these still go.
            logger.exception("Could not notify %d groups", len(rings))
        return
    for group, message, receivers in rings:
        try:
            await send_group(group, message, receivers)
        except Exception:  # One bad message must not stop the rest.
            logger.exception("Could not notify %s", receivers)


async def _publish_together(
    layer: RedisPubSubChannelLayer, rings: list[tuple[str, dict[str, Any], str]]
) -> None:
    """Publish the rings as the layer's `group_send` does, in one pipeline per Redis server.

    channels_redis offers no send of many messages: this takes the channel and the server its
    `group_send` would (`RedisPubSubLoopLayer`), under the server connection's lock.
    """
    on_loop = layer._get_layer()
    by_shard: dict[int, tuple[Any, list[tuple[str, bytes]]]] = {}
    for group, message, receivers in rings:
        channel = on_loop._get_group_channel_name(group)
        try:
            body = layer.serialize(message)
        except Exception:  # One bad message must not stop the rest.
            logger.exception("Could not notify %s", receivers)
            continue
        shard = on_loop._get_shard(channel)
        by_shard.setdefault(id(shard), (shard, []))[1].append((channel, body))
    for shard, messages in by_shard.values():
        async with shard._lock:
            shard._ensure_redis()
            async with shard._redis.pipeline(transaction=False) as pipe:
                for channel, body in messages:
                    pipe.publish(channel, body)
                await pipe.execute()


class ChannelSubscription(Subscription):
    """A reader's subscription to its stream's channel-layer group."""

    def __init__(self, stream_id: str) -> None:
        self.group = stream_group(stream_id)
        self._queue: NoticeQueue | None = None
        self._channel: str | None = None
        self._receiving: asyncio.Task | None = None

    async def start(self) -> None:
        bell.adopt(asyncio.get_running_loop())
        self._queue = NoticeQueue()
        layer = get_channel_layer()
        try:
            self._channel = await layer.new_channel()
            await layer.group_add(self.group, self._channel)
        except LAYER_ERRORS:
            logger.warning("Readers of %s fall back to polling", self.group, exc_info=True)
            return
        self._receiving = asyncio.create_task(self._receive(layer))

    async def _receive(self, layer: Any) -> None:
        # One long-lived receive: cancelling a receive unsubscribes the channel on Redis layers.
        while True:
            try:
                self._queue.push(await layer.receive(self._channel))
            except LAYER_ERRORS:
                logger.warning("Lost notices of %s; retrying", self.group, exc_info=True)
                await asyncio.sleep(1)

    async def wait(self, timeout: float) -> list[dict[str, Any]] | None:
        return await self._queue.wait(timeout)

    async def close(self) -> None:
        if self._receiving is None:
            return
        self._receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._receiving
        with contextlib.suppress(*LAYER_ERRORS):
            await get_channel_layer().group_discard(self.group, self._channel)
