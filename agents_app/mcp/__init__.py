"""Model Context Protocol, both ways: agents use MCP servers' tools, and MCP clients call agents.

See `docs/mcp.md`. The modules: `servers` (what an MCP server is), `client` (the process's SDK
sessions), `tools` (MCP tools as agent tools), `models`, `services` and `selectors` (servers a
session adds), `api` and `socket` (REST routes and WebSocket callables), `feed` (the
`cf_agent_mcp_servers` frames), `server` (Helix as an MCP server at `/mcp`).
"""
