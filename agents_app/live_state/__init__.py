"""An agent's live state shared with every connected client (reference 004): reading and writing
it, the `/agents/...` WebSocket, its per-process fan-out, and the socket's MCP callables and
frames."""
