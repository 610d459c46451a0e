"""Copying a ledger from one engine to another (``holon storage migrate``, RFC 0008 section 6).

One function over the ``Engine`` protocol, so both directions (SQLite -> PostgreSQL and back) are
the same code: rows are read in seq order with ``read_rows`` on the source and written in chunks,
each chunk one transaction holding the target's ledger lock (``begin_append``), so the target's
own gapless check sees every row follow the one before it. Rows and blob rows are copied as
stored (payload text, hashes, blob times, pruned bodies), never re-encoded: the copy's bytes are
the source's. The chain itself is checked by ``verify`` on arrival (the caller's next step): a
broken source is copied as it is and refused there, before anything runs on the target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from holon.errors import HolonError
from holon.ledger.engine import Engine
from holon.ledger.envelope import GENESIS_HASH
from holon.ledger.sql import Conn, Row

__all__ = ["CopyResult", "TargetRefused", "copy_ledger", "target_contents"]

_BLOB_COLUMNS = "hash, size, body, created_us, referenced_us, pruned_us"
_BLOB_INSERT = f"INSERT INTO blobs ({_BLOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_BLOB_CHUNK = 256  # bodies can be large: a small chunk bounds memory


class TargetRefused(HolonError):
    """The target cannot take the copy: it holds events or blobs already (a copy never merges two
    ledgers), or it is not a holon database. Exit 2, like any bad or unreachable target."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class CopyResult:
    events: int
    blobs: int
    head_seq: int
    head_hash: str
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def target_contents(target: Engine) -> tuple[int, int]:
    """``(events, blobs)`` already in the (opened) target."""
    conn = target.connection()
    row = conn.fetchone("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM blobs)")
    assert row is not None
    return int(row[0]), int(row[1])


def copy_ledger(
    source: Engine,
    target: Engine,
    *,
    chunk: int = 10_000,
    progress: Callable[[int], None] | None = None,
) -> CopyResult:
    """Copy every blob row, then every event row, from ``source`` to the opened, empty ``target``.

    ``TargetRefused`` when the target holds anything. Blobs go first so that no event on the
    target ever names a blob it lacks. ``progress`` is called with the events copied so far.
    """
    events, blobs = target_contents(target)
    if events or blobs:
        raise TargetRefused(
            f"the target {target.location} is not empty ({events} events, {blobs} blobs): "
            "storage migrate copies into an empty database only"
        )
    t0 = time.perf_counter()
    with source.reader() as src:
        src.execute("BEGIN")  # one snapshot: every event copied finds its blobs copied before it
        try:
            n_blobs = _copy_blobs(src, target)
            n_events, head_seq, head_hash = _copy_events(source, src, target, chunk=chunk, progress=progress)
        finally:
            src.execute("ROLLBACK")
    return CopyResult(n_events, n_blobs, head_seq, head_hash, time.perf_counter() - t0)


def _copy_blobs(src: Conn, target: Engine) -> int:
    n, after = 0, ""
    while True:
        sql = f"SELECT {_BLOB_COLUMNS} FROM blobs WHERE hash > ? ORDER BY hash LIMIT ?"
        rows: list[Row] = src.fetchall(sql, (after, _BLOB_CHUNK))
        if not rows:
            return n
        rows = [(r[0], r[1], None if r[2] is None else bytes(r[2]), r[3], r[4], r[5]) for r in rows]
        conn, _head = target.begin_append()
        try:
            conn.executemany(_BLOB_INSERT, rows)
            target.commit(conn)
        except BaseException:
            target.rollback(conn)
            raise
        n += len(rows)
        after = str(rows[-1][0])


def _copy_events(
    source: Engine, src: Conn, target: Engine, *, chunk: int, progress: Callable[[int], None] | None
) -> tuple[int, int, str]:
    n, after, head_hash, analyzed = 0, 0, GENESIS_HASH, False
    while True:
        rows = source.read_rows(src, after, limit=chunk)
        if not rows:
            return n, after, head_hash
        target.load_rows(rows)  # one transaction under the target's ledger lock: its gapless check applies
        if not analyzed and target.dialect == "postgresql":
            # Fresh statistics say ``events`` is empty, and PostgreSQL's gapless trigger would then
            # read the head with a sequential scan for every later chunk (RFC 0008, risks). Not on
            # SQLite, whose planner statistics would then differ from every other home's.
            target.connection().execute("ANALYZE events")
            analyzed = True
        n += len(rows)
        after, head_hash = int(rows[-1][0]), str(rows[-1][-1])
        if progress is not None:
            progress(n)
