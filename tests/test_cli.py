"""End-to-end tests of the ``holon`` command line: the real CLI in subprocesses against a tmp home.

Every subprocess gets an environment without the developer's ``HOLON_*`` variables and with
``HOLON_LEDGER_SYNCHRONOUS=NORMAL`` (no fsync per commit). Read-only checks share one populated
home per module; tests that write or tamper work on a copy of it.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.resources import default_config_text

REPO = Path(__file__).resolve().parent.parent
EXIT_CODES = {0, 1, 2, 3, 4, 5}
HEAVY_MODULES = ("litellm", "sqlalchemy", "sqlmodel", "apscheduler", "tiktoken")


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    env.update(extra)
    return env


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code in (0, 1), self
        return json.loads(self.out)

    def json_lines(self) -> list[dict[str, Any]]:
        assert self.code == 0, self
        return [json.loads(line) for line in self.out.splitlines()]


def holon(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or cli_env(),
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def assert_error(r: Result, code: int, *needles: str) -> str:
    """``r`` failed with ``code`` and exactly one ``holon: error: ...`` line, no traceback."""
    assert r.code == code, r
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r
    assert lines[0].startswith("holon: error: "), r
    for needle in needles:
        assert needle in lines[0], r
    return lines[0]


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An initialised home with agents alice, bob and carol (events seq 1, 2, 3). Read-only."""
    home = tmp_path_factory.mktemp("cli") / "home"
    assert holon("--home", home, "init").code == 0
    for name in ("alice", "bob", "carol"):
        r = holon("--home", home, "agent", "create", name)
        assert r.code == 0, r
    return home


# --- init -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_init_creates_home_and_is_idempotent(tmp_path: Path) -> None:
    home = tmp_path / "h"
    r = holon("--home", home, "--json", "init")
    assert r.code == 0, r
    data = r.json()
    assert data == {
        "home": str(home),
        "db": str(home / "holon.db"),
        "config": str(home / "holon.toml"),
        "created": True,
    }
    assert (home / "holon.db").is_file()
    assert (home / "holon.toml").read_text(encoding="utf-8") == (REPO / "config" / "holon.toml").read_text(
        encoding="utf-8"
    )
    assert (home / "holon.toml").read_text(encoding="utf-8") == default_config_text()
    assert (home / "agents").is_dir()
    assert (home / "logs").is_dir()

    # A second run, with the options after the command name this time, changes nothing.
    (home / "holon.toml").write_text("# mine\n", encoding="utf-8")
    again = holon("init", "--home", home, "--json")
    assert again.code == 0, again
    assert again.json()["created"] is False
    assert (home / "holon.toml").read_text(encoding="utf-8") == "# mine\n"

    human = holon("--home", home, "init")
    assert human.code == 0 and "already initialised" in human.out


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["agent", "list"],
        ["agent", "create", "alice"],
        ["ledger", "verify"],
    ],
)
def test_commands_on_uninitialised_home_exit_3(tmp_path: Path, argv: list[str]) -> None:
    home = tmp_path / "never-initialised"
    assert_error(holon("--home", home, *argv), 3, "holon init")
    assert not home.exists(), "a read command must not create the home"


@pytest.mark.slow
def test_home_from_environment(tmp_path: Path) -> None:
    home = tmp_path / "envhome"
    env = cli_env(HOLON_HOME=str(home))
    assert holon("init", env=env).code == 0
    assert holon("--json", "agent", "create", "dora", env=env).json()["home"] == str(home / "agents" / "dora")


