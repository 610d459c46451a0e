"""Checking a ledger: every row's hash chain and the anchor outside the database, on any engine.

The storage's own structural check (SQLite's ``PRAGMA quick_check``) is the engine's
(``Engine.verify_pages``); what is checked here is the same on every engine.

``verify_rows`` walks every row and reports each bad one as ``(seq, reason)`` instead of stopping
at the first or crashing on it: a flipped byte in a payload shows up as a hash that does not match
(with a finer reason when the payload is no longer UTF-8, JSON or a valid event). Rows are read
with their text columns as their stored bytes (``Engine.text_bytes``), so bytes that are not UTF-8 are reported, not raised. The chain
continues from each row's stored hash, so one bad row does not condemn all that follow.

``check_anchor`` compares the database with ``<home>/ledger.anchor`` (see ``holon.ledger.anchor``):
a head below the anchor means committed events were lost (a lost WAL, a cut tail).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from holon.errors import EventValidationError
from holon.ledger.anchor import AnchorMark
from holon.ledger.codec import chain_hash, decode_payload, envelope_header
from holon.ledger.envelope import EVENT_FIELDS, GENESIS_HASH
from holon.ledger.sql import Conn

__all__ = [
    "MAX_REPORTED",
    "RowCheck",
    "TextBytes",
    "check_anchor",
    "tail_check",
    "verify_rows",
]

TextBytes = Callable[[str], str]
"""``Engine.text_bytes``: the SQL expression reading a text column as its stored bytes."""

MAX_REPORTED = 100
"""At most this many bad rows are listed (all are counted)."""

_INTEGERS = frozenset(("seq", "version", "ts_us"))
"""Envelope columns stored as integers; every other column is text, read as bytes so that a
damaged byte is reported instead of failing the read."""


def _select(text_bytes: TextBytes) -> str:
    columns = ", ".join(f if f in _INTEGERS else text_bytes(f) for f in EVENT_FIELDS)
    return f"SELECT {columns} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?"


@dataclass
class RowCheck:
    """What ``verify_rows`` found."""

    events: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS_HASH
    bad: list[tuple[int, str]] = field(default_factory=list)
    bad_count: int = 0

    def add(self, seq: int, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad) < MAX_REPORTED:
            self.bad.append((seq, reason))


def _rows(conn: Conn, text_bytes: TextBytes, after: int, upto: int, chunk: int) -> Iterator[tuple[Any, ...]]:
    sql = _select(text_bytes)
    while True:
        rows = conn.execute(sql, (after, upto, chunk)).fetchall()
        if not rows:
            return
        yield from rows
        after = rows[-1][0]


def _why(type_: str, version: int, payload: bytes) -> str:
    """The most specific reason a row whose hash does not match is bad."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return "hash does not match its content (the payload is not JSON)"
    if not isinstance(data, dict):
        return "hash does not match its content (the payload is not a JSON object)"
    try:
        decode_payload(type_, version, payload)
    except EventValidationError as e:
        return f"hash does not match its content ({e})"
    return "hash does not match its content"


def _values(row: Sequence[Any], check: RowCheck) -> dict[str, Any] | None:  # Any: a row's values
    """The row by field name, its text columns decoded; ``None`` (and the row reported) when one is not UTF-8."""
    out: dict[str, Any] = {}
    for name, raw in zip(EVENT_FIELDS, row, strict=True):
        if raw is None or name in _INTEGERS:
            out[name] = raw
            continue
        try:
            out[name] = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            check.add(row[0], f"column {name} is not valid UTF-8 (a damaged byte)")
            return None
    return out


def verify_rows(
    conn: Conn,
    *,
    text_bytes: TextBytes,
    after: int = 0,
    prev_hash: str = GENESIS_HASH,
    upto: int = 2**62,
    chunk: int = 5_000,
) -> RowCheck:
    """Check every row with ``after < seq <= upto``: gapless sequence, each hash over its content."""
    check = RowCheck(head_seq=after, head_hash=prev_hash)
    prev_seq = after
    for row in _rows(conn, text_bytes, after, upto, chunk):
        seq = row[0]
        check.events += 1
        gap = seq != prev_seq + 1
        if gap:  # the row after a gap cannot be chained: its predecessor is what is missing
            check.add(prev_seq + 1, f"sequence gap: expected {prev_seq + 1}, found {seq}")
        prev_seq = seq
        values = _values(row, check)
        stored_hash = values["hash"] if values is not None else None
        if values is None or gap:
            stored = row[-1]  # the hash, still bytes
            prev_hash = bytes(stored).decode("utf-8", "replace") if stored is not None else prev_hash
            continue
        try:
            header = envelope_header(values)
        except (TypeError, orjson.JSONEncodeError):
            check.add(seq, "envelope columns hold values of the wrong type (a damaged row)")
            prev_hash = stored_hash or prev_hash
            continue
        if chain_hash(prev_hash, header, values["payload"] or "") != stored_hash:
            version = values["version"]
            payload = row[EVENT_FIELDS.index("payload")]
            check.add(seq, _why(str(values["type"]), version if isinstance(version, int) else 0, bytes(payload or b"")))
        prev_hash = stored_hash or prev_hash
    check.head_seq, check.head_hash = prev_seq, prev_hash
    return check


def check_anchor(conn: Conn, mark: AnchorMark | None, *, text_bytes: TextBytes) -> tuple[str | None, int]:
    """Compare the database with the anchor: ``(problem or None, events lost)``."""
    if mark is None or mark.seq == 0:
        return None, 0
    head_row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
    head = int(head_row[0])
    if head < mark.seq:
        lost = mark.seq - head
        return (
            f"the ledger ends at seq {head} but its anchor says {mark.seq} was committed: "
            f"{lost} event{'s' if lost != 1 else ''} lost (a lost or damaged WAL, or a cut tail)",
            lost,
        )
    row = conn.execute(f"SELECT {text_bytes('hash')} FROM events WHERE seq = ?", (mark.seq,)).fetchone()
    stored = bytes(row[0]).decode("utf-8", "replace") if row and row[0] is not None else None
    if stored != mark.hash:
        return f"event {mark.seq} is not the one committed (its hash differs from the anchor's)", 0
    return None, 0


def tail_check(conn: Conn, *, rows: int, text_bytes: TextBytes) -> RowCheck:
    """``verify_rows`` over the last ``rows`` rows only (the daemon's bounded start-up check)."""
    head = int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
    start = max(0, head - rows)
    prev_hash = GENESIS_HASH
    if start > 0:
        row = conn.execute(f"SELECT {text_bytes('hash')} FROM events WHERE seq = ?", (start,)).fetchone()
        if row is None or row[0] is None:
            check = RowCheck(head_seq=head)
            check.add(start, "missing row (sequence gap)")
            return check
        prev_hash = bytes(row[0]).decode("utf-8", "replace")
    return verify_rows(conn, text_bytes=text_bytes, after=start, prev_hash=prev_hash, upto=head)
