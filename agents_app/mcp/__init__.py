"""Model Context Protocol, both ways: agents use MCP servers' tools, and MCP clients call agents.

See `docs/mcp.md`. The modules: `client` (the process's SDK sessions), `tools` (MCP tools as
agent tools), `models`, `services` and `selectors` (servers a session adds), `calls` and
`server` (Helix as an MCP server at `/mcp`, served by `http`). What an MCP server is lives with
the other definitions (`agents_app.definitions.mcp_servers`); the REST routes with the API
(`agents_app.api.mcp_servers`); the WebSocket callables and the `cf_agent_mcp_servers` frames
with the agents socket (`agents_app.live_state.mcp_socket`, `mcp_feed`).
"""
