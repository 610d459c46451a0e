"""Several real processes appending to one home at once: nothing lost, nothing doubled, no gaps."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings
from holon.projections import Store

pytestmark = pytest.mark.slow  # every test here starts a process

APPENDER = Path(__file__).parent / "helpers" / "appender.py"
WORKERS = 4
PER_WORKER = 5_000


def _start(home: HomePaths, n: int, gate: Path) -> list[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    return [
        subprocess.Popen(
            [sys.executable, str(APPENDER), str(home.root), str(n), str(w), str(gate)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]


def _release(procs: list[subprocess.Popen[str]], gate: Path) -> None:
    deadline = time.monotonic() + 60
    while len(list(gate.glob("ready-*"))) < WORKERS:
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"worker exited early ({p.returncode}): {p.stderr.read() if p.stderr else ''}")
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)
    (gate / "go").touch()


def _finish(procs: list[subprocess.Popen[str]], timeout: float) -> None:
    failures = []
    for w, p in enumerate(procs):
        try:
            _out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _out, err = p.communicate()
            failures.append(f"worker {w} timed out: {err[-2000:]}")
            continue
        if p.returncode != 0 or "Traceback" in err or err.strip():
            failures.append(f"worker {w} exit {p.returncode}: {err[-2000:]}")
    assert not failures, "\n".join(failures)


def test_concurrent_appenders(home: HomePaths, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = _start(home, PER_WORKER, gate)  # they also race to create and migrate the fresh home
    try:
        _release(procs, gate)
        _finish(procs, timeout=240)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    with Store.open(home, load_settings(home), clock=FakeClock()) as store:
        ledger = store.ledger
        result = ledger.verify()
        assert result.ok, result.problem  # gapless from 1, every hash chained
        events = list(ledger.read())
        assert result.events == len(events) == ledger.head()
        appended = [e for e in events if e.origin != "runtime:projector"]
        derived = [e for e in events if e.origin == "runtime:projector"]
        assert len(appended) == WORKERS * (PER_WORKER + 1)
        assert Counter(e.type for e in appended)["agent.created"] == WORKERS
        assert {e.type for e in derived} <= {"working_memory.delta", "episode.sealed"}
        # Each worker's events are all there, exactly once, in the order it appended them.
        for w in range(WORKERS):
            keys = [e.idempotency_key for e in appended if e.agent_id == f"agt_w{w}" and e.idempotency_key]
            assert keys == [f"w{w}-{i}" for i in range(PER_WORKER)]
        # The workers really interleaved (one transaction each, contending for the write lock).
        switches = sum(1 for a, b in itertools.pairwise(appended) if a.agent_id != b.agent_id)
        assert switches > WORKERS
        # Projections written by four processes equal a rebuild from the ledger.
        replay = store.replay()
        assert replay.ok, replay.examples
        assert replay.events == len(events)
        for w in range(WORKERS):
            assert store.agent(f"w{w}").turns == PER_WORKER // 8
        # A row every process incremented counts every increment after the last reschedule.
        last_schedule = max(i for i, e in enumerate(events) if e.type == "timer.scheduled")
        fired = [e for e in events[last_schedule:] if e.type == "timer.fired"]
        timer = store.state("timer", "tm_shared")
        assert timer is not None
        assert (timer.fired, timer.missed) == (len(fired), sum(e.payload.missed for e in fired))  # type: ignore[attr-defined]
        assert len(fired) > PER_WORKER // 8
        conn = sqlite3.connect(home.db)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
