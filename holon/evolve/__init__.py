"""Evolve: durable memory with provenance, operator-approved proposals and bounded recall (RFC 0006)."""
