"""``holon bench ledger`` in-process at tiny sizes: every side measured, CPU-time ratios, the method stated."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from holon.bench import ledger as bench
from holon.bench import workload
from holon.bench.ledger_peers import EventSourcingRecorder, RawSqlite, raw_rows
from holon.bench.progress import reporting
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.store import EVENT_INSERT

PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "SINGLE_N", 40)
    monkeypatch.setattr(bench, "BATCH_N", 200)


def _events(n: int) -> list[NewEvent]:
    stream = workload.stream(2)
    return [next(stream) for _ in range(n)]


@pytest.mark.slow  # runs a benchmark
def test_every_side_is_measured_in_cpu_time(tiny: None) -> None:
    steps: list[str] = []
    with reporting(lambda label, done, total: steps.append(label)):
        r = bench.run_ledger_bench(replay_events=1_000, rounds=2)
    for key in ("append_single", "append_batch", "raw_single", "raw_batch", "bare_single", "bare_batch"):
        assert r[f"{key}_per_s"] > 0 and r[f"{key}_wall_per_s"] > 0, key
    assert r["append_single_ratio"] == pytest.approx(r["append_single_per_s"] / r["raw_single_per_s"], rel=0.01)
    assert r["append_batch_ratio"] == pytest.approx(r["append_batch_per_s"] / r["raw_batch_per_s"], rel=0.01)
    assert r["replay_ok"] and r["verify_ok"] and r["replay_events_per_s"] > 0 and r["raw_select_per_s"] > 0
    assert r["clock"] == "cpu" and "CPU second" in r["method"] and "bare table" in r["method"]
    assert set(r["targets_met"]) == set(bench.TARGETS) - (
        set() if EventSourcingRecorder.available() else {"vs_eventsourcing_single"}
    )
    if EventSourcingRecorder.available():
        assert r["eventsourcing"] == "9.5.6"
        assert r["vs_eventsourcing_single"] > 0 and r["vs_eventsourcing_batch"] > 0
        assert "eventsourcing 9.5.6's SQLiteApplicationRecorder" in r["method"]
    assert steps[0] == "append rounds" and steps[-1] == "replaying", steps
    assert "append round 2 of 2: holon" in steps
    assert "raw sqlite3" in bench.format_report(r)


@pytest.mark.slow  # runs a benchmark
def test_without_eventsourcing_the_report_says_so(tiny: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EventSourcingRecorder, "available", staticmethod(lambda: False))
    r = bench.run_ledger_bench(replay_events=1_000, rounds=1)
    assert not any(k.startswith(("vs_eventsourcing", "eventsourcing_")) for k in r)
    assert r["eventsourcing"].startswith("not measured: the eventsourcing package is not installed")
    assert "not measured" in bench.format_report(r)
    left_out = bench.run_ledger_bench(replay_events=1_000, rounds=1, eventsourcing=False)
    assert left_out["eventsourcing"].startswith("not measured: left out")


def test_raw_sides_store_the_same_rows(tmp_path: Path) -> None:
    events = _events(30)
    table = RawSqlite(tmp_path / "t.db", PRAGMAS, "table")
    bare = RawSqlite(tmp_path / "b.db", PRAGMAS, "bare")
    try:
        assert table.run(events, 1)[0] == 30 and bare.run(events, 10)[0] == 30
        rows = [c.conn.execute("SELECT * FROM events ORDER BY seq").fetchall() for c in (table, bare)]
        assert rows[0] == rows[1] and len(rows[0]) == 30
        # holon's table keeps its triggers (gapless), the bare one has none
        gap = raw_rows(events[:1], 99)
        with pytest.raises(sqlite3.IntegrityError, match="next sequence number"):
            table.conn.execute(EVENT_INSERT, gap[0])
        bare.conn.execute(EVENT_INSERT, gap[0])
        assert table.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        table.close()
        bare.close()


@pytest.mark.skipif(not EventSourcingRecorder.available(), reason="eventsourcing is not installed")
def test_eventsourcing_peer_gets_holons_pragmas(tmp_path: Path) -> None:
    peer = EventSourcingRecorder(tmp_path / "es.db", PRAGMAS)
    try:
        n, cpu, wall = peer.run(_events(25), 10)
        assert n == 25 and cpu >= 0 and wall > 0
        assert peer.recorder.max_notification_id() == 25
        with peer.datastore.get_connection(commit=False) as conn:
            assert conn._sqlite_conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        peer.close()


def test_the_workloads_turns_take_their_inputs(tmp_path: Path) -> None:
    """Appended through ``take_inputs`` in chunks of any size, every turn takes the messages its
    agent received before it: no agent's pending inputs pile up (they did, without bound)."""
    from holon.clock import FakeClock
    from holon.config import Settings, resolve_home
    from holon.projections import Store

    events = _events(600)
    with Store.open(resolve_home(tmp_path / "h"), Settings(), clock=FakeClock()) as store:
        store.append(*workload.creation_events(2))
        waiting: dict[str, list[int]] = {}
        for size in (1, 7, 10, 100):
            part, events = events[:150], events[150:]
            for i in range(0, len(part), size):
                store.append(*workload.take_inputs(part[i : i + size], store.ledger.head(), waiting))
        taken = [s for e in store.ledger.read() if isinstance(e.payload, ev.TurnStarted) for s in e.payload.inputs]
        received = [e.seq for e in store.ledger.read() if e.type == "message.received"]
        assert taken and taken == received[: len(taken)]
        assert all(len(a.pending_inputs) <= 1 for a in store.agents())
