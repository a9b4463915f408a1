"""The doorbell: channel-layer notices that a stream changed (DESIGN invariant 8).

The channel layer may drop a notice, and Redis may be down: readers then find the change on their
next poll of the database, so a failed ring is logged and otherwise ignored.

Writes run in sync code (Celery tasks, `sync_to_async` threads) and ring after commit. Sends go
to a long-lived event loop rather than a new one per call, which would cost the Redis layers a
connection per notice: the loop readers in this process run on, when there is one (an
in-process layer must be used from the loop its readers wait on), else a private loop thread.

Rings queue in the process, and one task on that loop sends what is queued, in order: a busy
worker wakes its loop once per burst of rings, not once per ring (a coroutine handed to the loop
for each ring cost a busy worker a fifth of its time).

On Redis pub/sub (unless its hosts are Sentinels) no loop is needed: a plain thread of the
process sends each burst with a blocking Redis client, as the layer's `group_send` would, in one
round trip per server (`RedisPublisher`). A burst then costs about half the CPU it costs through
a loop and redis-py's asyncio client, and a worker with hundreds of steps streaming rings
hundreds of bursts a second.
"""

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import threading
from typing import Any

import redis
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from channels_redis.utils import _consistent_hash, decode_hosts
from redis.exceptions import RedisError

from streams_app.backends.notices import NoticeQueue
from streams_app.backends.reader import Subscription

logger = logging.getLogger(__name__)

LAYER_ERRORS = (ChannelFull, RedisError, OSError)
# Rings a process keeps while its sender cannot keep up (the layer away): past this, the oldest
# are dropped, as the layer may drop any, and readers find their changes by polling.
MAX_QUEUED_RINGS = 10_000
# The blocking clients' socket timeouts unless the layer's hosts set them: a Redis that stops
# answering holds the sender up this long per burst, not forever.
PUBLISH_TIMEOUT = 5.0

Ring = tuple[str, dict[str, Any], str]  # A group, its message, and who its members are.


def stream_group(stream_id: str) -> str:
    """Return the channel-layer group of a stream (layer names allow few characters)."""
    return "helix.stream." + hashlib.sha256(stream_id.encode()).hexdigest()[:40]


class _Bell:
    def __init__(self) -> None:
        self._home: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # Guards everything below.
        self._pid = os.getpid()
        self._queued: collections.deque[Ring] = collections.deque(maxlen=MAX_QUEUED_RINGS)
        self._sending_on: asyncio.AbstractEventLoop | None = None  # Where the sender runs.
        self._sender: asyncio.Task | None = None  # Held: the loop keeps only a weak reference.
        # Redis pub/sub: the layer it was made for, its publisher, and the thread sending.
        self._layer: Any = None
        self._publisher: RedisPublisher | None = None
        self._rung = threading.Condition(self._lock)
        self._sending_thread: threading.Thread | None = None

    def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send from `loop`, the loop this process's readers wait on, while it runs."""
        self._home = loop

    def ring(self, stream_id: str, notice: dict[str, Any]) -> None:
        """Send a notice to the stream's readers without waiting for it to go out."""
        self.ring_streams([(stream_id, notice)])

    def ring_streams(self, stream_notices: list[tuple[str, dict[str, Any]]]) -> None:
        """Send each stream's notice to its readers, in order, without waiting."""
        self.ring_groups(
            [
                (stream_group(stream_id), notice, f"readers of stream {stream_id}")
                for stream_id, notice in stream_notices
            ]
        )

    def ring_group(self, group: str, message: dict[str, Any], receivers: str) -> None:
        """Send a message to a channel-layer group without waiting for it to go out."""
        self.ring_groups([(group, message, receivers)])

    def ring_groups(self, rings: list[Ring]) -> None:
        """Send messages to channel-layer groups without waiting for them to go out.

        Messages go out in the order they were rung.
        """
        layer = get_channel_layer()
        with self._lock:
            if self._pid != os.getpid():  # A forked child has none of its parent's threads.
                self._pid, self._own, self._sending_on = os.getpid(), None, None
                self._sending_thread = None
                self._queued.clear()
            self._queued.extend(rings)
            if self._publishes_to(layer):
                self._rung.notify()
                return
            if self._sending_on is not None and self._sending_on.is_running():
                return  # Its sender takes these too.
            loop = self._sending_on = self._loop()
        loop.call_soon_threadsafe(self._start_sending, loop)

    def _publishes_to(self, layer: Any) -> bool:
        """Return whether this process's thread sends to `layer`, starting it if need be."""
        if layer is not self._layer:
            self._layer, self._publisher = layer, RedisPublisher.for_layer(layer)
        if self._publisher is None:
            return False
        if self._sending_thread is None:
            self._sending_thread = threading.Thread(
                target=self._publish_forever, name="helix-doorbell-publisher", daemon=True
            )
            self._sending_thread.start()
        return True

    def _publish_forever(self) -> None:
        """Publish what is queued, oldest first, a burst at a time, as long as the process runs."""
        while True:
            with self._lock:
                while not self._queued or self._publisher is None:
                    self._rung.wait()
                rings, publisher = list(self._queued), self._publisher
                self._queued.clear()
            publisher.publish(rings)

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


