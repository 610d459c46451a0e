"""``holon bench ledger``: append throughput against raw sqlite3, and replay speed.

Both sides use the same pragmas and the same ``events`` table (indexes and triggers included), and
store the same payload bytes; the raw side inserts precomputed rows with ``sqlite3`` and nothing
else. holon's side goes through ``Store.append``: validation, canonical JSON, ids, the hash chain,
idempotency bookkeeping and the synchronous projections. The sides alternate for several rounds
and the medians are reported, so a noisy machine slows both.
"""

from __future__ import annotations

import itertools
import platform
import sqlite3
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from holon.bench import workload
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.ledger import NewEvent
from holon.ledger.codec import encode_payload
from holon.ledger.envelope import header_of
from holon.ledger.migrations import MIGRATIONS
from holon.ledger.store import EVENT_INSERT, event_row
from holon.projections import Store

__all__ = ["TARGETS", "format_report", "run_ledger_bench"]

TARGETS = {"append_batch_ratio": 0.5, "append_single_ratio": 0.3, "replay_events_per_s": 30_000}
SINGLE_N = 4_000
BATCH_N = 20_000
BATCH_SIZE = 10
N_AGENTS = 10


def _raw_rows(events: list[NewEvent], start_seq: int) -> list[tuple[Any, ...]]:
    rows = []
    for i, ne in enumerate(events):
        seq = start_seq + i
        text = encode_payload(ne.payload, blob_threshold=16_384, preview_chars=400).text
        header = header_of(replace(ne, idempotency_key=None), seq=seq, event_id=f"evt_{seq:026d}",
                           ts_us=1_767_225_600_000_000 + seq) | {"version": 1}  # fmt: skip
        rows.append(event_row(header, text, "0" * 64))
    return rows


class _Raw:
    """The physical baseline: plain sqlite3 inserts into the same table with the same pragmas."""

    def __init__(self, path: Path, pragmas: tuple[str, ...]) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        for p in pragmas:
            self.conn.execute(p)
        # The same events table holon has: every migration's DDL on ``events`` (table, indexes,
        # triggers), none of the projection tables (those are holon's own overhead).
        for m in MIGRATIONS:
            for stmt in m.statements:
                if " ON events" in stmt or "TABLE events" in stmt:
                    self.conn.execute(stmt)
        self.seq = 1
        self.sql = EVENT_INSERT

    def run(self, events: list[NewEvent], batch: int) -> float:
        rows = _raw_rows(events, self.seq)
        self.seq += len(rows)
        conn, sql = self.conn, self.sql
        t0 = time.perf_counter()
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN IMMEDIATE")
            if batch == 1:
                conn.execute(sql, rows[i])
            else:
                conn.executemany(sql, rows[i : i + batch])
            conn.execute("COMMIT")
        return len(rows) / (time.perf_counter() - t0)


def _holon(store: Store, events: list[NewEvent], batch: int) -> float:
    append = store.append
    t0 = time.perf_counter()
    for i in range(0, len(events), batch):
        append(*events[i : i + batch])
    return len(events) / (time.perf_counter() - t0)


def run_ledger_bench(*, replay_events: int = 100_000, rounds: int = 3, synchronous: str = "NORMAL") -> dict[str, Any]:
    # The operator's text (``holon bench --synchronous``): LedgerSettings validates it.
    settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": synchronous}))
    stream = workload.stream(N_AGENTS)
    with tempfile.TemporaryDirectory(prefix="holon-bench-") as tmp:
        paths = HomePaths(Path(tmp) / "home")
        store = Store.open(paths, settings, clock=SystemClock())
        store.append(*workload.creation_events(N_AGENTS))
        raw = _Raw(Path(tmp) / "raw.db", store.ledger.db.pragmas)
        results: dict[str, list[float]] = {"raw_single": [], "holon_single": [], "raw_batch": [], "holon_batch": []}
        for r in range(rounds):
            step("append rounds", r, rounds)
            single = list(itertools.islice(stream, SINGLE_N))
            batched = list(itertools.islice(stream, BATCH_N))
            results["raw_single"].append(raw.run(single, 1))
            results["holon_single"].append(_holon(store, single, 1))
            results["raw_batch"].append(raw.run(batched, BATCH_SIZE))
            results["holon_batch"].append(_holon(store, batched, BATCH_SIZE))
        # Grow the ledger to the replay size, then rebuild every projection from seq 0.
        missing = replay_events - store.ledger.head()
        while missing > 0:
            step("filling the ledger for replay", store.ledger.head(), replay_events)
            chunk = list(itertools.islice(stream, min(missing, 50_000)))
            for i in range(0, len(chunk), 100):
                store.append(*chunk[i : i + 100])
            missing -= len(chunk)
        step("replaying", store.ledger.head(), store.ledger.head())
        replayed = store.replay()
        verified = store.ledger.verify()
        store.close()
        raw.conn.close()
    med = {k: statistics.median(v) for k, v in results.items()}
    return {
        "append_single_per_s": round(med["holon_single"]),
        "append_batch_per_s": round(med["holon_batch"]),
        "raw_single_per_s": round(med["raw_single"]),
        "raw_batch_per_s": round(med["raw_batch"]),
        "append_single_ratio": round(med["holon_single"] / med["raw_single"], 3),
        "append_batch_ratio": round(med["holon_batch"] / med["raw_batch"], 3),
        "replay_events": replayed.events,
        "replay_events_per_s": round(replayed.events_per_s),
        "replay_ok": replayed.ok,
        "verify_ok": verified.ok,
        "synchronous": synchronous,
        "rounds": rounds,
        "batch_size": BATCH_SIZE,
        "targets": TARGETS,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }


def format_report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"ledger benchmark (synchronous={r['synchronous']}, medians of {r['rounds']} rounds)",
            f"  append, 1 event/txn:   {r['append_single_per_s']:>9,}/s   raw sqlite3 {r['raw_single_per_s']:>9,}/s   ratio {r['append_single_ratio']:.3f} (target >= {TARGETS['append_single_ratio']})",
            f"  append, 10 events/txn: {r['append_batch_per_s']:>9,}/s   raw sqlite3 {r['raw_batch_per_s']:>9,}/s   ratio {r['append_batch_ratio']:.3f} (target >= {TARGETS['append_batch_ratio']})",
            f"  replay of {r['replay_events']:,} events: {r['replay_events_per_s']:,}/s (target >= {TARGETS['replay_events_per_s']:,}), identical: {r['replay_ok']}",
        ]
    )
