"""``holon bench ledger``: append throughput against raw sqlite3 and eventsourcing, and replay speed.

Method (also stated in the report's ``method`` key). Four sides append the same events, each in
its own database file with holon's pragmas (``holon.bench.ledger_peers``):

* **holon**: ``Store.append`` (validation, canonical JSON, ids, the hash chain, idempotency
  bookkeeping and the synchronous projections), one event per call (``single``) or ten (``batch``);
* **raw**: plain ``sqlite3`` inserts of the same payload bytes, precomputed, into holon's
  ``events`` table (indexes and triggers included), one or ten rows per transaction: the limit of
  holon's schema; ``append_*_ratio`` is holon against this;
* **bare**: the same inserts into a bare table (same columns, no index, trigger or constraint
  but the primary key): the limit of SQLite itself;
* **eventsourcing** (when the package is importable): its SQLite application recorder inserting
  precomputed ``StoredEvent`` values with the same payload bytes; ``vs_eventsourcing_*`` is holon
  against it.

Rates are events per second of **CPU time** (``time.process_time`` around the insert loop only),
because the machine is shared and wall time swings with other processes; wall-time rates are
reported beside them (``*_wall_per_s``). The sides run in every round, in an order rotated from
round to round, and the medians over rounds are reported. Replay rebuilds every projection from
seq 0 (``Store.replay``, which also compares the result with the stored projections); its rate is
events per CPU second of the whole call, beside a raw ``SELECT`` of every events row on the same
file (``raw_select_per_s``).
"""

from __future__ import annotations

import itertools
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from holon.bench import workload
from holon.bench.ledger_peers import EventSourcingRecorder, Measured, RawSqlite
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.ledger import NewEvent
from holon.projections import Store

__all__ = ["METHOD", "TARGETS", "format_report", "run_ledger_bench"]

#: Issue 18's targets (lower bounds).
TARGETS = {
    "append_single_ratio": 0.5,
    "append_batch_ratio": 0.6,
    "vs_eventsourcing_single": 0.5,
    "replay_events_per_s": 60_000,
}
SINGLE_N = 4_000
BATCH_N = 20_000
BATCH_SIZE = 10
N_AGENTS = 10
METHOD = (
    "Each round appends {single} events one per transaction and {batch} in transactions of {size}, on "
    "every side, each in its own database file with holon's pragmas (synchronous={sync}): holon "
    "(Store.append with its synchronous projections; each turn.started takes the inputs its agent received, "
    "patched in untimed before each call as the runner would record them), raw sqlite3 inserting the same payload bytes "
    "precomputed into holon's events table with its indexes and triggers (the ratios' denominator), "
    "the same inserts into a bare table (bare_*), and eventsourcing {es}'s SQLiteApplicationRecorder "
    "inserting precomputed StoredEvents with the same payload bytes (vs_eventsourcing_*; recorder "
    "only, no aggregates or mapper). Rates are events per CPU second (time.process_time around the "
    "insert loop only) because wall time on a shared machine swings with other processes; "
    "*_wall_per_s are wall-clock rates. Sides run in an order rotated each round; medians over "
    "{rounds} rounds. Replay: Store.replay of {replay} events (rebuild every projection from seq 0 "
    "and compare), events per CPU second of the whole call; raw_select_per_s reads every events "
    "row of the same file with one SELECT."
)


def _holon(store: Store, events: list[NewEvent], batch: int, waiting: dict[str, list[int]]) -> Measured:
    """Append ``events`` in calls of ``batch``; only the ``append`` calls are timed. Each chunk's
    turns are first given the inputs they take (``workload.take_inputs``, untimed, like the
    peers' precomputed rows), as the runner records them."""
    append, head = store.append, store.ledger.head
    cpu = wall = 0.0
    for i in range(0, len(events), batch):
        chunk = workload.take_inputs(events[i : i + batch], head(), waiting)
        c0, t0 = time.process_time(), time.perf_counter()
        append(*chunk)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - t0
    return len(events), cpu, wall


