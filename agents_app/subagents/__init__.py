"""Agents that run other agents: sub-agents a tool call starts as child sessions (`children`)
and persistent companions with their tools (`companions`)."""
