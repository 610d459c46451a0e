"""An MCP server over an agent's memory (RFC 0007)."""
