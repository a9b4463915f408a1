"""`cf_agent_mcp_servers`: the MCP servers of a session, as the `agents` npm client reads them.

The `mcp` object is the client's `MCPServersState`: `servers` by id (a server's id is its name)
with `name`, `server_url`, `auth_url`, `state` (`connecting`, `ready` or `failed`), `error`,
`instructions` and `capabilities`; then the `tools`, `prompts` and `resources` of all of them,
each as MCP lists it with the `serverId` it comes from. A server's state is what the process
serving the socket knows of it: that process connects to the servers to list them.

A socket's feed sends the frame on connect, and again whenever it changes: when a connection's
state or lists change in this process, and when the session's servers are added or removed
(a ring on the session's MCP group, in any process).
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async

from agents_app.definitions.agent import Agent
from agents_app.definitions.mcp_servers import McpServer
from agents_app.mcp.pool import connection_pool
from agents_app.mcp.selectors import agent_mcp_servers
from agents_app.mcp.services import changes_group
from streams_app.backends.doorbell import LAYER_ERRORS

if TYPE_CHECKING:
    from agents_app.mcp.client import Catalog

logger = logging.getLogger(__name__)

FRAME_TYPE = "cf_agent_mcp_servers"


def servers_state(servers: Sequence[McpServer], catalogs: Sequence["Catalog"]) -> dict[str, Any]:
    """Return the `mcp` object of a `cf_agent_mcp_servers` frame."""
    state: dict[str, Any] = {"prompts": [], "resources": [], "servers": {}, "tools": []}
    for server, catalog in zip(servers, catalogs, strict=True):
        state["servers"][server.name] = {
            "name": server.name,
            "server_url": server.address,
            "auth_url": None,
            "state": catalog.state,
            "error": catalog.error,
            "instructions": catalog.instructions,
            "capabilities": catalog.capabilities,
        }
        offered = [tool for tool in catalog.tools if server.offers(tool.name)]
        for kind, items in (
            ("tools", offered),
            ("prompts", catalog.prompts),
            ("resources", catalog.resources),
        ):
            state[kind] += [{**_wire(item), "serverId": server.name} for item in items]
    return state


class McpFeed:
    """Keep one socket's client sent the session's MCP servers as they change."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        *,
        agent: Agent,
        session_id: str,
        channel_layer: Any,
        channel_name: str | None,
    ) -> None:
        self.send = send
        self.agent = agent
        self.session_id = session_id
        self.layer = channel_layer
        self.channel_name = channel_name
        self.servers: list[McpServer] = []
        self.sent: dict[str, Any] | None = None
        self.wake = asyncio.Event()
        self.reload = False
        self.task: asyncio.Task | None = None
        self.unwatch: Callable[[], None] | None = None
        self.joined = False

    @property
    def live(self) -> bool:
        """Return whether the agent has servers, or its sessions may add some."""
        return bool(self.agent.mcp_servers) or self.agent.mcp_session_servers

    async def start(self) -> None:
        """Send the servers as known now; then follow their changes, if the agent has any."""
        if self.live:
            loop = asyncio.get_running_loop()
            # The pool's first use loads the MCP SDK: a thread's work, not the loop's.
            pool = await asyncio.to_thread(connection_pool)
            self.unwatch = pool.watch(lambda key: self._rung(loop, key))
            await self._join()
            self.servers = await database_sync_to_async(agent_mcp_servers)(
                self.agent, self.session_id
            )
        await self._send_if_changed()
        if self.live:
            self.task = asyncio.create_task(self._follow())

    def servers_changed(self) -> None:
        """Read the session's servers again and send them: some were added or removed."""
        self.reload = True
        self.wake.set()

    async def stop(self) -> None:
        """Stop following; leave the session's MCP group."""
        if self.unwatch is not None:
            self.unwatch()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.joined:
            with contextlib.suppress(*LAYER_ERRORS):
                await self.layer.group_discard(changes_group(self.session_id), self.channel_name)

    async def _join(self) -> None:
        if self.layer is None or self.channel_name is None:
            return
        try:
            await self.layer.group_add(changes_group(self.session_id), self.channel_name)
            self.joined = True
        except LAYER_ERRORS:
            logger.warning("MCP changes of %s will not be rung: the layer failed", self.session_id)

    def _rung(self, loop: asyncio.AbstractEventLoop, key: str) -> None:
        """Wake the feed if a connection of its servers changed (called on the pool's loop)."""
        if any(server.connection_key == key for server in self.servers):
            loop.call_soon_threadsafe(self.wake.set)

    async def _follow(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.reload:
                self.reload = False
                self.servers = await database_sync_to_async(agent_mcp_servers)(
                    self.agent, self.session_id
                )
            await self._send_if_changed()

    async def _send_if_changed(self) -> None:
        catalogs = [connection_pool().snapshot(server) for server in self.servers]
        state = servers_state(self.servers, catalogs)
        if state != self.sent:
            self.sent = state
            await self.send({"type": FRAME_TYPE, "mcp": state})


def _wire(item: Any) -> dict[str, Any]:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)