# --- agents ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_agent_create_list_show(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert holon("--home", home, "init").code == 0
    assert holon("--home", home, "agent", "list").out.startswith("no agents yet")

    r = holon("--home", home, "--json", "agent", "create", "alice")
    assert r.code == 0, r
    alice = r.json()
    assert alice["name"] == "alice"
    assert alice["template"] == "assistant"
    assert alice["status"] == "idle"
    assert alice["turns"] == 0
    assert alice["agent_id"].startswith("agt_")
    assert alice["home"] == str(home / "agents" / "alice")
    assert {"created_us", "last_event_us", "settings", "last_error"} <= alice.keys()

    agent_home = Path(alice["home"])
    for rel in ("AGENTS.md", "memory/self.md"):
        assert (agent_home / rel).is_file(), rel
        assert (agent_home / rel).read_bytes() == (REPO / "agent_home" / rel).read_bytes()
    # The operator's file lives once per home (init created it), not in each agent's home.
    assert not (agent_home / "memory" / "operator.md").exists()
    template = (REPO / "agent_home" / "memory" / "operator.md").read_bytes()
    assert (home / "memory" / "operator.md").read_bytes() == template

    human = holon("agent", "create", "bob", "--template", "assistant", "--home", home)
    assert human.code == 0, human
    assert human.out.startswith("created agent bob (agt_")

    listed = holon("agent", "list", "--home", home, "--json").json()
    assert [a["name"] for a in listed] == ["alice", "bob"]
    status = {"state": "idle", "detail": "", "next_wake_us": None, "next_wake": None, "model": "local",
              "internal": False}  # fmt: skip
    assert listed[0] == {**alice, **status}  # the agent's row with its one status (holon.runtime.status)

    shown = holon("--home", home, "--json", "agent", "show", "alice").json()
    assert set(shown) == {"agent", "status", "working_memory", "counts"}
    assert {k: shown["status"][k] for k in status} == status
    assert shown["agent"] == alice
    assert shown["counts"] == {"work_item": 0, "task": 0, "wait": 0, "timer": 0}
    assert isinstance(shown["working_memory"], dict)
    # By id as well as by name; the text form leads with name and id.
    human_show = holon("--home", home, "agent", "show", alice["agent_id"])
    assert human_show.code == 0 and human_show.out.startswith(f"alice ({alice['agent_id']})")


def event_count(home: Path) -> int:
    db = sqlite3.connect(home / "holon.db")
    try:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        db.close()


@pytest.mark.slow
def test_agent_errors(home_copy: Path) -> None:
    assert_error(holon("--home", home_copy, "agent", "create", "alice"), 4, "alice")
    assert_error(holon("--home", home_copy, "agent", "create", "../Bad Name"), 2, "Bad Name")
    assert_error(holon("--home", home_copy, "agent", "create", "zed", "--template", "nope"), 2, "nope")
    assert_error(holon("--home", home_copy, "agent", "show", "nobody"), 3, "nobody")
    assert_error(holon("--home", home_copy, "ledger", "tail", "--agent", "nobody"), 3, "nobody")
    # Nothing was appended, and no stray agent directories were left behind.
    assert event_count(home_copy) == 3
    assert sorted(p.name for p in (home_copy / "agents").iterdir()) == ["alice", "bob", "carol"]


# --- reading the ledger ---------------------------------------------------------------------


@pytest.mark.slow
def test_ledger_tail_json(populated: Path) -> None:
    events = holon("--home", populated, "--json", "ledger", "tail").json_lines()
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert {e["type"] for e in events} == {"agent.created"}
    assert [e["payload"]["name"] for e in events] == ["alice", "bob", "carol"]
    assert all(e["agent_id"].startswith("agt_") and len(e["hash"]) == 64 for e in events)
    ids = {e["payload"]["name"]: e["agent_id"] for e in events}
    assert len(set(ids.values())) == 3

    last = holon("--home", populated, "ledger", "tail", "-n", "1", "--json").json_lines()
    assert [e["seq"] for e in last] == [3]

    only_bob = holon("--home", populated, "--json", "ledger", "tail", "--agent", "bob").json_lines()
    assert [(e["seq"], e["agent_id"]) for e in only_bob] == [(2, ids["bob"])]

    human = holon("ledger", "tail", "--lines", "2", "--agent", ids["carol"], "--home", populated)
    assert human.code == 0, human
    (line,) = human.out.splitlines()
    assert line.split()[0] == "3" and "carol" in line and "agent.created" in line


@pytest.mark.slow
def test_ledger_show(populated: Path) -> None:
    event = holon("--home", populated, "--json", "ledger", "show", "2").json()
    assert event["seq"] == 2
    assert event["type"] == "agent.created"
    assert event["agent_id"].startswith("agt_")
    assert event["payload"]["name"] == "bob"
    assert {"id", "ts_us", "hash", "origin", "authority", "version"} <= event.keys()
    assert "blobs" not in event
    human = holon("ledger", "show", "2", "--home", populated)
    assert human.code == 0 and json.loads(human.out) == event

    assert_error(holon("--home", populated, "ledger", "show", "99"), 3, "99")


@pytest.mark.slow
def test_ledger_stats(populated: Path) -> None:
    stats = holon("--home", populated, "ledger", "stats", "--json").json()
    assert stats["events"] == 3
    assert stats["head_seq"] == 3
    assert set(stats["by_type"]) == {"agent.created"}
    assert stats["by_type"]["agent.created"]["count"] == 3
    assert stats["by_type"]["agent.created"]["payload_bytes"] > 0
    assert stats["blobs"] == 0 and stats["blobs_pruned"] == 0
    assert stats["db_bytes"] > 0
    human = holon("--home", populated, "ledger", "stats")
    assert human.code == 0 and "agent.created" in human.out


