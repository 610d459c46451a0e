"""The sides ``holon bench ledger`` measures holon's appends against, each in its own database file.

* ``RawSqlite("table")``: plain ``sqlite3`` inserts of precomputed rows into holon's own ``events``
  table (every migration's DDL on ``events``: the table, its indexes and triggers) with holon's
  pragmas. The physical limit of holon's schema: what an append would cost if holon did nothing
  but the insert.
* ``RawSqlite("bare")``: the same rows and pragmas into a bare table (the same columns, the
  ``seq`` primary key, no other constraint, index or trigger): what SQLite itself costs.
* ``EventSourcingRecorder``: the ``eventsourcing`` library's SQLite application recorder
  (``insert_events`` of precomputed ``StoredEvent`` values carrying the same payload bytes, one
  aggregate per agent), the event store a user could pick instead. Only the recorder: no
  aggregates, no mapper or transcoder, so it is the stricter peer. Its connection gets holon's
  pragmas too. ``eventsourcing`` is a dev dependency of this benchmark only; without it
  ``EventSourcingRecorder.available()`` is false and the bench says so.

Each ``run`` returns ``(events, cpu_s, wall_s)``: CPU time (``time.process_time``) and wall time of
the insert loop alone; the rows are built before the clocks start.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from holon.bench.peer import OptionalPeer
from holon.ledger import NewEvent
from holon.ledger.codec import encode_payload
from holon.ledger.envelope import EVENT_FIELDS, header_of
from holon.ledger.sqlite.migrations import MIGRATIONS
from holon.ledger.store import EVENT_INSERT, event_row

__all__ = ["EventSourcingRecorder", "Measured", "RawSqlite", "raw_rows"]

Measured = tuple[int, float, float]
"""``(events, cpu_s, wall_s)`` of one timed run."""


def raw_rows(events: list[NewEvent], start_seq: int) -> list[tuple[Any, ...]]:
    """``events`` as ``events`` rows from ``start_seq`` on: holon's payload bytes, a dummy hash."""
    rows = []
    for i, ne in enumerate(events):
        seq = start_seq + i
        text = encode_payload(ne.payload, blob_threshold=16_384, preview_chars=400).text
        header = header_of(replace(ne, idempotency_key=None), seq=seq, event_id=f"evt_{seq:026d}",
                           ts_us=1_767_225_600_000_000 + seq) | {"version": 1}  # fmt: skip
        rows.append(event_row(header, text, "0" * 64))
    return rows


def _timed(fn: Any, n: int) -> Measured:  # Any: a no-argument callable of any return type
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return n, time.process_time() - c0, time.perf_counter() - t0


class RawSqlite:
    """Plain sqlite3 inserts into holon's events table (``"table"``) or a bare one (``"bare"``)."""

    def __init__(self, path: Path, pragmas: tuple[str, ...], schema: Literal["table", "bare"]) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        for p in pragmas:
            self.conn.execute(p)
        if schema == "table":
            for m in MIGRATIONS:
                for stmt in m.statements:
                    if " ON events" in stmt or "TABLE events" in stmt:
                        self.conn.execute(stmt)
        else:
            cols = ", ".join("seq INTEGER PRIMARY KEY" if f == "seq" else f for f in EVENT_FIELDS)
            self.conn.execute(f"CREATE TABLE events ({cols})")
        self.seq = 1

    def run(self, events: list[NewEvent], batch: int) -> Measured:
        rows = raw_rows(events, self.seq)
        self.seq += len(rows)
        conn, sql = self.conn, EVENT_INSERT

        def insert() -> None:
            for i in range(0, len(rows), batch):
                conn.execute("BEGIN IMMEDIATE")
                if batch == 1:
                    conn.execute(sql, rows[i])
                else:
                    conn.executemany(sql, rows[i : i + batch])
                conn.execute("COMMIT")

        return _timed(insert, len(rows))

    def close(self) -> None:
        self.conn.close()


class EventSourcingRecorder(OptionalPeer):
    """eventsourcing's ``SQLiteApplicationRecorder``, one aggregate (originator) per agent."""

    module = "eventsourcing.sqlite"
    distribution = "eventsourcing"

    def __init__(self, path: Path, pragmas: tuple[str, ...]) -> None:
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

        # One thread, so the pool hands out the same connection every time; it gets holon's
        # pragmas (the library itself sets only journal_mode=WAL).
        self.datastore = SQLiteDatastore(str(path), pool_size=1, max_overflow=0)
        with self.datastore.get_connection(commit=True) as conn:
            for p in pragmas:
                conn._sqlite_conn.execute(p)  # the library has no hook for connection pragmas
        self.recorder = SQLiteApplicationRecorder(self.datastore)
        self.recorder.create_table()
        self.versions: dict[str, int] = {}

    def _stored(self, events: list[NewEvent]) -> list[Any]:  # Any: eventsourcing's StoredEvent
        from eventsourcing.persistence import StoredEvent

        out = []
        for ne in events:
            agent = ne.agent_id or "home"
            v = self.versions[agent] = self.versions.get(agent, 0) + 1
            text = encode_payload(ne.payload, blob_threshold=16_384, preview_chars=400).text
            out.append(StoredEvent(uuid.uuid5(uuid.NAMESPACE_URL, agent), v, ne.payload.type, text.encode()))
        return out

    def run(self, events: list[NewEvent], batch: int) -> Measured:
        stored = self._stored(events)
        insert_events = self.recorder.insert_events

        def insert() -> None:
            for i in range(0, len(stored), batch):
                insert_events(stored[i : i + batch])

        return _timed(insert, len(stored))

    def close(self) -> None:
        self.datastore.close()
