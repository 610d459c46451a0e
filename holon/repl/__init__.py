"""The operator REPL, ``holon chat``: a client of the daemon's HTTP API (RFC 0005)."""