@pytest.mark.slow
def test_ledger_verify_and_replay_ok(populated: Path) -> None:
    r = holon("--home", populated, "--json", "ledger", "verify")
    assert r.code == 0, r
    assert r.json() == {"ok": True, "events": 3, "first_bad_seq": None}
    assert holon("--home", populated, "ledger", "verify").out.startswith("ok: 3 events")

    r = holon("--home", populated, "ledger", "replay", "--json")
    assert r.code == 0, r
    data = r.json()
    assert set(data) == {"ok", "events", "mismatches", "events_per_s"}
    assert data["ok"] is True
    assert data["events"] == 3
    assert data["mismatches"] == 0
    assert data["events_per_s"] > 0
    assert r.err == "", "--json: no progress lines"
    human = holon("--home", populated, "ledger", "replay")
    assert human.code == 0 and human.out.startswith("ok: 3 events replayed"), human
    progress = human.err.strip().splitlines()  # a pipe: plain lines, the last one saying done
    assert 1 <= len(progress) <= 3 and progress[-1].startswith("replaying the ledger: 3/3, done"), human.err


# --- tampering ------------------------------------------------------------------------------


@pytest.mark.slow
def test_verify_detects_a_tampered_event(home_copy: Path) -> None:
    db = sqlite3.connect(home_copy / "holon.db")
    try:
        db.execute("DROP TRIGGER events_no_update")
        payload = json.loads(db.execute("SELECT payload FROM events WHERE seq = 2").fetchone()[0])
        payload["template"] = "assistant "  # still a valid payload, but not the one that was hashed
        db.execute("UPDATE events SET payload = ? WHERE seq = 2", (json.dumps(payload),))
        db.commit()
    finally:
        db.close()

    r = holon("--home", home_copy, "--json", "ledger", "verify")
    assert r.code == 1, r
    assert "Traceback" not in r.err
    data = r.json()
    assert data["ok"] is False
    assert data["first_bad_seq"] == 2
    assert data["events"] == 3  # every row is read; the bad ones are listed
    assert [row["seq"] for row in data["bad_rows"]] == [2]
    assert {"ok", "events", "first_bad_seq"} <= data.keys()
    human = holon("--home", home_copy, "ledger", "verify")
    assert human.code == 1 and human.out.startswith("NOT OK")


@pytest.mark.slow
def test_replay_detects_a_tampered_projection(home_copy: Path) -> None:
    db = sqlite3.connect(home_copy / "holon.db")
    try:
        (alice,) = [
            key
            for key, state in db.execute("SELECT key, state FROM projection_rows WHERE kind = 'agent'")
            if json.loads(state)["name"] == "alice"
        ]
        state = json.loads(
            db.execute("SELECT state FROM projection_rows WHERE kind = 'agent' AND key = ?", (alice,)).fetchone()[0]
        )
        state["turns"] = 41
        n = db.execute(
            "UPDATE projection_rows SET state = ? WHERE kind = 'agent' AND key = ?", (json.dumps(state), alice)
        ).rowcount
        db.commit()
    finally:
        db.close()
    assert n == 1

    r = holon("--home", home_copy, "--json", "ledger", "replay")
    assert r.code == 1, r
    assert "Traceback" not in r.err
    data = r.json()
    assert data["ok"] is False
    assert data["mismatches"] >= 1
    assert {"ok", "events", "mismatches", "events_per_s"} <= data.keys()
    assert any(alice in example for example in data.get("examples", []))
    human = holon("--home", home_copy, "ledger", "replay")
    assert human.code == 1 and human.out.startswith("NOT OK") and alice in human.out


# --- follow ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_tail_follow_prints_new_events(home_copy: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "holon.cli.main", "--home", str(home_copy), "--json", "ledger", "tail", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=REPO,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    def next_event(timeout: float) -> dict[str, Any]:
        try:
            return json.loads(lines.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"no line from 'ledger tail --follow' within {timeout}s")

    try:
        assert [next_event(30)["seq"] for _ in range(3)] == [1, 2, 3]
        r = holon("--home", home_copy, "agent", "create", "dave")
        assert r.code == 0, r
        event = next_event(10)
        assert event["seq"] == 4
        assert event["type"] == "agent.created"
        assert event["payload"]["name"] == "dave"
        assert proc.poll() is None, "--follow exited on its own"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        if proc.stderr is not None:
            proc.stderr.close()
        if proc.stdout is not None:
            proc.stdout.close()


