"""SIGKILL the daemon while 10 agents work through inputs posted to its HTTP API; after a restart
every acknowledged input (a ``202`` from ``POST /v1/agents/{agent}/inputs``, or appended to the
ledger by another process while the daemon was down) is answered by a completed turn, and
``holon ledger verify`` and ``holon ledger replay`` pass.

A poster thread keeps sending inputs round-robin across the agents before, during and after the
kill; a post that got no ``202`` (connection refused or reset mid-request) counts for nothing,
since the API promised nothing for it."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from helpers.daemon import all_settled, completed_inputs, fake_home, payloads, state, submit
from helpers.turn_cli import assert_ledger_ok, kill_hard, spawn_holon, wait_for

from holon.api.server import free_port
from holon.api.token import read_token
from holon.testing.fake_llm import FakeLLM

if TYPE_CHECKING:
    from conftest import EngineTarget

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

AGENTS = [f"agent-{i}" for i in range(10)]


class Poster(threading.Thread):
    """Posts operator inputs round-robin; ``acknowledged`` holds the seqs of those answered 202."""

    def __init__(self, url: str, home: Path) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.home = home
        self.acknowledged: list[int] = []
        self.refused = 0
        self.halt = threading.Event()

    def run(self) -> None:
        token = read_token(self.home)  # the daemon made it at its first start
        with httpx.Client(base_url=self.url, timeout=5, headers={"Authorization": f"Bearer {token}"}) as client:
            for n in itertools.count():
                if self.halt.is_set():
                    return
                name = AGENTS[n % len(AGENTS)]
                try:
                    r = client.post(f"/v1/agents/{name}/inputs", json={"text": f"{name} job {n}"})
                except httpx.TransportError:
                    self.refused += 1
                    time.sleep(0.02)
                    continue
                if r.status_code == 202:
                    self.acknowledged.append(int(r.json()["seq"]))
                time.sleep(0.01)


def test_sigkill_with_ten_busy_agents_loses_no_acknowledged_input(tmp_path: Path, engine: EngineTarget) -> None:
    """On both engines: on PostgreSQL the daemon, the poster's inputs and the reads here go to the
    ``engine`` fixture's database (``HOLON_STORAGE_URL``, passed to every child process)."""
    with FakeLLM(lambda body: {"content": "Handled.", "delay": 0.5}) as fake:
        home = fake_home(tmp_path, fake, *AGENTS)
        port = free_port()
        proc = spawn_holon(home, "serve", "--port", str(port))
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc, timeout=60)
        poster = Poster(f"http://127.0.0.1:{port}", home)
        poster.start()
        try:
            wait_for("some inputs answered", lambda: len(completed_inputs(home)) >= 20, proc=proc)
            wait_for(
                "turns in flight", lambda: len(payloads(home, "model.requested")) > len(payloads(home, "turn.settled"))
            )
            kill_hard(proc)  # while the poster is sending
            wait_for("posts refused", lambda: poster.refused >= 3)
        finally:
            poster.halt.set()
            poster.join(timeout=10)
        acknowledged = list(poster.acknowledged)
        assert len(completed_inputs(home)) < len(acknowledged), "the crash came too late to test anything"
        while_down = [seq for name in AGENTS for seq in submit(home, name, f"{name} while down")]

        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("every input answered", lambda: all_settled(home), proc=proc, timeout=90)
            assert state(home)["state"] == "running"
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    missing = set(acknowledged + while_down) - completed_inputs(home)
    assert not missing, f"acknowledged inputs never answered: {sorted(missing)}"
    outcomes = [p["outcome"] for *_, p in payloads(home, "turn.settled")]
    assert "interrupted" in outcomes, "the SIGKILL should have caught turns in flight"
    assert_ledger_ok(home)
