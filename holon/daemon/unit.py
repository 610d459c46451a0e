"""The systemd user unit: ``contrib/holon.service``, filled in for this holon and a home.

``holon daemon install --user`` writes it to ``~/.config/systemd/user/holon.service``. The shipped
file is the template: its ``ExecStart=`` and ``Environment=HOLON_HOME=`` lines are replaced, the
rest (restart policy, hardening) is written as shipped, so there is one unit to read and review.
Everything here is a pure function of its arguments but ``holon_command`` and ``unit_path``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from holon.resources import systemd_unit_text

__all__ = ["NEXT_STEP", "UNIT_NAME", "holon_command", "render_unit", "systemd_quote", "unit_path"]

UNIT_NAME = "holon.service"
NEXT_STEP = "systemctl --user daemon-reload && systemctl --user enable --now holon"


def holon_command(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """The command that runs this very holon: the ``holon`` script the user ran, else the one beside
    the interpreter (a venv's, pipx's), else the interpreter with ``-m holon.cli.main``.

    Paths are made absolute but symlinks are kept: a venv's ``python`` is a symlink whose target
    would lose the venv."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = executable or sys.executable
    for candidate in (Path(argv0), Path(executable).with_name("holon")):
        if candidate.name == "holon" and candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate.absolute())]
    return [str(Path(executable).absolute()), "-m", "holon.cli.main"]


def systemd_quote(word: str) -> str:
    """``word`` as one argument in a unit file: ``%`` (specifiers) and ``$`` (variables) escaped,
    double-quoted with ``\\`` and ``"`` escaped when it holds blanks or quotes."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not any(c.isspace() or c in "\"'\\;" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(command: Sequence[str], home: Path, template: str | None = None) -> str:
    """The unit that runs ``command serve`` for ``home`` (absolute), from ``template`` (the shipped one)."""
    text = systemd_unit_text() if template is None else template
    exec_start = "ExecStart=" + " ".join(systemd_quote(w) for w in [*command, "serve"])
    environment = "Environment=" + systemd_quote(f"HOLON_HOME={home}")
    replace = {"ExecStart=": exec_start, "Environment=HOLON_HOME=": environment}
    out, seen = [], set()
    for line in text.splitlines():
        prefix = next((p for p in replace if line.startswith(p)), None)
        if prefix is not None:
            seen.add(prefix)
        out.append(line if prefix is None else replace[prefix])
    if seen != set(replace):
        raise ValueError("the unit template has no ExecStart= or Environment=HOLON_HOME= line")
    return "\n".join(out) + "\n"


def unit_path(env: Mapping[str, str] | None = None) -> Path:
    """Where systemd looks for the user's own units: ``$XDG_CONFIG_HOME/systemd/user`` (``~/.config``)."""
    env = os.environ if env is None else env
    config = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(config).expanduser() / "systemd" / "user" / UNIT_NAME
