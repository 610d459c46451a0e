"""Memory an agent pulls on demand: the search index, MemorySearch/MemoryGet and curated files (RFC 0004)."""
