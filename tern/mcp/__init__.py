"""``tern mcp``: tern's tool loop for coding agents, over the Model Context Protocol (docs/mcp.md)."""
