"""WebSocket state sync of an agent (reference 004): `/agents/{agent}/{name}?_pk=CONNECTION_ID`.

The wire protocol is the reference's (`cf_agent_*` and `rpc` JSON frames; see
`shared/reference/cloudflare-notes.md`). On connect the client gets its identity, the state when
there is one, and the agent's MCP servers (`agents_app.live_state.mcp_feed`, sent again whenever
they change); then every state another client or the server writes. A client writes the whole
state with `cf_agent_state` and calls the agent's callable methods, and `addMcpServer` and
`removeMcpServer` (`agents_app.live_state.mcp_socket`), with `rpc`. Anything else it sends (a
binary frame, text that is not JSON, another type, or one of these without its fields) is
answered with `{"type": "error", "code", "message"}`, which the reference's clients pass over,
and the socket stays open.

The channel layer only rings: a write is stored first, and a ring carries the stored state
and its version; one listener per session and process hands it to the session's sockets here
(`agents_app.live_state.fanout`). A client is never sent a version older than one it already has,
and is not sent its own write back, unless it was sent another state since it connected: a
frame of that state may reach it after it sent its write, so it gets its write back to end on
the stored state. Refused connections (unknown agent, invalid name, another user's session, a
user the agent does not admit) are closed before the handshake completes, all alike.
"""

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from autobahn.exception import Disconnected  # What Daphne raises on sending to a client that left.
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agents_app.definitions.registry import AgentNotFound
from agents_app.definitions.state import json_copy
from agents_app.definitions.state_sync import is_streaming
from agents_app.errors import AgentTypeMismatch
from agents_app.live_state import fanout
from agents_app.live_state.agent_state import set_agent_state
from agents_app.live_state.mcp_feed import McpFeed
from agents_app.live_state.mcp_socket import socket_method
from agents_app.live_state.sessions import (
    OpenedStateSession,
    SessionRpcContext,
    astate_session_open,
)
from sessions_app.errors import (
    HelixError,
    InvalidFrame,
    InvalidJSON,
    SessionNotFound,
    UnknownFrameType,
)
from sessions_app.parsers import error_frame, frame_loads
from streams_app.backends.doorbell import bell

logger = logging.getLogger(__name__)

# What `cf_agent_mcp_servers` carries for an agent without MCP servers (the reference's shape).
NO_MCP_SERVERS: dict[str, Any] = {"prompts": [], "resources": [], "servers": {}, "tools": []}
MAX_CONNECTION_ID_LENGTH = 128
REFUSED = (AgentNotFound, SessionNotFound, AgentTypeMismatch)
# What a client may send, and what each frame must hold.
CLIENT_FRAMES = {
    "cf_agent_state": '"state"',
    "rpc": 'a string "id" and "method", and an "args" list',
}


