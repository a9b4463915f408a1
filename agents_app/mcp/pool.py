"""The process's MCP connection pool, loaded with its first use.

A process loads the MCP SDK (`agents_app.mcp.client`) only once it uses a server: the SDK costs
a Daphne or worker process about a second of CPU at start, and most of them never use one.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents_app.mcp.client import McpClientPool


def connection_pool() -> "McpClientPool":
    """Return the process's MCP connection pool."""
    from agents_app.mcp.client import get_pool

    return get_pool()
