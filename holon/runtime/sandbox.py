"""Confinement of agent commands: a scrubbed environment, namespaces, and a hardened daemon.

Three layers, each measured on the machines holon runs on (RFC 0002, "Commands run confined"):

* ``command_env``: a command sees an explicit pass-list of the daemon's environment (``PATH``,
  ``LANG``, ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR`` and the operator's ``[tools] pass_env``) and
  ``HOME`` set to the agent's home; never the rest (API keys, database URLs, whatever their name).
* ``Sandbox``: where the kernel allows unprivileged user namespaces (also as root), a command
  runs in new user, PID and mount namespaces: it sees only its own processes (so no
  ``/proc/<holon pid>/environ``), and the holon home is a read-only bind except the agent's own
  home, so it cannot rewrite ``operator.md``, other agents' memory or the ledger. The bind is
  made in an outer namespace and the command runs in an inner one, where the kernel locks those
  mounts: root inside cannot unmount or remount them. ``[tools] command_wrapper`` replaces this
  with the operator's own line (say ``bwrap``); ``isolation = "none"`` turns it off.
* ``harden_process``: ``prctl(PR_SET_DUMPABLE, 0)`` on the daemon, so processes of the same user
  without ``CAP_SYS_PTRACE`` (an unconfined command of a non-root daemon) cannot read its
  ``/proc/PID/environ`` or memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from holon.logs import get_logger

__all__ = ["PASS_ENV", "Sandbox", "command_env", "harden_process", "namespaces_available"]

log = get_logger("holon.sandbox")

PASS_ENV = ("PATH", "LANG", "TERM", "TZ", "TMPDIR")
"""Variables every command gets from the daemon's environment (plus ``LC_*``)."""
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_PR_SET_DUMPABLE = 4

Isolation = Literal["auto", "namespaces", "none"]

# Runs in the outer user+PID+mount namespace: make the holon home read-only except the agent's own
# home, then start the command in an inner user+mount namespace, where those mounts are locked.
_OUTER = r"""
set -e
home=$1; shift
while [ "$1" != -- ]; do
  if [ -d "$1" ]; then mount --bind "$1" "$1"; fi
  shift
done
shift
mount --rbind "$home" "$home"
mount -o remount,bind,ro "$home" "$home"
exec unshare --user --map-root-user --mount -- "$@"
"""
_NAMESPACES = (
    "unshare",
    "--user",
    "--map-root-user",
    "--mount",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
    "--",
)


def command_env(
    agent_home: Path | str, pass_env: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of an agent's command: a pass-list, never the daemon's own."""
    source = os.environ if environ is None else environ
    names = set(PASS_ENV) | set(pass_env)
    env = {k: v for k, v in source.items() if k in names or k.startswith("LC_")}
    env.setdefault("PATH", _DEFAULT_PATH)
    env["HOME"] = str(agent_home)
    return env


def harden_process() -> bool:
    """Make this process non-dumpable (``/proc/PID/environ`` unreadable to same-user processes
    without ``CAP_SYS_PTRACE``). Returns whether it worked; a no-op off Linux."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    return False


@functools.cache
def namespaces_available() -> bool:
    """Whether this machine lets holon start a command in the built-in namespaces (probed once)."""
    with tempfile.TemporaryDirectory(prefix="holon-probe-") as tmp:
        argv = [*_NAMESPACES, "bash", "-c", _OUTER, "holon-sandbox", tmp, tmp, "--", "true"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, check=False, env=command_env(tmp))
            ok = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
    if not ok:
        log.warning("namespaces unavailable", probe=" ".join(_NAMESPACES[:-1]))
    return ok


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What a command runs inside: ``prefix(agent_home)`` goes in front of ``bash -c CMD``."""

    holon_home: Path
    isolation: Isolation = "auto"
    wrapper: str = ""

    @property
    def mode(self) -> Literal["wrapper", "namespaces", "none"]:
        if self.wrapper.strip():
            return "wrapper"
        if self.isolation == "none":
            return "none"
        return "namespaces" if namespaces_available() else "none"

    @property
    def warning(self) -> str | None:
        """Why commands run unconfined when the operator did not ask for that (for logs and status)."""
        if self.mode == "none" and self.isolation == "auto":
            return (
                "run_command runs unconfined: this machine refuses user namespaces (unshare --user); "
                "commands see the holon home writable and holon's processes. Set [tools] command_wrapper "
                "(e.g. a bwrap line) or allow unprivileged user namespaces."
            )
        return None

    @property
    def refusal(self) -> str | None:
        """Why no command may run at all (``isolation = "namespaces"`` on a machine without them)."""
        if self.isolation == "namespaces" and self.mode == "none":
            return "run_command is disabled: [tools] isolation = 'namespaces' but this machine refuses user namespaces"
        return None

    def prefix(self, writable: Sequence[Path]) -> list[str]:
        """The argv that goes before ``bash -c CMD``; ``writable``: the agent's home and workspace,
        the only parts of the holon home a confined command may write."""
        match self.mode:
            case "wrapper":
                return shlex.split(self.wrapper)
            case "namespaces":
                dirs = [str(d) for d in writable]
                return [*_NAMESPACES, "bash", "-c", _OUTER, "holon-sandbox", str(self.holon_home), *dirs, "--"]
            case _:
                return []
