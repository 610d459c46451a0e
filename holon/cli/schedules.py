"""The note a scheduling command leaves when nothing will act on the schedule yet.

Timers fire only inside a running daemon (``holon daemon start`` or ``holon serve``). A schedule
made while none runs is recorded in the ledger and fires, coalesced, once a daemon starts; until
then nothing happens, which a new user cannot guess. So the command says so on stderr (it still
succeeds: exit 0, and stdout stays the command's own output, ``--json`` included).
"""

from __future__ import annotations

import sys

from holon.cli.common import Ctx

__all__ = ["no_daemon_warning", "warn_unless_daemon"]


def no_daemon_warning(c: Ctx) -> str | None:
    """The warning for this home, or ``None`` when a daemon runs for it."""
    from holon.daemon.process import read_state

    if read_state(c.paths).get("running"):
        return None
    return (
        f"warning: no daemon is running for {c.paths.root}: this schedule will not fire until "
        "'holon daemon start' (missed firings are then coalesced into one)"
    )


def warn_unless_daemon(c: Ctx) -> None:
    """Print ``no_daemon_warning`` on stderr when there is one."""
    if (warning := no_daemon_warning(c)) is not None:
        sys.stderr.write(warning + "\n")
