"""A busy port names its cause (issue 15, item 3), in real subprocesses.

The test holds a listening socket on 127.0.0.1; ``holon serve`` and ``holon daemon start`` on that
port fail with one line naming ``127.0.0.1:<port>``, saying it is in use and how to pick another,
exit code 2, no traceback. The check runs before the daemon's start-up: it never wrote its state
file (``starting``), and no daemon process of the home is left.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemon import fake_home
from helpers.turn_cli import holon, wait_for

from holon.config import HomePaths
from holon.daemon.process import read_state, state_file
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port the test listens on (as another program would) for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _home_processes(home: Path) -> list[int]:
    """Pids of live processes whose command line names ``home`` (a daemon that outlived its error)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
            if str(home).encode() in argv and stat.rsplit(")", 1)[1].split()[0] != "Z":
                pids.append(int(proc.name))
    return pids


def _assert_names_the_busy_port(err: str, port: int) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0], err
    assert "--port N" in lines[0] and "[api] port" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", [("serve",), ("daemon", "start")])
def test_a_busy_port_is_named_before_the_start_up(tmp_path: Path, busy_port: int, command: tuple[str, ...]) -> None:
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
    r = holon(home, *command, "--host", "127.0.0.1", "--port", str(busy_port), timeout=90)
    assert r.code == 2, r
    _assert_names_the_busy_port(r.err, busy_port)
    assert not state_file(HomePaths(home)).exists(), "the daemon began its start-up before checking the port"
    wait_for("no daemon process of the home", lambda: not _home_processes(home), timeout=30)
    assert not read_state(HomePaths(home))["running"]


def test_serve_exits_early_but_cleanly_after_sigterm(tmp_path: Path) -> None:
    """``holon serve`` skips the interpreter's teardown after a clean stop (issue 15, item 10): the
    exit code, the final state, the last log line and its output are all still there."""
    import json
    import signal

    from helpers.daemon import state
    from helpers.turn_cli import spawn_holon

    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
    proc = spawn_holon(home, "serve", "--port", "0")
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert state(home)["state"] == "stopped"
        last = (home / "logs" / "holon.log").read_text(encoding="utf-8").strip().splitlines()[-1]
        assert json.loads(last)["event"] == "daemon.stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
