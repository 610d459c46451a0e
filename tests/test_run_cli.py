"""``holon run``, ``holon transcript`` and ``holon agent configure`` end to end: the real CLI in
subprocesses against a tmp home, talking to a scripted ``FakeLLM`` on 127.0.0.1 in this process.

Each ``holon run`` imports litellm (several seconds), so every test runs the model at most once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.turn_cli import Result, cli_env, db_rows, holon, make_home

from holon.runtime.providers.local import local_model_available
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

NOLOCAL = Path(__file__).parent / "helpers" / "turn_nolocal.py"


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _one_error_line(r: Result, code: int) -> str:
    assert r.code == code, r
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("holon: error: "), r
    return lines[0]


def _types(home: Path) -> list[str]:
    return [t for (t,) in db_rows(home, "SELECT type FROM events ORDER BY seq")]


# --- run --json, transcript ------------------------------------------------------------------


def test_run_json_briefs_and_transcript(tmp_path: Path) -> None:
    report = "Notes tidied; checked with echo."
    script = [
        {
            "tool_calls": [{"name": "create_work_item", "arguments": {"title": "Tidy notes", "objective": "tidy"}}],
            "usage": _usage(100, 10),
        },
        {
            "content": "Checking.",
            "tool_calls": [{"name": "run_command", "arguments": {"command": "echo tidy-ok", "wait_s": 20}}],
            "usage": _usage(200, 20, cached=50),
        },
        {"tool_calls": [{"name": "complete_work_item", "arguments": {"report": report}}], "usage": _usage(300, 30)},
        {"content": "All tidy.", "usage": _usage(400, 40)},
    ]
    with FakeLLM(script, strict=True) as fake:
        home = make_home(tmp_path, "bob", "--model", "openai/fake", "--api-base", fake.url)
        r = holon(home, "run", "bob", "Tidy my notes, please.", "--json")
        requests = fake.requests

    assert r.code == 0, r
    data = r.json()
    assert set(data) >= {"turn_id", "outcome", "reply", "reason", "rounds", "tool_calls", "usage", "cost_usd", "briefs"}
    assert "turns" not in data  # one turn only
    assert data["turn_id"].startswith("turn_")
    assert data["outcome"] == "completed" and data["reason"] is None
    assert data["reply"] == "All tidy."
    assert data["rounds"] == 4 and data["tool_calls"] == 3
    # Usage is the sum of what the model reported over the turn's rounds.
    assert data["usage"] == {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100, "cached_tokens": 50}
    assert data["briefs"] == [{"kind": "result", "text": f"Completed: Tidy notes\n\n{report}"}]

    assert len(requests) == 4
    assert all(b["model"] == "fake" and b.get("tools") for b in requests)
    tool_names = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"run_command", "create_work_item", "complete_work_item"} <= tool_names
    # The second request carries the first round: its call and the tool's answer.
    tool_msgs = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and "created work item" in tool_msgs[0]["content"]
    last_tools = [m["content"] for m in requests[2]["messages"] if m["role"] == "tool"]
    assert any("exit code: 0" in c and "tidy-ok" in c for c in last_tools), last_tools

    # The ledger agrees with what was printed.
    (settled,) = [json.loads(p) for (p,) in db_rows(home, "SELECT payload FROM events WHERE type = 'turn.settled'")]
    assert settled["turn_id"] == data["turn_id"] and settled["usage"] == data["usage"]
    assert settled["rounds"] == 4 and settled["tool_calls"] == 3 and settled["reply"] == "All tidy."

    t = holon(home, "transcript", "bob")
    assert t.code == 0, t
    text = t.out
    for needle in (
        "operator > Tidy my notes, please.",
        "-> create_work_item",
        "<- create_work_item ok: created work item",
        '-> run_command {"command": "echo tidy-ok"',
        "<- run_command ok: exit code: 0 tidy-ok",
        "-> complete_work_item",
        "[brief result] Completed: Tidy notes",
        "agent > All tidy.",
        "-- completed; 4 rounds, 3 tool calls",
    ):
        assert needle in text, (needle, text)
    assert text.index("operator >") < text.index("-> create_work_item") < text.index("agent > All tidy.")

    tj = holon(home, "transcript", "bob", "--last", "3", "--json")
    assert tj.code == 0, tj
    entries = json.loads(tj.out)
    assert isinstance(entries, list) and all(isinstance(e, dict) and "line" in e and "seq" in e for e in entries)
    assert [e["seq"] for e in entries] == sorted(e["seq"] for e in entries)
    kinds = [e["type"] for e in entries]
    assert kinds[0] == "message.received" and kinds[-1] == "turn.settled"
    assert kinds.count("tool.called") == 3 and kinds.count("tool.resulted") == 3
    assert kinds.count("brief.delivered") == 1
    assert entries[0]["from"] == "operator" and entries[0]["text"] == "Tidy my notes, please."
    calls = [e for e in entries if e["type"] == "tool.called"]
    assert [c["tool"] for c in calls] == ["create_work_item", "run_command", "complete_work_item"]
    assert json.loads(calls[1]["arguments"]) == {"command": "echo tidy-ok", "wait_s": 20}
    results = [e for e in entries if e["type"] == "tool.resulted"]
    assert [x["status"] for x in results] == ["ok", "ok", "ok"]
    assert "tidy-ok" in results[1]["output"]
    assert entries[-1]["outcome"] == "completed" and entries[-1]["reply"] == "All tidy."
    assert {e["turn_id"] for e in entries[1:]} == {data["turn_id"]}


# --- agent configure ---------------------------------------------------------------------------


def test_configure_is_shown_and_used_by_the_next_run(tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdefXYZ"
    # The operator allows the variable (agents may name only allowed ones: RFC 0002).
    allowed = cli_env(HOLON_MODEL_ALLOWED_KEY_ENVS='["TURN_TEST_API_KEY"]')
    with FakeLLM([{"content": "from the first"}]) as first, FakeLLM([{"content": "from the second"}]) as second:
        home = make_home(tmp_path, "bob", "--model", "openai/fake", "--api-base", first.url)
        refused = holon(home, "agent", "configure", "bob", "--api-key-env", "TURN_TEST_API_KEY")
        assert refused.code == 2 and "allowed_key_envs" in refused.err, refused
        c = holon(
            home,
            "agent",
            "configure",
            "bob",
            "--model",
            "openai/second-model",
            "--api-base",
            second.url,
            "--api-key-env",
            "TURN_TEST_API_KEY",
            "--temperature",
            "0.5",
            "--max-output-tokens",
            "123",
            "--json",
            env=allowed,
        )
        assert c.code == 0, c
        expected = {
            "model": "openai/second-model",
            "api_base": second.url,
            "api_key_env": "TURN_TEST_API_KEY",
            "temperature": 0.5,
            "max_output_tokens": 123,
        }
        assert json.loads(c.out)["settings"] == expected
        shown = holon(home, "agent", "show", "bob", "--json")
        assert shown.code == 0, shown
        assert json.loads(shown.out)["agent"]["settings"] == expected

        # A secret where a variable name belongs, or a secret-looking setting: refused, not recorded.
        before = _types(home)
        for bad in (["--api-key-env", secret], ["--unset", "api_key"]):
            err = _one_error_line(holon(home, "agent", "configure", "bob", *bad), 2)
            assert secret not in err
        assert _types(home) == before
        assert json.loads(holon(home, "agent", "show", "bob", "--json").out)["agent"]["settings"] == expected

        # The next run (plain text output) talks to the second server with the key from the environment.
        r = holon(home, "run", "bob", "Who answers?", env={**allowed, "TURN_TEST_API_KEY": secret})
        assert r.code == 0, r
        assert r.out == "from the second\n"
        assert first.requests == []
        (body,) = second.requests
        assert body["model"] == "second-model"
        assert body["temperature"] == 0.5 and body["max_tokens"] == 123
        assert second.request_headers[0]["authorization"] == f"Bearer {secret}"

    payloads = [p for (p,) in db_rows(home, "SELECT payload FROM events")]
    assert not [p for p in payloads if secret in p]
    configured = [
        json.loads(p)["changes"] for (p,) in db_rows(home, "SELECT payload FROM events WHERE type = 'agent.configured'")
    ]
    assert configured == [expected]  # the refused attempts left no trace
    for log in (home / "logs").glob("*"):
        assert secret not in log.read_text(errors="replace"), log

    u = holon(home, "agent", "configure", "bob", "--unset", "temperature", "--unset", "max_output_tokens", "--json")
    assert u.code == 0, u
    assert json.loads(u.out)["settings"] == {
        k: v for k, v in expected.items() if k in ("model", "api_base", "api_key_env")
    }


def test_max_rounds_reached_fails_the_turn_with_exit_1(tmp_path: Path) -> None:
    def script(body: dict[str, Any]) -> dict[str, Any]:
        return {"tool_calls": [{"name": "list_work_items", "arguments": {}}]}  # never a final answer

    with FakeLLM(script) as fake:
        home = make_home(tmp_path, "bob", "--model", "openai/fake", "--api-base", fake.url)
        c = holon(home, "agent", "configure", "bob", "--max-rounds", "1")
        assert c.code == 0, c
        r = holon(home, "run", "bob", "Loop forever.", "--json")
        asked = len(fake.requests)

    assert r.code == 1, r
    data = r.json()
    assert data["outcome"] == "failed"
    assert data["rounds"] == 1 and data["tool_calls"] == 1
    assert data["reason"] == "no final answer after 1 model rounds"
    assert data["reply"] is None
    assert asked == 1  # the limit is checked before anything more is spent
    show = json.loads(holon(home, "agent", "show", "bob", "--json").out)["agent"]
    assert show["last_outcome"] == "failed" and show["pending_inputs"] == []  # not re-queued: not transient
    assert show["settings"]["max_rounds"] == 1


# --- no model at all -------------------------------------------------------------------------


def test_no_model_configured_and_no_local_model(tmp_path: Path) -> None:
    home = make_home(tmp_path, "bob")
    args = ("--home", str(home), "run", "bob", "hello?", "--json")
    if local_model_available():
        # Installed here: the real CLI entry point with the local model masked.
        proc = subprocess.run(
            [sys.executable, str(NOLOCAL), *args],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=120,
            check=False,
        )
        r = Result(proc.returncode, proc.stdout, proc.stderr)
    else:
        r = holon(home, *args[2:])
    line = _one_error_line(r, 6)
    assert "no model is configured" in line
    assert "holon agent configure" in line and "--model" in line  # what to do ...
    assert "pip install 'holon[local]'" in line  # ... or the other way
    assert r.out == ""
    # Nothing was recorded: no input that a later run would pick up unasked.
    stats = json.loads(holon(home, "ledger", "stats", "--json").out)
    assert stats["by_type"].keys() == {"agent.created"}
    tail = holon(home, "ledger", "tail", "--json")
    assert [json.loads(x)["type"] for x in tail.out.splitlines()] == ["agent.created"]
    show = json.loads(holon(home, "agent", "show", "bob", "--json").out)["agent"]
    assert show["pending_inputs"] == [] and show["turns"] == 0 and show["status"] == "idle"
