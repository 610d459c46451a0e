"""Shared by the turn-loop tests: the real ``holon`` CLI in subprocesses, ledger reads, waiting.

Every subprocess gets an environment without the developer's ``HOLON_*`` variables and with
``HOLON_LEDGER_SYNCHRONOUS=NORMAL`` (no fsync per commit) and ``HOLON_LOGGING_CONSOLE=off``. Each
``holon run`` imports litellm (several seconds), so tests keep the number of runs small; cheap
commands (init, agent, ledger, transcript) do not import it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.wait import wait_for  # noqa: F401 (the turn tests import it from here)
from holon.config import load_settings, resolve_home
from holon.ledger import Event
from holon.projections import Store
from holon.runtime.tasks import process_identity, stop_orphan

REPO = Path(__file__).resolve().parents[2]
HOLON_SCRIPT = Path(sys.executable).with_name("holon")
TURN_HOST = Path(__file__).resolve().parent / "turn_host.py"


def cli_env(**extra: str) -> dict[str, str]:
    # Nor the runner's terminal size: pytest-xdist's workers set COLUMNS=80 LINES=24, which would
    # override a pty's own size (tests that want a width set it).
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_") and k not in ("COLUMNS", "LINES")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    # The storage the ``engine`` fixture chose (only it sets this in a test process): child
    # processes open the same ledger (RFC 0008, "A test module that starts processes ...").
    if url := os.environ.get("HOLON_STORAGE_URL"):
        env["HOLON_STORAGE_URL"] = url
    # `holon serve` logs JSON lines to a stderr that is not a terminal; a test that reads its pipe
    # only at the end would see the daemon block once the pipe is full. Log tests set it back.
    env["HOLON_LOGGING_CONSOLE"] = "off"
    env.update(extra)
    return env


def holon_argv(*args: str | Path) -> list[str]:
    """The console script when the venv has one (what users run), else ``python -m``."""
    head = [str(HOLON_SCRIPT)] if HOLON_SCRIPT.exists() else [sys.executable, "-m", "holon.cli.main"]
    return [*head, *map(str, args)]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code in (0, 1), self
        assert "Traceback" not in self.err, self
        return json.loads(self.out)


def holon(home: Path, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 180) -> Result:
    proc = subprocess.run(
        holon_argv("--home", home, *args),
        capture_output=True,
        text=True,
        env=env or cli_env(),
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env(), cwd=REPO
    )


def spawn_holon(home: Path, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return spawn(holon_argv("--home", home, *args), env)


def run_host(home: Path, *args: str, timeout: float = 180) -> dict[str, Any]:
    """Run ``turn_host.py`` (an AgentHost that recovers and runs until idle); its JSON report."""
    proc = subprocess.run(
        [sys.executable, str(TURN_HOST), str(home), *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def make_home(root: Path, agent: str, *create_args: str) -> Path:
    """``holon init`` and ``holon agent create AGENT ...``; returns the home."""
    home = root / "home"
    r = holon(home, "init")
    assert r.code == 0, r
    r = holon(home, "agent", "create", agent, *create_args)
    assert r.code == 0, r
    return home


def quick_home(root: Path, agent: str, *, storage: str = "", **settings: Any) -> Path:
    """What ``holon init`` + ``holon agent create AGENT`` do, in this process (no litellm, no logging
    set-up), for tests whose subject is not those commands: config file, folders, database, agent.
    ``storage``: the home's ``[storage] url`` in its config file (a PostgreSQL database)."""
    from holon.resources import default_config_text
    from holon.runtime.agents import create_agent

    paths = resolve_home(root / "home")
    for d in (paths.root, paths.logs, paths.agents):
        d.mkdir(parents=True, exist_ok=True)
    text = default_config_text()
    if storage:
        head, tail = text.split("[storage]", 1)
        text = head + "[storage]" + tail.replace('url = ""', f'url = "{storage}"', 1)
    paths.config.write_text(text, encoding="utf-8")
    with open_store(paths.root) as store:
        create_agent(store, agent, settings=settings)
    return paths.root


def kill_hard(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGKILL ``proc`` (as a crash would) and collect what it printed."""
    os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, out, err)
    return out, err


def command_processes(home: Path) -> list[str]:
    """The process identities (``pid:start:boot``) of every command the home's ledger started.

    (A command's own ``$$`` is no use from outside: confined, it runs in a PID namespace.)"""
    rows = db_rows(home, "SELECT payload FROM events WHERE type = 'command.started' ORDER BY seq")
    return [p for (raw,) in rows if (p := json.loads(raw).get("process"))]


def command_alive(identity: str) -> bool:
    """Whether the command's process group leader, that very process, still runs (not a zombie)."""
    pid = int(identity.split(":", 1)[0])
    if process_identity(pid) != identity:
        return False
    with contextlib.suppress(OSError, IndexError):
        return " z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3].lower()
    return False


def kill_group(home: Path) -> None:
    """Kill the process groups of the commands a killed holon left behind (cleanup, never a check)."""
    for identity in command_processes(home):
        stop_orphan(identity)


def db_rows(home: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Query the ledger read-only while another process may be writing it (on PostgreSQL when the
    ``engine`` fixture chose it: ``HOLON_STORAGE_URL``)."""
    if url := os.environ.get("HOLON_STORAGE_URL") or _configured_url(home):
        return _pg_rows(url, sql, params)
    db = home / "holon.db"
    if not db.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.OperationalError:
        return []
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        return []  # e.g. the schema is not there yet
    finally:
        conn.close()


def _configured_url(home: Path) -> str:
    """The home's ``[storage] url`` when its config file names PostgreSQL (``quick_home(storage=)``)."""
    try:
        url = tomllib.loads((home / "holon.toml").read_text(encoding="utf-8")).get("storage", {}).get("url", "")
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    return url if str(url).startswith("postgresql") else ""


def _pg_rows(url: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    from holon.ledger.pg.conn import pg_sql

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            return list(conn.execute(pg_sql(sql), params).fetchall())
    except psycopg.errors.UndefinedTable:
        return []  # the schema is not there yet


def event_types(home: Path) -> list[str]:
    return [t for (t,) in db_rows(home, "SELECT type FROM events ORDER BY seq")]


@contextlib.contextmanager
def open_store(home: Path) -> Iterator[Store]:
    """The home's ``Store``, in this process (only once no holon process is running in it)."""
    paths = resolve_home(home)
    store = Store.open(paths, load_settings(paths))
    try:
        yield store
    finally:
        store.close()


def all_events(home: Path) -> list[Event]:
    with open_store(home) as store:
        return list(store.ledger.read())


def text_of(store: Store, value: Any) -> str:
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or ""
    return resolved.text or resolved.preview


def assert_ledger_ok(home: Path) -> None:
    """``holon ledger verify --json`` and ``holon ledger replay --json`` both pass (run side by side)."""
    procs = {cmd: spawn_holon(home, "ledger", cmd, "--json") for cmd in ("verify", "replay")}
    for cmd, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (cmd, proc.returncode, out, err)
        data = json.loads(out)
        assert data["ok"] is True, (cmd, data)
        assert data["events"] > 0, (cmd, data)
        if cmd == "replay":
            assert data["mismatches"] == 0, data


def messages_text(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, content as text) of each message of a chat-completions request body."""
    out = []
    for m in request.get("messages", []):
        content = m.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append((str(m.get("role")), content or ""))
    return out