def _raw_select(path: Path, pragmas: tuple[str, ...]) -> Measured:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for p in pragmas:
            conn.execute(p)
        c0, t0 = time.process_time(), time.perf_counter()
        n = 0
        for _ in conn.execute("SELECT * FROM events ORDER BY seq"):
            n += 1
        return n, time.process_time() - c0, time.perf_counter() - t0
    finally:
        conn.close()


def _rate(m: Measured, *, wall: bool = False) -> float:
    n, cpu, elapsed = m
    return n / max(elapsed if wall else cpu, 1e-9)


def run_ledger_bench(
    *, replay_events: int = 100_000, rounds: int = 3, synchronous: str = "NORMAL", eventsourcing: bool = True
) -> dict[str, Any]:
    """Measure; ``eventsourcing=False`` leaves that peer out even when it is installed."""
    # The operator's text (``holon bench --synchronous``): LedgerSettings validates it.
    settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": synchronous}))
    stream = workload.stream(N_AGENTS)
    with_es = eventsourcing and EventSourcingRecorder.available()
    results: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="holon-bench-") as tmp:
        paths = HomePaths(Path(tmp) / "home")
        store = Store.open(paths, settings, clock=SystemClock())
        store.append(*workload.creation_events(N_AGENTS))
        pragmas = store.ledger.db.pragmas
        peers: dict[str, Any] = {  # Any: each peer has run(events, batch) -> Measured
            "raw": RawSqlite(Path(tmp) / "raw.db", pragmas, "table"),
            "bare": RawSqlite(Path(tmp) / "bare.db", pragmas, "bare"),
        }
        if with_es:
            peers["es"] = EventSourcingRecorder(Path(tmp) / "es.db", pragmas)
        sides = ["holon", *peers]
        waiting: dict[str, list[int]] = {}  # holon's agents' inputs not yet taken by a turn
        try:
            for r in range(rounds):
                step("append rounds", r, rounds)
                single = list(itertools.islice(stream, SINGLE_N))
                batched = list(itertools.islice(stream, BATCH_N))
                order = sides[r % len(sides) :] + sides[: r % len(sides)]
                for side in order:
                    step(f"append round {r + 1} of {rounds}: {side}", r, rounds)
                    for kind, events, size in (("single", single, 1), ("batch", batched, BATCH_SIZE)):
                        m = _holon(store, events, size, waiting) if side == "holon" else peers[side].run(events, size)
                        results.setdefault(f"{side}_{kind}", []).append(m)
            # Grow the ledger to the replay size, then rebuild every projection from seq 0.
            missing = replay_events - store.ledger.head()
            while missing > 0:
                step("filling the ledger for replay", store.ledger.head(), replay_events)
                chunk = list(itertools.islice(stream, min(missing, 50_000)))
                for i in range(0, len(chunk), 100):
                    store.append(*workload.take_inputs(chunk[i : i + 100], store.ledger.head(), waiting))
                missing -= len(chunk)
            step("replaying", store.ledger.head(), store.ledger.head())
            c0, t0 = time.process_time(), time.perf_counter()
            replayed = store.replay()
            replay_m = (replayed.events, time.process_time() - c0, time.perf_counter() - t0)
            select_m = _raw_select(paths.db, pragmas)
            verified = store.ledger.verify()
        finally:
            store.close()
            for peer in peers.values():
                peer.close()
    return _report(results, replay_m, select_m, replayed.ok, verified.ok, synchronous=synchronous, rounds=rounds,
                   with_es=with_es, es_wanted=eventsourcing)  # fmt: skip


