"""The CLI is a client of the running daemon (issue 15 item 2, "One way in").

A real daemon (``holon serve`` in a subprocess) on a loopback fake model, the real ``holon`` CLI
in subprocesses. With the daemon running, every command that changes or reads an agent goes
through its HTTP API: shown by the daemon refusing a wrong token (each routed command then fails
with the 401 message, exit 2), by writes the API sees at once, and by ``holon run`` no longer
refusing. Stopped, the same commands run in-process and print the same output, exit codes
included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest
from helpers.daemon import state
from helpers.turn_cli import cli_env, holon, holon_argv, quick_home, spawn_holon, wait_for

from holon.api.server import free_port
from holon.api.token import read_token
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def _last(body: dict[str, Any], role: str) -> dict[str, Any]:
    return next((m for m in reversed(body["messages"]) if m.get("role") == role), {})


def _model(body: dict[str, Any]) -> dict[str, Any]:
    """Echoes the operator; "use a tool" gets a memory_search call first; "fail" a refusal."""
    if body["messages"][-1].get("role") == "tool":
        return {"content": "searched, all done"}
    text = str(_last(body, "user").get("content") or "")
    if "use a tool" in text:
        return {"tool_calls": [{"name": "memory_search", "arguments": {"query": "hello"}}]}
    if "please fail" in text:
        return {"error": 400, "message": "the model refuses this request"}
    return {"content": f"echo: {text.splitlines()[-1][-60:]}", "chunk_delay": 0.01}


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(_model) as f:
        yield f


@pytest.fixture
def home(tmp_path: Path, fake: FakeLLM) -> Path:
    return quick_home(tmp_path, "alice", model="openai/fake", api_base=fake.url)


class Daemon:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Daemon:
        self.proc = spawn_holon(self.home, "serve", "--port", str(self.port))
        wait_for("the daemon to run", lambda: state(self.home).get("state") == "running", proc=self.proc, timeout=90)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate(timeout=10)
        self.proc = None

    def api(self) -> httpx.Client:
        token = read_token(self.home)
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    d = Daemon(home).start()
    try:
        yield d
    finally:
        d.stop()


#: Reads of every routed group: run with the daemon, then without; the output must be the same.
READS: list[tuple[str, ...]] = [
    ("agent", "list", "--json"),
    ("agent", "show", "alice"),
    ("agent", "schedule", "alice", "--json"),
    ("transcript", "alice", "--json"),
    ("context", "show", "alice", "--json"),
    ("memory", "get", "alice", "file:agent/self.md", "--json"),
    ("memory", "inspect", "--json"),
    ("memory", "export"),
    ("proposals", "list", "--status", "all", "--json"),
]

#: Failures, the same way in both modes: (args, exit code, text on stderr).
FAILURES: list[tuple[tuple[str, ...], int, str]] = [
    (("agent", "configure", "nobody", "--temperature", "0.5"), 3, "nobody"),
    (("memory", "search", "nobody", "x"), 3, "nobody"),
    (("agent", "create", "alice"), 4, "alice"),
    (("agent", "schedule", "alice", "--add", "every 5x"), 2, "use 'every"),
    (("proposals", "show", "p-nope"), 3, "p-nope"),
]


def _outputs(home: Path) -> dict[tuple[str, ...], str]:
    out = {}
    for args in READS:
        r = holon(home, *args)
        assert r.code == 0 and "Traceback" not in r.err, (args, r)
        out[args] = r.out
    return out


def _failures(home: Path) -> dict[tuple[str, ...], tuple[int, str]]:
    seen = {}
    for args, code, text in FAILURES:
        r = holon(home, *args)
        assert r.code == code and text in r.err and "Traceback" not in r.err, (args, r)
        assert len(r.err.strip().splitlines()) == 1, (args, r.err)
        seen[args] = (r.code, r.err)
    return seen


def test_every_routed_command_goes_through_the_daemon_and_prints_the_same(home: Path, daemon: Daemon) -> None:
    first = holon(home, "run", "alice", "hello there", "--json")
    assert first.code == 0, first  # was: exit 4, "a daemon is already running"
    assert first.json()["outcome"] == "completed" and first.json()["reply"] == "echo: hello there"

    # Writes: the daemon sees each at once.
    with daemon.api() as api:
        r = holon(home, "agent", "configure", "alice", "--temperature", "0.5", "--json")
        assert r.code == 0 and r.json()["settings"]["temperature"] == 0.5, r
        assert api.get("/v1/agents/alice").json()["agent"]["settings"]["temperature"] == 0.5
        r = holon(home, "agent", "create", "bob", "--json")
        assert r.code == 0 and r.json()["name"] == "bob", r
        assert holon(home, "agent", "create", "bob", "--exist-ok").out.startswith("agent bob already exists")
        assert holon(home, "agent", "pause", "bob").code == 0
        assert api.get("/v1/agents/bob/status").json()["state"] == "paused"
        paused = holon(home, "run", "bob", "are you there?", "--json")
        assert paused.code == 0 and paused.json() == {"outcome": None, "turns": []}, paused
        resumed = holon(home, "agent", "resume", "bob", "--json")
        assert resumed.code == 0 and "paused" not in resumed.json()["settings"], resumed
        added = holon(home, "agent", "schedule", "bob", "--add", "every 1d", "--prompt", "Daily.", "--json").json()
        listed = api.get("/v1/agents/bob/timers", params={"status": "scheduled"}).json()
        assert [t["timer_id"] for t in listed] == [added["timer_id"]]
        assert holon(home, "agent", "schedule", "bob", "--cancel", added["timer_id"]).code == 0
        assert api.get("/v1/agents/bob/timers", params={"status": "scheduled"}).json() == []
        hook = holon(home, "agent", "hook", "bob", "--json").json()
        assert hook["url"] == f"{daemon.url}{api.get('/v1/agents/bob/hook').json()['path']}"
        rotated = holon(home, "agent", "hook", "bob", "--rotate", "--json").json()
        assert rotated["rotated"] and rotated["path"] != hook["path"]
        assert api.get("/v1/agents/bob/hook").json()["path"] == rotated["path"]
        assert holon(home, "agent", "delete", "bob").code == 2  # not a terminal: --yes is required
        gone = holon(home, "agent", "delete", "bob", "--yes")
        assert gone.code == 0 and "deleted agent bob" in gone.out, gone
        assert api.get("/v1/agents/bob").status_code == 404
        retried = holon(home, "memory", "retry-jobs", "--json")
        assert retried.code == 0 and retried.json() == {"retried": 0}, retried
        # The search index catches up on the daemon's tick.
        wait_for(
            "the index",
            lambda: (
                api.get("/v1/agents/alice/memory/search", params={"q": "hello"}).json()["freshness"]["lag_events"] == 0
            ),
            timeout=30,
        )
    found = holon(home, "memory", "search", "alice", "hello", "--json")
    assert found.code == 0 and any("hello there" in h["snippet"] for h in found.json()["hits"]), found

    with_daemon, failures = _outputs(home), _failures(home)

    # Proof of the route: with a token the daemon does not know, each of them is refused.
    token = home / "api.token"
    real = token.read_text()
    token.write_text("not-the-token\n")
    try:
        for args in [("transcript", "alice"), ("memory", "search", "alice", "x"), ("run", "alice", "hi"),
                     ("agent", "pause", "alice")]:  # fmt: skip
            r = holon(home, *args)
            assert r.code == 2 and "refused the API token" in r.err, (args, r)
            assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r
    finally:
        token.write_text(real)

    daemon.stop()
    assert _outputs(home) == with_daemon
    assert _failures(home) == failures
    hits = holon(home, "memory", "search", "alice", "hello", "--json").json()["hits"]
    assert hits == found.json()["hits"]


def test_holon_run_through_the_daemon_streams_the_turn_and_settles(home: Path, daemon: Daemon) -> None:
    argv = holon_argv("--home", home, "run", "alice", "please use a tool")
    child = pexpect.spawn(argv[0], argv[1:], env=cli_env(), encoding="utf-8", timeout=60, dimensions=(40, 160))
    try:
        child.expect(r"-> memory_search")  # live, on the terminal: tool calls as they happen
        child.expect(r"<- ok \(\d+ ms\)")
        child.expect("searched, all done")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before

    r = holon(home, "run", "alice", "please fail", "--json")
    assert r.code == 1 and r.json()["outcome"] == "failed" and r.json()["reason"], r
    text = holon(home, "run", "alice", "please fail")
    assert text.code == 1 and "failed" in text.err and "Traceback" not in text.err, text

    idle = holon(home, "run", "alice", "once more", "--until-idle", "--json")
    assert idle.code == 0 and idle.json()["reply"] == "echo: once more", idle

    daemon.stop()  # the same without a daemon: in-process, same exit codes and documents
    here = holon(home, "run", "alice", "please fail", "--json")
    assert here.code == 1 and here.json()["outcome"] == "failed", here
    assert set(here.json()) == set(r.json())
    ok = holon(home, "run", "alice", "once more", "--until-idle", "--json")
    assert ok.code == 0 and set(ok.json()) == set(idle.json()) and ok.json()["reply"] == "echo: once more"

    # pause, resume and delete in-process too
    assert holon(home, "agent", "pause", "alice").out.startswith("paused alice")
    assert holon(home, "run", "alice", "are you there?", "--json").json() == {"outcome": None, "turns": []}
    assert holon(home, "agent", "resume", "alice").out.startswith("resumed alice")
    gone = holon(home, "agent", "delete", "alice", "--yes", "--json")
    assert gone.code == 0 and gone.json()["deleted"] == "alice", gone
    assert not (home / "agents" / "alice").exists()
    assert holon(home, "agent", "show", "alice").code == 3


def test_a_daemon_that_does_not_answer_is_one_clear_line(home: Path) -> None:
    """The state file names a live daemon whose API is gone (hung, or stopping)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        run = home / "run"
        run.mkdir(exist_ok=True)
        (run / "daemon.pid").write_text(str(sleeper.pid))
        dead = f"http://127.0.0.1:{free_port()}"
        (run / "daemon.json").write_text(json.dumps({"state": "running", "pid": sleeper.pid, "api": dead}))
        (home / "api.token").write_text("some-token\n")
        os.chmod(home / "api.token", 0o600)
        for args in [("agent", "list"), ("run", "alice", "hi"), ("memory", "inspect")]:
            r = holon(home, *args)
            assert r.code == 1 and "does not answer" in r.err and "holon daemon status" in r.err, r
            assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r
    finally:
        sleeper.kill()
        sleeper.wait()


def test_bench_cli_reports_help_and_run_via_daemon() -> None:
    r = subprocess.run(
        holon_argv("bench", "cli", "--runs", "1", "--daemon-runs", "1", "--json"),
        capture_output=True, text=True, env=cli_env(), timeout=240, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    for key in ("help_s_median", "python_s_median", "help_ratio", "run_via_daemon_ms_p50", "api_post_ms_p50",
                "api_turn_ms_p50", "run_over_api_turn_ratio"):  # fmt: skip
        assert isinstance(report[key], (int, float)) and report[key] > 0, (key, report)
