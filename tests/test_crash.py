"""SIGKILL in the middle of multi-event transactions: every turn is wholly present or wholly absent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings
from holon.ledger import Event
from holon.ledger.events import BlobRef
from holon.projections import Store

pytestmark = pytest.mark.slow  # every test here starts a process

CRASHER = Path(__file__).parent / "helpers" / "crasher.py"
ROUNDS = 5
TURN_TYPES = ["turn.started", "tool.called", "tool.resulted", "model.responded", "turn.settled", "working_memory.delta"]


def _run_and_kill(home: HomePaths, round_: int, started: Path, delay: float) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    env["HOLON_LEDGER_BLOB_THRESHOLD_BYTES"] = "1024"
    proc = subprocess.Popen(
        [sys.executable, str(CRASHER), str(home.root), str(round_), str(started)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            if proc.poll() is not None:
                raise AssertionError(f"crasher exited early ({proc.returncode}): {proc.stderr.read()}")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "crasher never got going"
            time.sleep(0.005)
        time.sleep(delay)
        assert proc.poll() is None, f"crasher died by itself: {proc.stderr.read()}"  # type: ignore[union-attr]
        os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _check_turns(events: list[Event]) -> int:
    """Every turn's events are all there, contiguous, in order. Returns the number of turns."""
    by_turn: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.type != "agent.created":
            assert e.turn_id is not None, e
            by_turn[e.turn_id].append(e)
    for tid, group in by_turn.items():
        # Every 20th turn also seals an episode (a derived event in the same transaction).
        types = [e.type for e in group if e.type != "episode.sealed"]
        assert types == TURN_TYPES, f"turn {tid} is torn: {[e.type for e in group]}"
        seqs = [e.seq for e in group]
        assert seqs == list(range(seqs[0], seqs[0] + len(group))), f"turn {tid} is not contiguous"
    return len(by_turn)


def test_kill_mid_transaction_loses_whole_turns_only(home: HomePaths, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    turns_seen = 0
    for round_ in range(ROUNDS):
        started = tmp_path / f"started-{round_}"
        _run_and_kill(home, round_, started, delay=rng.uniform(0.0, 0.4))

        with Store.open(home, load_settings(home), clock=FakeClock()) as store:
            ledger = store.ledger
            result = ledger.verify()
            assert result.ok, (seed, round_, result.problem)
            events = list(ledger.read())
            assert events[0].type == "agent.created"
            assert sum(e.type == "agent.created" for e in events) == 1
            turns = _check_turns(events)
            assert turns >= turns_seen + 21, (seed, round_)  # this round committed at least 21 turns
            turns_seen = turns
            # Every blob an event refers to was committed with it.
            for e in events:
                out = getattr(e.payload, "output", None)
                if isinstance(out, BlobRef):
                    body = ledger.read_blob(out)
                    assert not body.pruned and body.text is not None and body.text.startswith(out.preview)
            assert ledger.stats().blobs > 0
            replay = store.replay()
            assert replay.ok, (seed, round_, replay.examples)
            agent = store.agent("crasher")
            assert agent.turns == turns
            assert agent.status == "idle"