def _report(
    results: dict[str, list[Measured]], replay_m: Measured, select_m: Measured, replay_ok: bool, verify_ok: bool,
    *, synchronous: str, rounds: int, with_es: bool, es_wanted: bool,
) -> dict[str, Any]:  # fmt: skip
    cpu = {k: statistics.median(_rate(m) for m in v) for k, v in results.items()}
    wall = {k: statistics.median(_rate(m, wall=True) for m in v) for k, v in results.items()}
    out: dict[str, Any] = {}
    for kind in ("single", "batch"):
        out[f"append_{kind}_per_s"] = round(cpu[f"holon_{kind}"])
        out[f"raw_{kind}_per_s"] = round(cpu[f"raw_{kind}"])
        out[f"bare_{kind}_per_s"] = round(cpu[f"bare_{kind}"])
        out[f"append_{kind}_ratio"] = round(cpu[f"holon_{kind}"] / cpu[f"raw_{kind}"], 3)
        out[f"append_{kind}_ratio_to_bare"] = round(cpu[f"holon_{kind}"] / cpu[f"bare_{kind}"], 3)
        out[f"raw_{kind}_ratio_to_bare"] = round(cpu[f"raw_{kind}"] / cpu[f"bare_{kind}"], 3)
        if with_es:
            out[f"eventsourcing_{kind}_per_s"] = round(cpu[f"es_{kind}"])
            out[f"vs_eventsourcing_{kind}"] = round(cpu[f"holon_{kind}"] / cpu[f"es_{kind}"], 3)
    for side in ("holon", "raw", "bare", *(["es"] if with_es else [])):
        name = {"holon": "append", "es": "eventsourcing"}.get(side, side)
        for kind in ("single", "batch"):
            out[f"{name}_{kind}_wall_per_s"] = round(wall[f"{side}_{kind}"])
    if not with_es:
        out["eventsourcing"] = (
            "not measured: left out (eventsourcing=False)" if not es_wanted
            else "not measured: the eventsourcing package is not installed (pip install 'holon[dev]')"
        )  # fmt: skip
    else:
        out["eventsourcing"] = EventSourcingRecorder.version()
    out |= {
        "replay_events": replay_m[0],
        "replay_events_per_s": round(_rate(replay_m)),
        "replay_wall_events_per_s": round(_rate(replay_m, wall=True)),
        "raw_select_per_s": round(_rate(select_m)),
        "replay_ok": replay_ok,
        "verify_ok": verify_ok,
        "synchronous": synchronous,
        "rounds": rounds,
        "batch_size": BATCH_SIZE,
        "clock": "cpu",
        "method": METHOD.format(single=SINGLE_N, batch=BATCH_N, size=BATCH_SIZE, sync=synchronous, rounds=rounds,
                                replay=replay_m[0], es=out["eventsourcing"] if with_es else "(not installed)"),
        "targets": TARGETS,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }  # fmt: skip
    out["targets_met"] = {k: out[k] >= v for k, v in TARGETS.items() if k in out}
    return out


def format_report(r: dict[str, Any]) -> str:
    lines = [
        f"ledger benchmark (synchronous={r['synchronous']}, medians of {r['rounds']} rounds, events per CPU second)",
    ]
    for kind, label in (("single", "1 event/txn"), ("batch", f"{r['batch_size']} events/txn")):
        es = (f"   eventsourcing {r[f'eventsourcing_{kind}_per_s']:>9,}/s (holon x{r[f'vs_eventsourcing_{kind}']:.2f})"
              if f"vs_eventsourcing_{kind}" in r else "")  # fmt: skip
        lines.append(
            f"  append, {label:<12} holon {r[f'append_{kind}_per_s']:>9,}/s   raw sqlite3 {r[f'raw_{kind}_per_s']:>9,}/s "
            f"(ratio {r[f'append_{kind}_ratio']:.3f}, target >= {TARGETS[f'append_{kind}_ratio']})   "
            f"bare table {r[f'bare_{kind}_per_s']:>9,}/s{es}"
        )
    if "vs_eventsourcing_single" not in r:
        lines.append(f"  eventsourcing: {r['eventsourcing']}")
    lines.append(
        f"  replay of {r['replay_events']:,} events: {r['replay_events_per_s']:,}/s "
        f"(target >= {TARGETS['replay_events_per_s']:,}), identical: {r['replay_ok']}; raw SELECT {r['raw_select_per_s']:,}/s"
    )
    return "\n".join(lines)
