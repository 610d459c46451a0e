"""A real ``holon daemon`` whose agent's API key variable is unset (issue 15 item 1).

Before: the error escaped the turn, the input stayed queued and the daemon picked the agent again
on every pass (~20 "agent run failed" log lines a second, nothing for the operator). Now the turn
settles ``failed`` with the input re-queued, one error brief names the variable, ``daemon status``
shows the agent ``failed`` with that cause, the log holds one line for it, and once the operator
fixes the agent's settings the queued input is answered on the next retry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.daemon import agents, completed_inputs, payloads, submit
from helpers.turn_cli import cli_env, holon, open_store, quick_home, wait_for

from holon.runtime.agents import configure_agent
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

VAR = "GROQ_API_KEY"  # in the default [model] allowed_key_envs; removed from the daemon's environment


def test_an_unset_key_variable_is_shown_once_and_the_input_waits_for_the_fix(tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env().items() if k != VAR}
    with FakeLLM(lambda body: {"content": "answered at last"}) as fake:
        home = quick_home(tmp_path, "alice", model="openai/fake", api_base=fake.url, api_key_env=VAR)
        r = holon(home, "daemon", "start", "--no-http", "--json", env=env)
        assert r.code == 0, r
        try:
            (seq,) = submit(home, "alice", "hello")

            def briefed() -> bool:
                return any(p["kind"] == "error" for *_, p in payloads(home, "brief.delivered"))

            wait_for("the error brief", briefed, timeout=30)

            def alice() -> dict[str, Any]:
                status = holon(home, "daemon", "status", "--json", env=env).json()
                return next(a for a in status["status"]["agents"] if a["name"] == "alice")

            # Without HTTP the status comes from daemon.json, rewritten within a second of a change:
            # the brief (committed with the settle) can be seen before the file shows the hold-back.
            wait_for("status to show the failure", lambda: alice()["state"] == "failed", timeout=15)
            row = alice()
            assert row["state"] == "failed" and VAR in row["detail"], row
            assert agents(home)["alice"]["pending_inputs"] == [seq]
            configure_agent_out_of_process(home)
            wait_for("the queued input answered", lambda: seq in completed_inputs(home), timeout=60)
        finally:
            stopped = holon(home, "daemon", "stop", "--json", env=env)
        assert stopped.code == 0, stopped
    assert fake.requests, "the fixed agent called the model"
    briefs = [p for *_, p in payloads(home, "brief.delivered") if p["kind"] == "error"]
    assert len(briefs) == 1 and VAR in briefs[0]["text"] and "queued" in briefs[0]["text"], briefs
    settled = [p for *_, p in payloads(home, "turn.settled")]
    assert settled[-1]["outcome"] == "completed" and all(p["requeue"] for p in settled[:-1]), settled
    assert len(settled) <= 4, settled  # a backoff, not a loop: at most a few retries in the window
    log = (home / "logs" / "holon.log").read_text(encoding="utf-8")
    assert "agent run failed" not in log
    assert log.count("agent held back after a failure") == 1, log


def configure_agent_out_of_process(home: Path) -> None:
    """The operator's fix: drop the key variable (the fake model needs none)."""
    with open_store(home) as store:
        configure_agent(store, "alice", {}, unset=["api_key_env"])
