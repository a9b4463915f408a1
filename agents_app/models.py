"""The runtime's models; each lives with the feature that owns it."""

from agents_app.mcp.models import SessionMcpServer

__all__ = ["SessionMcpServer"]
