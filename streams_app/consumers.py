"""WebSocket stream of a session: `ws/sessions/{session_id}/stream?fromSequence=N`.

Frames are JSON stream events (DESIGN "Wire shapes"). When several events are ready at once
(a replay, a burst), they go in one frame, `{"type": "batch", "events": [event, ...]}`, in
order: one frame costs Daphne about as much as one event, so a 10,000-chunk replay takes a
handful of frames. The client may send `{"type": "ping"}`; the answer is `{"type": "pong"}`.
Any other frame (binary, not JSON, another type) is answered with an error frame,
`{"type": "error", "code", "message"}`, and the socket stays open. The socket closes with 1000
after `end` and 1011 after `fail`.

Database calls go through `database_sync_to_async`, which drops broken or expired connections
around each call, as long-lived consumers must.
"""

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import parse_qs

from autobahn.exception import Disconnected  # What Daphne raises on sending to a client that left.
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from sessions_app.errors import InvalidFrame, InvalidJSON, SessionNotFound, UnknownFrameType
from sessions_app.parsers import error_frame, frame_loads
from sessions_app.selectors import asession_for_user
from streams_app.backends import get_stream_manager
from streams_app.backends.reader import StreamReader
from streams_app.backends.types import FailEvent, StreamEvent
from streams_app.errors import InvalidResumePoint
from streams_app.metrics import CLIENTS
from streams_app.resume import resume_point


class StreamConsumer(AsyncWebsocketConsumer):
    reader: StreamReader | None = None
    pump: asyncio.Task | None = None
    counted = False  # In `helix_stream_clients`.

    async def connect(self) -> None:
        """Accept only the session's owner, then start sending its stream."""
        try:
            session = await asession_for_user(
                session_id=self.scope["url_route"]["kwargs"]["session_id"],
                user=self.scope["user"],
            )
            query = parse_qs(self.scope["query_string"].decode())
            from_sequence = resume_point(from_sequence=query.get("fromSequence", [None])[-1])
        except (SessionNotFound, InvalidResumePoint):
            await self.close()  # Before accept: the handshake is refused, the same for all.
            return
        manager = get_stream_manager()
        self.reader = await database_sync_to_async(manager.create_resumable_reader)(
            session.stream_id, from_sequence
        )
        await self.accept()
        CLIENTS.labels("websocket").inc()
        self.counted = True
        if self.reader is None:
            info = await database_sync_to_async(manager.get_stream_info)(session.stream_id)
            await self._send_events([FailEvent(info.error or "The stream failed.")])
            await self.close(code=1011)
            return
        self.pump = asyncio.create_task(self._pump())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        """Answer a ping with a pong, and any other frame with an error frame."""
        try:
            frame = frame_loads(text_data, bytes_data)
            if frame["type"] != "ping":
                raise UnknownFrameType(frame["type"], known=["ping"])
        except (InvalidFrame, InvalidJSON) as error:
            reply = error_frame(error)
        else:
            reply = {"type": "pong"}
        with contextlib.suppress(Disconnected):  # The client left; `disconnect` cleans up.
            await self.send(text_data=json.dumps(reply))

    async def disconnect(self, code: int) -> None:
        """Stop sending and release the reader."""
        if self.counted:
            CLIENTS.labels("websocket").dec()
            self.counted = False
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pump
        if self.reader is not None:
            await self.reader.aclose()

    async def _pump(self) -> None:
        last = None
        while not self.reader.finished:
            events = await self.reader.next_events()
            if events:
                try:
                    await self._send_events(events)
                except Disconnected:  # The client left mid-send; `disconnect` cleans up.
                    return
                last = events[-1]
        await self.close(code=1011 if isinstance(last, FailEvent) else 1000)

    async def _send_events(self, events: list[StreamEvent]) -> None:
        frame: dict[str, Any] = (
            events[0].to_wire()
            if len(events) == 1
            else {"type": "batch", "events": [event.to_wire() for event in events]}
        )
        await self.send(text_data=json.dumps(frame))