class AgentStateConsumer(AsyncJsonWebsocketConsumer):
    opened: OpenedStateSession | None = None
    followed: str | None = None
    mcp: McpFeed | None = None

    async def connect(self) -> None:
        """Admit the client, send identity, state and MCP servers, then follow the state."""
        bell.adopt(asyncio.get_running_loop())  # Rings of writes in this process start here.
        self.calls: set[asyncio.Task] = set()
        self.known_version = 0  # The newest version the client has sent or been sent.
        self.sent_others = False  # Whether it was sent a state since the connect frames.
        self.pending: tuple[dict[str, Any], str] | None = None  # A ring before the state.
        kwargs = self.scope["url_route"]["kwargs"]
        # Followed before the state is read, so that no write falls between the two.
        self.followed = kwargs["name"]
        await fanout.follow(self.followed, self)
        try:
            opened = await astate_session_open(
                user=self.scope["user"],
                agent_kebab=kwargs["agent"],
                name=kwargs["name"],
                connection_id=self._connection_id(),
            )
        except REFUSED:
            await self._unfollow()
            await self.close()  # Before accept: the handshake is refused, the same for all.
            return
        self.opened = opened
        self.known_version = opened.state.version
        await self.accept()
        await self.send_json(
            {
                "type": "cf_agent_identity",
                "name": opened.session.session_id,
                "agent": opened.agent_kebab,
            }
        )
        if opened.state.state is not None:
            await self.send_json({"type": "cf_agent_state", "state": opened.state.state})
        self.mcp = McpFeed(
            self.send_json,
            agent=opened.agent,
            session_id=opened.session.session_id,
            channel_layer=self.channel_layer,
            channel_name=getattr(self, "channel_name", None),
        )
        await self.mcp.start()
        if self.pending is not None:
            await self.deliver(*self.pending)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Decode a JSON text frame; answer any other frame with an error frame."""
        try:
            content = frame_loads(text_data, bytes_data)
        except (InvalidFrame, InvalidJSON) as error:
            await self.send_json(error_frame(error))
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        """Handle a state write or an RPC call; answer anything else with an error frame."""
        if self.opened is None:
            return
        kind = content["type"]
        if kind == "cf_agent_state" and "state" in content:
            await self._write_state(content["state"])
        elif kind == "rpc" and _is_rpc_call(content):
            call = asyncio.create_task(
                self._call(content["id"], content["method"], content["args"])
            )
            self.calls.add(call)
            call.add_done_callback(self.calls.discard)
        elif kind in CLIENT_FRAMES:
            error = InvalidFrame(f"A {kind} frame needs {CLIENT_FRAMES[kind]}.", type=kind)
            await self.send_json(error_frame(error))
        else:
            await self.send_json(error_frame(UnknownFrameType(kind, known=CLIENT_FRAMES)))

    async def deliver(self, message: dict[str, Any], frame: str) -> None:
        """Send a rung state's frame on, unless the client wrote it or has a newer one."""
        if self.opened is None:  # Still connecting: the newest ring waits for the state.
            if self.pending is None or message["version"] > self.pending[0]["version"]:
                self.pending = (message, frame)
            return
        if message["exclude"] == self.opened.connection.id:
            return
        if message["version"] <= self.known_version:
            return
        self.known_version = message["version"]
        self.sent_others = True
        with contextlib.suppress(Disconnected):  # The client left; `disconnect` cleans up.
            await self.send(text_data=frame)

    async def disconnect(self, code: int) -> None:
        """Stop the client's calls and stop following the state and the MCP servers."""
        for call in list(getattr(self, "calls", ())):
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        await self._unfollow()
        if self.mcp is not None:
            await self.mcp.stop()

    async def helix_mcp_changed(self, message: dict[str, Any]) -> None:
        """Send the MCP servers again: the session added or removed one."""
        if self.mcp is not None:
            self.mcp.servers_changed()

    async def send_json(self, content: Any, close: bool = False) -> None:
        with contextlib.suppress(Disconnected):  # The client left; `disconnect` cleans up.
            await super().send_json(content, close=close)

    async def _write_state(self, state: Any) -> None:
        connection = self.opened.connection
        if connection.readonly:
            await self.send_json(
                {"type": "cf_agent_state_error", "error": "Connection is readonly"}
            )
            return
        try:
            stored = await database_sync_to_async(set_agent_state)(
                self.opened.session.session_id, state, source=connection
            )
        except HelixError as error:  # StateRejected says only "State update rejected".
            await self.send_json({"type": "cf_agent_state_error", "error": error.message})
            return
        self.known_version = max(self.known_version, stored.version)
        if self.sent_others:
            await self.send_json({"type": "cf_agent_state", "state": stored.state})

    async def _call(self, call_id: str, name: str, args: list[Any]) -> None:
        method = self.opened.agent.state_sync.method(name) or socket_method(
            name, self.scope["user"]
        )
        if method is None:
            await self._reply(call_id, error=f"Method {name} is not callable")
            return
        context = SessionRpcContext(
            session_id=self.opened.session.session_id, connection=self.opened.connection
        )
        try:
            if is_streaming(method):
                final = await self._stream(call_id, method, context, args)
            elif inspect.iscoroutinefunction(method):
                final = await method(context, *args)
            else:
                final = await database_sync_to_async(method)(context, *args)
            result = json_copy(final, f"The result of {name}")
        except Exception as error:  # The caller gets the error's message, as in the reference.
            logger.info("RPC %s of session %s failed", name, context.session_id, exc_info=True)
            await self._reply(call_id, error=str(error) or type(error).__name__)
            return
        await self._reply(call_id, result=result, done=True)

    async def _stream(
        self, call_id: str, method: Callable, context: SessionRpcContext, args: list[Any]
    ) -> Any:
        """Send each item the method yields; return what a generator returns (None if async)."""
        if inspect.isasyncgenfunction(method):
            async with contextlib.aclosing(method(context, *args)) as items:
                async for item in items:
                    await self._reply(
                        call_id, result=json_copy(item, "A streamed item"), done=False
                    )
            return None
        generator = method(context, *args)
        try:
            while True:
                finished, value = await database_sync_to_async(_advance)(generator)
                if finished:
                    return value
                await self._reply(call_id, result=json_copy(value, "A streamed item"), done=False)
        finally:
            await database_sync_to_async(generator.close)()

    async def _reply(
        self, call_id: str, *, result: Any = None, done: bool = True, error: str | None = None
    ) -> None:
        if error is not None:
            reply = {"type": "rpc", "id": call_id, "success": False, "error": error}
        else:
            reply = {"type": "rpc", "id": call_id, "success": True, "result": result, "done": done}
        await self.send_json(reply)

    async def _unfollow(self) -> None:
        if self.followed is not None:
            await fanout.unfollow(self.followed, self)
            self.followed = None

    def _connection_id(self) -> str:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        given = query.get("_pk", [""])[-1]
        return given if 0 < len(given) <= MAX_CONNECTION_ID_LENGTH else self.channel_name


def _is_rpc_call(content: dict[str, Any]) -> bool:
    return (
        isinstance(content.get("id"), str)
        and isinstance(content.get("method"), str)
        and isinstance(content.get("args"), list)
    )


def _advance(generator: Any) -> tuple[bool, Any]:
    """Return (False, the next item) or (True, what the generator returned)."""
    try:
        return False, next(generator)
    except StopIteration as stop:
        return True, stop.value
