"""Every start-up failure of ``holon serve`` and ``holon daemon start`` names its cause (issue 15).

Each case is a home the daemon cannot run (a broken or invalid config file, no home, a home it may
not write to, a token variable that is unset while listening off loopback, no token at all off
loopback, a foreign or a damaged database). Both commands run as real subprocesses; each must exit non-zero
with one ``holon: error: ...`` line naming the cause (``daemon start`` relaying what its detached
daemon said), no traceback, and no daemon left running. ``holon serve`` may also print log
records as JSON lines (its stderr is not a terminal here); those are not the cause line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.turn_cli import REPO, cli_env, holon_argv, quick_home, wait_for

from holon.config import HomePaths
from holon.daemon.process import read_state

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], Path]
    """Builds the home under the given directory; returns it."""
    code: int
    says: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    read_only: bool = False
    """Make the home read-only: its modes (0555/0444), or for root, who may write anyway, a
    read-only bind mount in a mount namespace of the command's own (a volume mounted ``:ro``)."""


def _home(root: Path) -> Path:
    return quick_home(root, "alice", model="openai/fake", api_base="http://127.0.0.1:9/v1")


def _broken_toml(root: Path) -> Path:
    home = _home(root)
    with (home / "holon.toml").open("a", encoding="utf-8") as fh:
        fh.write("\n[api\nport = \n")
    return home


def _invalid_value(root: Path) -> Path:
    home = _home(root)
    (home / "holon.toml").write_text("[daemon]\ngrace_s = -1\n", encoding="utf-8")
    return home


def _malformed_db(root: Path) -> Path:
    """A database whose header is fine and whose pages are not: found only by opening it, in the
    daemon process ``daemon start`` spawned, which must relay the cause."""
    home = _home(root)
    for extra in ("holon.db-wal", "holon.db-shm"):
        (home / extra).unlink(missing_ok=True)
    data = bytearray((home / "holon.db").read_bytes())
    data[4096:] = b"\x5a" * (len(data) - 4096)
    (home / "holon.db").write_bytes(bytes(data))
    return home


def _no_home(root: Path) -> Path:
    (root / "empty").mkdir()
    return root / "empty"


def _damaged_db(root: Path) -> Path:
    home = _home(root)
    for extra in ("holon.db-wal", "holon.db-shm"):
        (home / extra).unlink(missing_ok=True)
    (home / "holon.db").write_bytes(b"this is not a database, it was overwritten by mistake\n" * 100)
    return home


CASES = {
    "broken toml": Case(_broken_toml, 2, ("holon.toml", "not valid TOML")),
    "invalid value": Case(_invalid_value, 2, ("daemon.grace_s", "holon.toml")),
    "no home": Case(_no_home, 3, ("no holon home at", "holon init")),
    "foreign database": Case(_damaged_db, 5, ("holon.db", "not a SQLite database")),
    "damaged database": Case(_malformed_db, 5, ("holon.db", "is damaged", "backup")),
    "token variable unset": Case(
        _home, 2, ("HOLON_TEST_TOKEN", "unset or empty"), env=(("HOLON_API_TOKEN_ENV", "HOLON_TEST_TOKEN"),),
        args=("--host", "0.0.0.0"),
    ),
    "no token off loopback": Case(_home, 2, ("refusing to listen on 0.0.0.0 without a token",), args=("--host", "0.0.0.0")),
    "unwritable home": Case(_home, 1, ("cannot write to", "--home"), read_only=True),
}  # fmt: skip


def _read_only(home: Path, argv: list[str]) -> list[str]:
    """``argv`` run so that ``home`` cannot be written to."""
    if os.geteuid() != 0:
        for path in [home, *home.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        return argv
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--mount", "true"], check=False).returncode != 0:
        pytest.skip("running as root without mount namespaces: no way to make a home read-only")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, str(home), *argv]


def _home_processes(home: Path) -> list[int]:
    """Live processes whose command line names ``home`` (a daemon that outlived its error)."""
    pids = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (
                proc.name.isdigit()
                and str(home).encode() in (proc / "cmdline").read_bytes().split(b"\0")
                and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                pids.append(int(proc.name))
    return pids


def _cause_lines(err: str) -> list[str]:
    """stderr without log records (JSON lines): what is left is meant for the person."""
    out = []
    for line in err.splitlines():
        if not line.strip():
            continue
        with contextlib.suppress(ValueError):
            if isinstance(json.loads(line), dict):
                continue
        out.append(line)
    return out


@pytest.mark.parametrize("command", [("serve",), ("daemon", "start")], ids=["serve", "daemon-start"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_start_up_failure_prints_its_cause(tmp_path: Path, name: str, command: tuple[str, ...]) -> None:
    case = CASES[name]
    home = case.make(tmp_path)
    argv = holon_argv("--home", home, *command, "--port", "0", *case.args)
    if case.read_only:
        argv = _read_only(home, argv)
    env = cli_env(HOLON_LOGGING_CONSOLE="auto", **dict(case.env))  # as run by hand or by systemd
    env.pop("HOLON_TEST_TOKEN", None)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
        assert proc.returncode == case.code, (proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        lines = _cause_lines(proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("holon: error: "), proc.stderr
        assert "command.failed" not in proc.stderr, "the cause twice: as the line and as a log record"
        for phrase in case.says:
            assert phrase in lines[0], (phrase, lines[0])
        wait_for("no daemon process of the home", lambda: not _home_processes(home), timeout=30)
        assert not read_state(HomePaths(home))["running"]
    finally:
        for path in [home, *home.rglob("*")] if home.exists() else []:
            with contextlib.suppress(OSError):
                path.chmod(0o700 if path.is_dir() else 0o600)
