"""The daemon: a long-lived host of one home's agents, its timers and its HTTP API (RFC 0005)."""

from holon.daemon.core import Daemon

__all__ = ["Daemon"]
