"""One channel-layer listener per session's state group per process, for all its sockets.

A ring then crosses the layer once per process rather than once per client: the listener takes
it off the layer, encodes the `cf_agent_state` frame once and hands it to each of the session's
sockets here, which apply their own checks (their own write, an older version) and send it.
With a listener per socket, a fan-out to 100 clients spent most of its time taking the same
message off 100 queues (bench/state.py).
"""

import asyncio
import contextlib
import json
import logging
from typing import Any, Protocol

from channels.layers import get_channel_layer

from agents_app.live_state.agent_state import state_group
from streams_app.backends.doorbell import LAYER_ERRORS

logger = logging.getLogger(__name__)


class StateSocket(Protocol):
    async def deliver(self, message: dict[str, Any], frame: str) -> None:
        """Send a rung state's encoded frame to the client, if it should have it."""


class _Listener:
    """The sockets of one session's state in this process, and the layer channel they share."""

    def __init__(self, session_id: str) -> None:
        self.group = state_group(session_id)
        self.sockets: set[StateSocket] = set()
        self.channel: str | None = None
        self.receiving: asyncio.Task | None = None
        self.started = asyncio.Event()

    async def start(self) -> None:
        layer = get_channel_layer()
        try:
            self.channel = await layer.new_channel()
            await layer.group_add(self.group, self.channel)
        except LAYER_ERRORS:
            logger.warning("No live state for %s: the channel layer failed", self.group)
            return
        finally:
            self.started.set()
        self.receiving = asyncio.create_task(self._receive(layer))

    async def stop(self) -> None:
        if self.receiving is None:
            return
        self.receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.receiving
        with contextlib.suppress(*LAYER_ERRORS):
            await get_channel_layer().group_discard(self.group, self.channel)

    async def _receive(self, layer: Any) -> None:
        # One long-lived receive: cancelling a receive unsubscribes the channel on Redis layers.
        while True:
            try:
                message = await layer.receive(self.channel)
            except LAYER_ERRORS:
                logger.warning("Lost rings of %s; retrying", self.group, exc_info=True)
                await asyncio.sleep(1)
                continue
            frame = json.dumps({"type": "cf_agent_state", "state": message["state"]})
            for socket in list(self.sockets):
                await socket.deliver(message, frame)


# Listeners by event loop and session: a loop's tasks cannot serve another loop's sockets.
_listeners: dict[tuple[int, str], _Listener] = {}


async def follow(session_id: str, socket: StateSocket) -> None:
    """Hand `socket` every ring of the session's state from when this returns."""
    key = (id(asyncio.get_running_loop()), session_id)
    listener = _listeners.get(key)
    if listener is None:
        listener = _listeners[key] = _Listener(session_id)
        listener.sockets.add(socket)
        await listener.start()
    else:
        listener.sockets.add(socket)
        await listener.started.wait()


async def unfollow(session_id: str, socket: StateSocket) -> None:
    """Stop handing `socket` rings; the last socket of a session stops its listener."""
    key = (id(asyncio.get_running_loop()), session_id)
    listener = _listeners.get(key)
    if listener is None or socket not in listener.sockets:
        return
    listener.sockets.discard(socket)
    if not listener.sockets:
        del _listeners[key]
        await listener.stop()