class RedisPublisher:
    """Publishes group messages to Redis as a pub/sub layer's `group_send` does, blocking.

    channels_redis sends only from event loops: this takes the layer's hosts, prefix and
    serializer, names a group's channel and picks its server as the layer does
    (`RedisPubSubLoopLayer`), and publishes with redis-py's blocking client.
    """

    def __init__(self, layer: RedisPubSubChannelLayer, servers: list[redis.Redis]) -> None:
        self.layer = layer
        self.servers = servers
        prefix = layer._args[1] if len(layer._args) > 1 else "asgi"
        self.prefix = layer._kwargs.get("prefix", prefix)

    @classmethod
    def for_layer(cls, layer: Any) -> "RedisPublisher | None":
        """Return a publisher for a Redis pub/sub layer; `None` for any other, or Sentinels."""
        if not isinstance(layer, RedisPubSubChannelLayer):
            return None
        hosts = decode_hosts(layer._kwargs.get("hosts", layer._args[0] if layer._args else None))
        if any("master_name" in host for host in hosts):
            return None
        return cls(layer, [_blocking_client(host) for host in hosts])

    def publish(self, rings: list[Ring]) -> None:
        """Publish the rings in order, in one pipeline per server; log and swallow failures."""
        by_server: dict[int, list[tuple[str, bytes]]] = {}
        for group, message, receivers in rings:
            channel = f"{self.prefix}__group__{group}"
            try:
                body = self.layer.serialize(message)
            except Exception:  # One bad message must not stop the rest.
                logger.exception("Could not notify %s", receivers)
                continue
            server = _consistent_hash(channel, len(self.servers))
            by_server.setdefault(server, []).append((channel, body))
        for server, messages in by_server.items():
            try:
                with self.servers[server].pipeline(transaction=False) as pipe:
                    for channel, body in messages:
                        pipe.publish(channel, body)
                    pipe.execute()
            except LAYER_ERRORS:
                logger.warning("Could not notify %d groups", len(messages), exc_info=True)
            except Exception:  # Nothing may stop the sender: the rings after these still go.
                logger.exception("Could not notify %d groups", len(messages))


def _blocking_client(host: dict[str, Any]) -> redis.Redis:
    """Return a blocking Redis client for one of a layer's decoded hosts."""
    options = {
        "socket_timeout": PUBLISH_TIMEOUT,
        "socket_connect_timeout": PUBLISH_TIMEOUT,
        **host,
    }
    if "address" in options:
        return redis.Redis.from_url(options.pop("address"), **options)
    return redis.Redis(**options)


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


async def send_groups(rings: list[Ring]) -> None:
    """Send messages to channel-layer groups now, in order; log and swallow failures.

    Each ring is a group, its message and who its members are, for the log. (On Redis pub/sub
    the bell's `RedisPublisher` sends them instead, one pipeline per server.)
    """
    for group, message, receivers in rings:
        try:
            await send_group(group, message, receivers)
        except Exception:  # One bad message must not stop the rest.
            logger.exception("Could not notify %s", receivers)


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