# --- blobs and prune ------------------------------------------------------------------------


@pytest.mark.slow
def test_prune_drops_blob_bodies_but_keeps_the_chain(home_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from holon.config import load_settings, resolve_home
    from holon.ledger import NewEvent
    from holon.ledger import events as ev
    from holon.projections import Store

    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    output = "".join(f"line {i:05d} of a long tool output\n" for i in range(1_700))
    assert len(output) >= 50_000
    paths = resolve_home(home_copy)
    with Store.open(paths, load_settings(paths)) as store:
        alice = store.agent("alice").agent_id
        (appended,) = store.append(
            NewEvent(
                alice,
                ev.ToolResulted(call_id="call_1", tool="run_command", status="ok", output=output, duration_ms=3.0),
                origin="tool:run_command",
            )
        )
    seq = str(appended.seq)

    before = holon("--home", home_copy, "--json", "ledger", "show", seq).json()
    assert before["type"] == "tool.resulted"
    blob = before["blobs"]["output"]
    assert blob["size"] == len(output.encode())
    assert blob["pruned"] is False

    # The default retention (90 days) keeps a fresh blob.
    kept = holon("--home", home_copy, "--json", "ledger", "prune").json()
    assert kept == {"pruned": 0, "retention_days": 90}

    r = holon("--home", home_copy, "ledger", "prune", "--older-than-days", "0", "--json")
    assert r.code == 0, r
    assert r.json() == {"pruned": 1, "retention_days": 0}

    after = holon("--home", home_copy, "--json", "ledger", "show", seq).json()
    assert after["blobs"]["output"] == {"hash": blob["hash"], "size": blob["size"], "pruned": True}
    assert {k: v for k, v in after.items() if k != "blobs"} == {k: v for k, v in before.items() if k != "blobs"}
    stats = holon("--home", home_copy, "--json", "ledger", "stats").json()
    assert stats["blobs"] == 1 and stats["blobs_pruned"] == 1 and stats["blob_bytes"] == 0
    assert stats["by_type"]["tool.resulted"]["count"] == 1

    assert holon("--home", home_copy, "--json", "ledger", "verify").json() == {
        "ok": True,
        "events": 4,
        "first_bad_seq": None,
    }


# --- configuration errors -------------------------------------------------------------------


@pytest.mark.slow
def test_unknown_config_key_is_one_line_exit_2(home_copy: Path) -> None:
    (home_copy / "holon.toml").write_text('[ledger]\nsynchronous = "NORMAL"\nbogus_key = 1\n', encoding="utf-8")
    line = assert_error(holon("--home", home_copy, "agent", "list"), 2, "bogus_key")
    assert "ledger.bogus_key" in line
    (home_copy / "holon.toml").write_text("[ledger\n", encoding="utf-8")
    assert_error(holon("--home", home_copy, "ledger", "stats"), 2, "holon.toml")


@pytest.mark.slow
def test_bad_environment_setting_is_exit_2(populated: Path) -> None:
    bogus = cli_env(HOLON_LEDGER_SYNCHRONOUS="bogus")
    assert_error(holon("--home", populated, "agent", "list", env=bogus), 2, "HOLON_LEDGER_SYNCHRONOUS")
    typo = cli_env(HOLON_LEDGER_SYNCRONOUS="NORMAL")
    assert_error(holon("--home", populated, "agent", "list", env=typo), 2, "HOLON_LEDGER_SYNCRONOUS")


# --- usage errors, help, lazy imports -------------------------------------------------------


USAGE_ERRORS = [
    ["ledger", "show", "abc"],
    ["ledger", "show", "-5"],
    ["ledger", "show", str(2**63)],
    ["ledger", "tail", "-n", "0"],
    ["ledger", "tail", "-n", str(2**64)],
    ["ledger", "prune", "--older-than-days", "-1"],
    ["ledger", "prune", "--older-than-days", str(10**12)],
    ["agent", "show"],
    ["agent", "create", "x", "--template"],
    ["bench", "ledger", "--events", "10"],
    ["no-such-command"],
    [],
]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["ledger", "show", "abc"], ["ledger", "tail", "-n", str(2**64)], ["agent"]])
def test_usage_errors_exit_2_without_traceback(populated: Path, argv: list[str]) -> None:
    r = holon("--home", populated, *argv)
    assert r.code == 2, r
    assert "Traceback" not in r.err and "Traceback" not in r.out
    # A usage error says what was wrong; a bare command group prints its help (typer: on stdout).
    assert r.err.strip() or "Usage" in r.out, r


