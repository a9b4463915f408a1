"""The client side of MCP: the SDK's client sessions, held for the life of the process.

A worker runs many steps at once in threads. They share one event loop thread per process
(started on first use, and anew in a forked child) that holds one SDK `Client` per connection:
servers with the same connection settings share it. Sync code submits coroutines to that loop and
waits for them with a timeout. Each connection

- is held by a task of its own, since the SDK's sessions are entered and left in one task;
- lists the server's tools, prompts and resources when it connects, again when the server says
  they changed (`notifications/tools/list_changed`, or a `subscriptions/listen` event on
  2026-era servers), and again before use once its list is older than
  `HELIX["MCP_TOOLS_TTL_SECONDS"]`;
- is `failed`, with the error, when it cannot connect or breaks; the first use after
  `HELIX["MCP_RETRY_SECONDS"]` connects again. A tool call is never sent twice: one that fails
  is its caller's to report;
- is closed once unused for `HELIX["MCP_IDLE_SECONDS"]`.

Watchers (the WebSocket feed of `cf_agent_mcp_servers`) are told a connection's key whenever its
state or lists change; they are called on the pool's loop and must return at once.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agents_app.definitions.mcp_servers import McpServer
from agents_app.mcp import conf

logger = logging.getLogger(__name__)

ConnectionState = Literal["connecting", "ready", "failed"]
T = TypeVar("T")
# Pages of a list followed at most, so a server whose cursor never ends cannot hang a step.
MAX_PAGES = 50
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
CLIENT_INFO = types.Implementation(name="helix", version="1")
LIST_CHANGED = (
    types.ToolListChangedNotification,
    types.PromptListChangedNotification,
    types.ResourceListChangedNotification,
)
# Errors that say the connection itself broke, rather than the call.
BROKEN = (httpx2.HTTPError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)
# Slack for the hop to the pool's loop and back, beyond the timeouts the loop applies itself.
HOP_SECONDS = 2.0
SWEEP_SECONDS = 60.0
LISTEN_BACKOFF_MAX = 30.0


class McpUnavailable(Exception):
    """The server cannot be reached now; the message says why."""


class McpCallTimeout(Exception):
    """The server did not answer a call in time."""


class McpCallError(Exception):
    """The server refused a call with a protocol error (an unknown tool, bad arguments, ...)."""


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """What this process knows of a server now: its state, and what it offers if it was listed.

    A failed server keeps the lists it had, so its tools are still offered (and fail clearly).
    """

    state: ConnectionState
    error: str | None = None
    tools: tuple[types.Tool, ...] = ()
    prompts: tuple[types.Prompt, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    instructions: str | None = None
    capabilities: dict[str, Any] | None = None
    listed: bool = False


def describe_error(error: BaseException) -> str:
    """Return a one-line account of why a connection or call failed."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, MCPError):
        return error.error.message
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class _Connection:
    """One server connection, held by a task on the pool's loop; used on that loop only."""

    def __init__(self, server: McpServer, pool: "McpClientPool") -> None:
        self.server = server
        self.key = server.connection_key
        self.pool = pool
        self.catalog = Catalog(state="connecting")
        self.client: Client | None = None
        self.up = asyncio.Event()  # Set once connected and listed, or failed.
        self.closing = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.refreshing: asyncio.Task | None = None
        self.listed_at = 0.0
        self.failed_at = 0.0
        self.last_used = time.monotonic()
        self.timed_out = False

    def open(self) -> None:
        """Start connecting, keeping the lists known from before."""
        self.up, self.closing, self.timed_out = asyncio.Event(), asyncio.Event(), False
        self._publish(replace(self.catalog, state="connecting", error=None))
        self.task = asyncio.get_running_loop().create_task(
            self._hold(), name=f"helix-mcp-{self.server.name}"
        )

    @property
    def retry_due(self) -> bool:
        """Return whether it failed long enough ago to try again."""
        finished = self.task is None or self.task.done()
        waited = time.monotonic() - self.failed_at >= conf.retry_seconds()
        return self.catalog.state == "failed" and finished and waited

    def close(self) -> None:
        """Let go of the connection (at once, if it is still connecting)."""
        self.closing.set()
        if self.task is not None and not self.up.is_set():
            self.task.cancel()

    def broken(self, error: BaseException) -> None:
        """Mark the connection failed after a use found it broken; the holder lets go of it."""
        self._fail(error)
        self.closing.set()

    def refresh_soon(self) -> None:
        """List the server's tools, prompts and resources again, unless that is under way."""
        if self.refreshing is None or self.refreshing.done():
            self.refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def fresh(self) -> None:
        """Finish a listing under way (a change was announced), or list again past the TTL."""
        stale = time.monotonic() - self.listed_at >= conf.tools_ttl_seconds()
        if self.client is not None and stale:
            self.refresh_soon()
        if self.refreshing is not None and not self.refreshing.done():
            await asyncio.shield(self.refreshing)

    async def _hold(self) -> None:
        timer = asyncio.get_running_loop().call_later(
            conf.connect_timeout_seconds(), self._connect_timed_out
        )
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client(stack))
                self.client = client
                await self._list(client)
                timer.cancel()
                self.up.set()
                await self._serve(client)
        except asyncio.CancelledError:
            if not self.timed_out:
                raise
            self._fail(TimeoutError(f"no answer within {conf.connect_timeout_seconds():g} s"))
        except Exception as error:
            self._fail(error)
        finally:
            timer.cancel()
            self.client = None
            self.up.set()

    def _connect_timed_out(self) -> None:
        if not self.up.is_set() and self.task is not None:
            self.timed_out = True
            self.task.cancel()

    async def _client(self, stack: contextlib.AsyncExitStack) -> Client:
        server = self.server
        if server.url is not None:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=dict(server.headers), timeout=HTTP_TIMEOUT)
            )
            target: Any = streamable_http_client(server.url, http_client=http)
        else:
            command = StdioServerParameters(
                command=server.command, args=list(server.args), env=server.env
            )
            # The server's stderr is the process's own: a worker's `sys.stderr` is a logging
            # proxy, which has no file descriptor to give a child.
            target = stdio_client(command, errlog=sys.__stderr__)
        return Client(target, cache=None, client_info=CLIENT_INFO, message_handler=self._on_message)

    async def _serve(self, client: Client) -> None:
        """Follow the server's change events, if it announces changes, until closed."""
        async with anyio.create_task_group() as tasks:
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _changes(client):
                tasks.start_soon(self._listen, client)
            await self.closing.wait()
            tasks.cancel_scope.cancel()

    async def _listen(self, client: Client) -> None:
        """Follow a 2026-era server's change events; a lost stream is opened again."""
        capabilities = client.server_capabilities
        delay = 1.0
        while True:
            try:
                async with client.listen(
                    tools_list_changed=_announces(capabilities.tools),
                    prompts_list_changed=_announces(capabilities.prompts),
                    resources_list_changed=_announces(capabilities.resources),
                ) as events:
                    delay = 1.0
                    async for _event in events:
                        self.refresh_soon()
            except Exception as error:  # Events may have been missed: list again, listen again.
                logger.info("MCP server %s: change events lost (%s)", self.server.name, error)
            self.refresh_soon()
            await anyio.sleep(delay)
            delay = min(2 * delay, LISTEN_BACKOFF_MAX)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, LIST_CHANGED):
            self.refresh_soon()

    async def _refresh(self) -> None:
        client = self.client
        if client is None:
            return
        try:
            await self._list(client)
        except Exception as error:  # The holder notices a broken connection itself.
            logger.warning("MCP server %s: listing failed: %s", self.server.name, error)

    async def _list(self, client: Client) -> None:
        capabilities = client.server_capabilities
        tools = await _all(client.list_tools, "tools") if capabilities.tools else []
        prompts = await _all(client.list_prompts, "prompts") if capabilities.prompts else []
        resources = await _all(client.list_resources, "resources") if capabilities.resources else []
        self.listed_at = time.monotonic()
        self._publish(
            Catalog(
                state="ready",
                tools=tuple(tools),
                prompts=tuple(prompts),
                resources=tuple(resources),
                instructions=client.instructions,
                capabilities=capabilities.model_dump(mode="json", by_alias=True, exclude_none=True),
                listed=True,
            )
        )

    def _fail(self, error: BaseException) -> None:
        self.failed_at = time.monotonic()
        reason = self.server.redact(describe_error(error))
        logger.warning("MCP server %s failed: %s", self.server.name, reason)
        self._publish(replace(self.catalog, state="failed", error=reason))

    def _publish(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.pool._changed(self.key)


class McpClientPool:
    """The process's MCP connections, on a loop thread of their own; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._connections: dict[str, _Connection] = {}
        self._watchers: dict[object, Callable[[str], None]] = {}

    # From any thread

    def catalogs(self, servers: Sequence[McpServer], *, timeout: float) -> list[Catalog]:
        """Return what each server offers, connecting those not connected (in parallel).

        A server still connecting after `timeout` is reported `connecting`.
        """
        return self._wait(self._catalogs(servers, timeout), timeout + HOP_SECONDS)

    def snapshot(self, server: McpServer) -> Catalog:
        """Return what is known of the server now, without waiting; start connecting it."""
        self._submit(self._touch(server))
        connection = self._connections.get(server.connection_key)
        return Catalog(state="connecting") if connection is None else connection.catalog

    def call_tool(
        self, server: McpServer, name: str, arguments: dict[str, Any], *, timeout: float
    ) -> types.CallToolResult:
        """Call the server's tool `name` once; wait `timeout` s for its answer.

        Raises `McpUnavailable`, `McpCallTimeout` or `McpCallError`.
        """
        limit = conf.connect_timeout_seconds() + timeout + HOP_SECONDS
        try:
            return self._wait(self._call(server, name, arguments, timeout), limit)
        except McpCallTimeout:
            raise McpCallTimeout(f"{name} did not answer within {timeout:g} s.") from None

    def watch(self, watcher: Callable[[str], None]) -> Callable[[], None]:
        """Call `watcher(connection_key)` on every change; return what stops it."""
        token = object()
        with self._lock:
            self._watchers[token] = watcher

        def unwatch() -> None:
            with self._lock:
                self._watchers.pop(token, None)

        return unwatch

    def close_all(self) -> None:
        """Close every connection (tests; a process that ends needs not)."""
        if self._loop is not None and self._pid == os.getpid():
            self._wait(self._close_all(), conf.connect_timeout_seconds() + HOP_SECONDS)

    # On the pool's loop

    def _connection(self, server: McpServer) -> _Connection:
        connection = self._connections.get(server.connection_key)
        if connection is None:
            connection = self._connections[server.connection_key] = _Connection(server, self)
            connection.open()
        elif connection.retry_due:
            connection.open()
        connection.last_used = time.monotonic()
        return connection

    async def _touch(self, server: McpServer) -> None:
        self._connection(server)

    async def _catalogs(self, servers: Sequence[McpServer], timeout: float) -> list[Catalog]:
        async def one(server: McpServer) -> Catalog:
            connection = self._connection(server)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await connection.up.wait()
                    await connection.fresh()
            return connection.catalog

        return list(await asyncio.gather(*(one(server) for server in servers)))

    async def _call(
        self, server: McpServer, name: str, arguments: dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        connection = self._connection(server)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(conf.connect_timeout_seconds()):
                await connection.up.wait()
        client = connection.client
        if client is None:
            reason = connection.catalog.error or "it is still connecting"
            raise McpUnavailable(f"MCP server {server.name!r} is unavailable: {reason}")
        try:
            return await client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except MCPError as error:
            reason = server.redact(describe_error(error))
            if error.error.code == types.REQUEST_TIMEOUT:
                raise McpCallTimeout(reason) from None
            if error.error.code == types.CONNECTION_CLOSED:
                connection.broken(error)
                raise McpUnavailable(f"MCP server {server.name!r} broke off: {reason}") from None
            raise McpCallError(reason) from None
        except BROKEN as error:
            connection.broken(error)
            reason = server.redact(describe_error(error))
            raise McpUnavailable(f"MCP server {server.name!r} broke off: {reason}") from None

    async def _close_all(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()
        await asyncio.gather(*(c.task for c in connections if c.task), return_exceptions=True)

    async def _sweep(self) -> None:
        """Close connections nobody used for the idle time, every minute."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            idle_since = time.monotonic() - conf.idle_seconds()
            for key, connection in list(self._connections.items()):
                if connection.last_used < idle_since:
                    del self._connections[key]
                    connection.close()

    def _changed(self, key: str) -> None:
        with self._lock:
            watchers = list(self._watchers.values())
        for watcher in watchers:
            try:
                watcher(key)
            except Exception:  # One broken watcher must not keep news from the others.
                logger.exception("An MCP watcher failed")

    # Plumbing

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def _wait(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        future = self._submit(coroutine)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpCallTimeout(f"no answer within {timeout:g} s") from None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # A forked child has no threads.
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="helix-mcp", daemon=True).start()
                self._loop, self._pid, self._connections = loop, os.getpid(), {}
                asyncio.run_coroutine_threadsafe(self._sweep(), loop)
            return self._loop


def _announces(capability: Any) -> bool:
    return bool(capability is not None and getattr(capability, "list_changed", False))


def _changes(client: Client) -> bool:
    capabilities = client.server_capabilities
    return any(
        _announces(c) for c in (capabilities.tools, capabilities.prompts, capabilities.resources)
    )


async def _all(fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Return every item of a paginated list."""
    items: list[Any] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor=cursor)
        items += getattr(page, field)
        cursor = page.next_cursor
        if cursor is None:
            break
    return items


_pool = McpClientPool()


def get_pool() -> McpClientPool:
    """Return the process's MCP connection pool."""
    return _pool
