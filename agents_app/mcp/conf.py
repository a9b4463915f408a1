"""The MCP knobs in the ``HELIX`` setting, read when used (never at import)."""

from sessions_app.conf import helix_setting


def connect_timeout_seconds() -> float:
    """Return how long a step waits for a server to connect and list its tools."""
    return float(helix_setting("MCP_CONNECT_TIMEOUT_SECONDS", 10.0))


def tools_ttl_seconds() -> float:
    """Return how long a server's tool list is used before it is listed again.

    A server that announces changes (`notifications/tools/list_changed`) is listed again at once.
    """
    return float(helix_setting("MCP_TOOLS_TTL_SECONDS", 300.0))


def retry_seconds() -> float:
    """Return how long a server that failed to connect is left alone before the next attempt."""
    return float(helix_setting("MCP_RETRY_SECONDS", 5.0))


def idle_seconds() -> float:
    """Return how long a connection nobody used stays open."""
    return float(helix_setting("MCP_IDLE_SECONDS", 600.0))
