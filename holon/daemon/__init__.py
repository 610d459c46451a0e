"""The daemon: a long-lived host of one home's agents, its timers and its HTTP API (RFC 0005).

``Daemon`` is imported on first use: the CLI imports ``holon.daemon.process`` (the pid and state
files) and ``holon.daemon.deletion`` without loading the whole daemon, and ``holon serve`` first
checks, in a fraction of a second, what can make it refuse to start
(``holon.daemon.process.preflight``), before it loads the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holon import lazy

if TYPE_CHECKING:
    from holon.daemon.core import Daemon

__all__ = ["Daemon"]


__getattr__ = lazy.exports(__name__, {"Daemon": "holon.daemon.core"})
