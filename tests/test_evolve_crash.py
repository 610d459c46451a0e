"""A SIGKILLed evolve job is taken again once its lease expires, and produces nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.evolve import run_turns
from helpers.turn_cli import wait_for

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.evolve import review
from holon.evolve.worker import Evolver
from holon.projections import Store
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


pytestmark = pytest.mark.slow  # every test here starts a process

HELPER = Path(__file__).parent / "helpers" / "evolve_crasher.py"


@sqlite_only(
    "starts a worker process and expires its lease by stepping a fake clock; on PostgreSQL a lease runs on the"
    " database's clock (test_evolve.py::test_on_postgresql_a_lease_runs_out_on_the_database_clock_whatever_the_workers_clocks_say)"
)
def test_a_job_killed_mid_run_is_retried_after_its_lease_and_leaves_no_duplicates(tmp_path: Path) -> None:
    home = resolve_home(tmp_path / "home")
    settings = load_settings(home)
    start = FakeClock().now_us()
    clock = FakeClock(start_us=start)
    with Store.open(home, settings, clock=clock) as store:
        ws = tmp_path / "ws"
        ws.mkdir()
        agent = create_agent(store, "ada", workspace=str(ws))
        run_turns(store, clock, agent.agent_id, [
            ("Remember that the deploy host is web3. Always tag releases.", ["ok"]),
            ("Remember that the queue is redis.", ["ok"]),
        ])  # fmt: skip

    marker = tmp_path / "in-job"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "HOLON_LEDGER_SYNCHRONOUS": "NORMAL"}
    proc = subprocess.Popen([sys.executable, str(HELPER), str(home.root), str(marker)], env=env)
    try:
        wait_for("the worker to reach the middle of a job", marker.exists, timeout=60, proc=proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

    # The killed worker held the lease of the first job (with the system clock). Another worker
    # leaves it alone until the lease has expired...
    with Store.open(home, settings, clock=clock) as store:
        import time

        now = time.time_ns() // 1000
        clock = FakeClock(start_us=now)
        evolver = Evolver(store, clock=clock, worker="second")
        assert evolver.queue.counts()["running"] == 1
        evolver.drain()  # runs the second job only
        assert evolver.queue.counts() == {"queued": 0, "running": 1, "done": 1, "dead": 0}
        clock.advance(seconds=store.settings.evolve.lease_s + 1)
        evolver.drain()
        assert evolver.queue.counts() == {"queued": 0, "running": 0, "done": 2, "dead": 0}
        [job] = [j for j in evolver.queue.jobs() if j.attempts == 2]
        assert job.lease_owner is None

        # Each candidate exactly once: two facts, one proposal, and one event each in the ledger.
        facts = sorted(s.entry.text for s in review.list_entries(store))
        assert facts == ["The deploy host is web3.", "The queue is redis."]
        assert [p.entry.text for p in review.list_proposals(store)] == ["Always tag releases."]  # type: ignore[union-attr]
        types = [
            t
            for (t,) in store.ledger.query(
                "SELECT type FROM events WHERE type LIKE 'durable.%' OR type LIKE 'proposal.%'"
            )
        ]
        assert sorted(types) == ["durable.recorded", "durable.recorded", "proposal.created"]
        assert store.ledger.verify().ok
        assert store.replay().ok
        # Running every job again (an operator re-arming them) changes nothing: each job sees what
        # it already decided, so there is no conflict, no duplicate and no spurious verification.
        before = list(store.ledger.query("SELECT seq, type, payload FROM events"))
        with store.ledger.transaction() as tx:
            tx.conn.execute("UPDATE evolve_jobs SET status = 'queued', attempts = 0, not_before_us = 0")
        assert evolver.drain() == 2
        assert evolver.queue.counts() == {"queued": 0, "running": 0, "done": 2, "dead": 0}
        assert list(store.ledger.query("SELECT seq, type, payload FROM events")) == before