@pytest.mark.slow
def test_usage_errors_in_process(
    populated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same handling through ``main(argv)``: every bad command line is exit 2, never an exception."""
    from holon.cli.main import main

    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    for argv in USAGE_ERRORS:
        code = main(["--home", str(populated), *argv] if argv else argv)
        out, err = capsys.readouterr()
        assert code == 2, (argv, out, err)
        assert "Traceback" not in out + err, argv
        assert err.strip() or "Usage" in out, (argv, out, err)


@pytest.mark.slow
def test_help_and_version() -> None:
    r = holon("--help")
    assert r.code == 0, r
    for word in ("init", "agent", "ledger", "bench", "--home", "--json"):
        assert word in r.out
    sub = holon("ledger", "--help")
    assert sub.code == 0 and "verify" in sub.out and "replay" in sub.out
    version = holon("--version")
    assert version.code == 0 and version.out.startswith("holon ")

    script = Path(sys.executable).with_name("holon")
    if script.exists():
        proc = subprocess.run([script, "--help"], capture_output=True, text=True, env=cli_env(), check=False)
        assert proc.returncode == 0 and "ledger" in proc.stdout


@pytest.mark.slow
def test_cli_import_is_lazy() -> None:
    code = (
        "import json, sys\n"
        "import holon.cli.main\n"
        f"print(json.dumps(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# --- bench ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_ledger_json(tmp_path: Path) -> None:
    r = holon("bench", "ledger", "--json", "--events", "3000", "--rounds", "1", env=cli_env(TMPDIR=str(tmp_path)))
    assert r.code == 0, r
    lines = r.out.strip().splitlines()
    assert len(lines) == 1, r.out
    data = json.loads(lines[0])
    for key in (
        "append_single_per_s",
        "append_batch_per_s",
        "raw_single_per_s",
        "raw_batch_per_s",
        "append_single_ratio",
        "append_batch_ratio",
        "replay_events_per_s",
    ):
        assert isinstance(data[key], int | float) and not isinstance(data[key], bool), key
        assert data[key] > 0, key
    assert data["replay_ok"] is True
    assert not list(tmp_path.glob("holon-bench-*")), "the bench leaves no scratch files behind"


# --- random input, in-process ---------------------------------------------------------------

_text = st.text(max_size=40)
_number_like = st.one_of(
    _text,
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0", "1", "3", "-1", "1e3", " 2", "0x10", "", "--help", "--json", "9" * 30]),
)
_name_like = st.one_of(
    _text,
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,70}", fullmatch=True),
    st.sampled_from(["alice", "", "-", "--json", "..", "a/b", "A", "a" * 64]),
)


def _argv(home: str) -> st.SearchStrategy[list[str]]:
    return st.one_of(
        st.tuples(st.sampled_from(["show", "create"]), _name_like).map(lambda t: ["agent", t[0], t[1]]),
        _number_like.map(lambda s: ["ledger", "show", s]),
        _number_like.map(lambda s: ["ledger", "tail", "-n", s]),
        _number_like.map(lambda s: ["ledger", "tail", f"--lines={s}"]),
        _name_like.map(lambda s: ["ledger", "tail", "--agent", s]),
        _number_like.map(lambda s: ["ledger", "prune", "--older-than-days", s]),
    ).flatmap(lambda argv: st.sampled_from([["--home", home, *argv], [*argv, "--home", home, "--json"]]))


def test_random_arguments_never_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from holon.cli.main import main

    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    monkeypatch.setenv("HOLON_LOGGING_FILE", "false")  # no log file handler per in-process run
    home = str(tmp_path / "home")
    assert main(["--home", home, "init"]) == 0
    assert main(["--home", home, "agent", "create", "alice"]) == 0
    capsys.readouterr()

    @settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(argv=_argv(home))
    def check(argv: list[str]) -> None:
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in EXIT_CODES, (argv, code, err)
        assert "Traceback" not in out and "Traceback" not in err, (argv, err)
        if code != 0:
            assert err.strip(), (argv, code)
        if code >= 3 or (code == 2 and err.startswith("holon: error:")):
            assert len(err.strip().splitlines()) == 1, (argv, err)

    check()
    # Whatever was thrown at it, the ledger is still sound.
    assert main(["--home", home, "--json", "ledger", "verify"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
