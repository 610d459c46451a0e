"""Where the daemon's log goes (issue 15, "Runs where daemons run").

Under systemd or Docker, ``holon serve`` runs in the foreground with stderr collected by the
supervisor, not a terminal: every log record goes there as a JSON line as well as to
``<home>/logs/holon.log``. ``holon daemon start`` (detached, stderr a file beside the log) keeps
writing the log file only. ``[logging] console`` (or ``HOLON_LOGGING_CONSOLE``) forces either way.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.daemon import fake_home, state
from helpers.turn_cli import cli_env, holon, holon_argv, spawn_holon, wait_for

from holon.logs import console_mode
from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.timeout(120)


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                out.append(record)
    return out


def _serve_and_stop(home: Path, env: dict[str, str] | None = None) -> str:
    """``holon serve`` with stderr piped, until it runs, then SIGTERM; its stderr."""
    proc = spawn_holon(home, "serve", "--port", "0", env=env or cli_env(HOLON_LOGGING_CONSOLE="auto"))
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_console_mode() -> None:
    assert console_mode("auto", tty=True) == "pretty"
    assert console_mode("auto", service=True, tty=True) == "pretty"
    assert console_mode("auto", service=True, tty=False) == "json"
    assert console_mode("auto", tty=False) == "off"  # any other command, e.g. piped
    for forced in ("json", "pretty", "off"):
        assert console_mode(forced, service=True, tty=False) == forced
        assert console_mode(forced, tty=True) == forced


@pytest.mark.slow
def test_serve_writes_json_lines_to_stderr_when_it_is_not_a_terminal(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
        err = _serve_and_stop(home)
    records = _json_lines(err)
    events = [r.get("event") for r in records]
    assert "daemon.started" in events and "daemon.stopped" in events, err
    assert all({"event", "level", "timestamp", "logger"} <= r.keys() for r in records), records
    in_file = [r.get("event") for r in _json_lines((home / "logs" / "holon.log").read_text(encoding="utf-8"))]
    assert "daemon.started" in in_file and "daemon.stopped" in in_file  # and still in the file


@pytest.mark.slow
def test_the_switch_turns_stderr_off(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
        err = _serve_and_stop(home, env=cli_env(HOLON_LOGGING_CONSOLE="off"))
    assert _json_lines(err) == [], err
    assert "daemon.stopped" in (home / "logs" / "holon.log").read_text(encoding="utf-8")


@pytest.mark.slow
def test_daemon_start_writes_the_log_file_only(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
        try:
            r = holon(home, "daemon", "start", "--port", "0", env=cli_env(HOLON_LOGGING_CONSOLE="auto"))
            assert r.code == 0, r
        finally:
            s = holon(home, "daemon", "stop")
        assert s.code == 0, s
    out = (home / "logs" / "daemon.out").read_text(encoding="utf-8")
    assert _json_lines(out) == [], out
    assert not any(line.startswith("{") for line in out.splitlines()), out
    assert "daemon.started" in (home / "logs" / "holon.log").read_text(encoding="utf-8")
    assert r.err == "" or not _json_lines(r.err), r.err


@pytest.mark.slow
def test_serve_help_shows_the_init_flag_but_not_the_internal_one() -> None:
    r = subprocess.run(
        holon_argv("serve", "--help"),
        capture_output=True, text=True, env=cli_env(), check=False, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "--init" in r.stdout and "--detached" not in r.stdout
