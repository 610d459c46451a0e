"""Replay: rebuild every projection from sequence 0 and compare with the live rows, byte for byte.

The rebuild folds all events with the same reducers into scratch rows in a TEMP table, inside one
read transaction (a consistent snapshot of events and live rows), and counts rows that differ in
either direction. Live rows are never touched.

Only rows that can change a projection are decoded (``fold.needs_decoding``): types no projection
reads, and events every projection reading them ignores in its current state (a tool call inside
an open episode draft), are skipped as they are, so a damaged payload among them is not listed
here; ``holon ledger verify`` checks every row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from holon.errors import EventValidationError
from holon.ledger.envelope import EVENT_FIELDS
from holon.ledger.sql import Conn
from holon.ledger.store import row_to_event
from holon.projections.fold import Key, fold_event, needs_decoding, row_columns, state_json
from holon.projections.framework import read_cursor
from holon.projections.projector import CURSOR_NAME
from holon.projections.state import State

__all__ = ["ReplayResult", "replay"]

_COLS = "kind, key, agent_id, status, label, seq, state"
_SCRATCH = {
    "sqlite": f"CREATE TEMP TABLE IF NOT EXISTS replay_rows ({_COLS}, PRIMARY KEY (kind, key))",
    # PostgreSQL needs the columns' types; LIKE also takes their "C" collation, so EXCEPT compares alike.
    "postgresql": "CREATE TEMP TABLE IF NOT EXISTS replay_rows (LIKE projection_rows INCLUDING ALL)",
}
"""The replay's scratch table, shaped like ``projection_rows`` (untyped on SQLite, as before)."""
# The payload as bytes: one that is no longer UTF-8 fails its own row's decoding, not the whole query.


def _select(text_bytes: Callable[[str], str]) -> str:
    columns = ", ".join(text_bytes("payload") if f == "payload" else f for f in EVENT_FIELDS)
    return f"SELECT {columns} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 5000"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    ok: bool
    events: int
    mismatches: int
    events_per_s: float
    rows: int
    cursor_ok: bool
    examples: list[str] = field(default_factory=list)
    """Up to five ``kind/key`` labels of mismatching rows."""
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    """Events that could not be decoded (a damaged payload): ``(seq, reason)``, at most 100."""


def replay(
    conn: Conn, *, text_bytes: Callable[[str], str], progress: Callable[[int, int], None] | None = None
) -> ReplayResult:
    """Rebuild projections from seq 0 on ``conn`` (a connection of its own) and compare.

    ``text_bytes`` is the engine's ``Engine.text_bytes``: payloads are read as their stored bytes."""
    select = _select(text_bytes)
    conn.execute("BEGIN")
    try:
        head = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        states: dict[Key, State | None] = {}
        seqs: dict[Key, int] = {}
        count, after = 0, 0
        bad: list[tuple[int, str]] = []
        started = time.perf_counter()
        while True:
            rows = conn.execute(select, (after, head)).fetchall()
            if not rows:
                break
            for raw in rows:
                if not needs_decoding(states, raw[3], raw[2]):
                    continue  # no projection reads it, or every one would ignore it: not even decoded
                try:
                    event = row_to_event(raw)
                except EventValidationError as e:  # a damaged payload: named, never a traceback
                    if len(bad) < 100:
                        bad.append((raw[0], str(e)))
                    continue
                for key in fold_event(states, event):
                    seqs[key] = event.seq
            count += len(rows)
            after = rows[-1][0]
            if progress is not None:
                progress(count, head)
        elapsed = time.perf_counter() - started
        conn.execute(_SCRATCH[conn.dialect])
        conn.execute("DELETE FROM replay_rows")
        scratch = []
        for key, state in states.items():
            if state is None:
                continue
            agent_id, status, label = row_columns(key[0], state)
            scratch.append((key[0], key[1], agent_id, status, label, seqs[key], state_json(state)))
        conn.executemany(f"INSERT INTO replay_rows ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)", scratch)
        # Unqualified names (a TEMP table shadows any other of its name) and named subqueries:
        # the SQL both engines accept.
        diff_sql = (
            f"SELECT kind, key FROM (SELECT {_COLS} FROM projection_rows EXCEPT SELECT {_COLS} FROM replay_rows) AS lost "
            f"UNION SELECT kind, key FROM (SELECT {_COLS} FROM replay_rows EXCEPT SELECT {_COLS} FROM projection_rows) AS extra"
        )
        diffs = conn.execute(diff_sql).fetchall()
        cursor = read_cursor(conn, CURSOR_NAME)
        cursor_ok = (cursor.seq if cursor else 0) == head
        conn.execute("DROP TABLE replay_rows")
    finally:
        conn.execute("ROLLBACK")
    return ReplayResult(
        ok=not diffs and cursor_ok and not bad,
        events=count,
        mismatches=len(diffs),
        events_per_s=count / elapsed if elapsed > 0 else float(count),
        rows=len(scratch),
        cursor_ok=cursor_ok,
        examples=[f"{k}/{v}" for k, v in diffs[:5]],
        bad_rows=bad,
    )
