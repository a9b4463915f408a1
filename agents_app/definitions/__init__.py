"""What an agent is: its definition and tools (`agent`), the registry that finds agents by type,
lifecycle hooks, a run's input, the memory and state-sync options, the state draft tools write
through, and the MCP servers an agent may use. Nothing here runs anything."""
