"""SIGKILL the daemon while 10 agents work through queued inputs; after a restart every acknowledged
input (appended to the ledger, including those appended while the daemon was down) is answered by
a completed turn, and ``holon ledger verify`` and ``holon ledger replay`` pass."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from helpers.daemon import all_settled, completed_inputs, fake_home, payloads, state, submit
from helpers.turn_cli import assert_ledger_ok, kill_hard, spawn_holon, wait_for

from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.timeout(180)

AGENTS = [f"agent-{i}" for i in range(10)]


def test_sigkill_with_ten_busy_agents_loses_no_acknowledged_input(tmp_path: Path) -> None:
    with FakeLLM(lambda body: {"content": "Handled.", "delay": 0.5}) as fake:
        home = fake_home(tmp_path, fake, *AGENTS)
        acknowledged = [seq for name in AGENTS for seq in submit(home, name, f"{name} job 0")]
        proc = spawn_holon(home, "serve", "--no-http")
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc, timeout=60)
        for j in range(1, 4):  # more inputs while the agents are busy: each arrives mid-turn
            time.sleep(0.3)
            acknowledged += [seq for name in AGENTS for seq in submit(home, name, f"{name} job {j}")]
        wait_for(
            "turns in flight", lambda: len(payloads(home, "model.requested")) > len(payloads(home, "turn.settled"))
        )
        kill_hard(proc)
        assert len(completed_inputs(home)) < len(acknowledged), "the crash came too late to test anything"
        acknowledged += [seq for name in AGENTS for seq in submit(home, name, f"{name} while down")]

        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("every input answered", lambda: all_settled(home), proc=proc, timeout=90)
            assert state(home)["state"] == "running"
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    missing = set(acknowledged) - completed_inputs(home)
    assert not missing, f"acknowledged inputs never answered: {sorted(missing)}"
    outcomes = [p["outcome"] for *_, p in payloads(home, "turn.settled")]
    assert "interrupted" in outcomes, "the SIGKILL should have caught turns in flight"
    assert_ledger_ok(home)
