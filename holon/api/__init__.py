"""The HTTP control API of the daemon (RFC 0005)."""
