"""No stall: a real ``holon daemon`` (subprocess) goes on with queued inputs after a failed turn.

The first model call fails permanently (HTTP 400) while two more inputs arrive. The failed turn
settles its input ``rejected`` (with a brief to the operator), and the daemon runs the next turn
on the two queued inputs at once, without waiting for another input. The rejection shows in the
agent's state and in ``holon transcript``; ``holon ledger verify`` and ``replay`` still agree.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.daemon import agents, completed_inputs, fake_home, payloads, submit
from helpers.turn_cli import assert_ledger_ok, event_types, holon, wait_for

from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_the_daemon_runs_queued_inputs_after_a_rejected_turn_without_a_new_input(tmp_path: Path) -> None:
    release = threading.Event()
    calls = {"n": 0}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:  # held until the other inputs are queued, then a permanent failure
            release.wait(30)
            return {"error": 400, "message": "unsupported parameter: frobnicate"}
        return {"content": "Both answered."}

    with FakeLLM(script) as fake:
        home = fake_home(tmp_path, fake, "alice")
        r = holon(home, "daemon", "start", "--no-http", "--json")
        assert r.code == 0, r
        try:
            (first,) = submit(home, "alice", "first, the one that fails")
            wait_for("the first model call", lambda: calls["n"] >= 1 and "model.requested" in event_types(home))
            second, third = submit(home, "alice", "second question", "third question")
            release.set()
            wait_for("the queued inputs answered", lambda: {second, third} <= completed_inputs(home), timeout=60)
        finally:
            release.set()
            stopped = holon(home, "daemon", "stop", "--json")
        assert stopped.code == 0, stopped

    settled = [p for *_, p in payloads(home, "turn.settled")]
    assert [(p["outcome"], p["rejected"]) for p in settled] == [("failed", [first]), ("completed", [])]
    assert settled[0]["reason"].startswith("model error (bad_request)")
    started = [p["inputs"] for *_, p in payloads(home, "turn.started")]
    assert started == [[first], [second, third]]
    briefs = [p for *_, p in payloads(home, "brief.delivered")]
    assert len(briefs) == 1 and briefs[0]["kind"] == "error" and f"event:{first}" in briefs[0]["text"]
    alice = agents(home)["alice"]
    assert alice["rejected_inputs"] == [first] and alice["pending_inputs"] == []
    shown = holon(home, "transcript", "alice")
    assert shown.code == 0 and f"inputs [{first}] rejected" in shown.out, shown
    assert_ledger_ok(home)
