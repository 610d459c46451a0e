"""Appending on PostgreSQL: the ledger lock and the head in one round trip, the rest in one pipeline.

The shape decided in RFC 0008 ("One total order"): ``BEGIN`` and ``holon_begin_append()`` (the
transaction-level advisory lock, then the head) are pipelined, one round trip; the caller computes
seq and hash chain from that head with holon's codec, exactly as on SQLite, since only the lock
holder knows the head; then the blob rows, the event rows and ``COMMIT`` go in a second pipeline.
The lock is released by the commit, after its WAL record is flushed, so the next writer's head
includes it: one gapless total order across processes and machines, whatever the client.

``begin_append`` and ``insert_and_commit`` are the two halves the integrated engine calls around
its ``Transaction`` (which folds hooks between them); ``append`` composes them for callers whose
rows follow from the head alone (``tests/test_pg_ledger.py``'s concurrent writers). The SQL
mirrors ``holon.ledger.store``'s SQLite statements: the same columns in ``EVENT_FIELDS`` order and
the same blob upsert.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from holon.errors import FencedOut, LedgerError, StorageUnavailable
from holon.ledger.codec import BlobBody
from holon.ledger.envelope import EVENT_FIELDS
from holon.ledger.pg.fence import FENCE_SETTING, Fence
from holon.ledger.pg.notify import CHANNEL, notification

__all__ = [
    "BLOB_INSERT",
    "EVENT_INSERT",
    "FENCE_REFUSED",
    "Head",
    "append",
    "begin_append",
    "begin_append_with",
    "insert_and_commit",
    "rollback",
    "rollback_quietly",
    "translated",
]

EVENT_INSERT = f"INSERT INTO events ({', '.join(EVENT_FIELDS)}) VALUES ({', '.join('%s' for _ in EVENT_FIELDS)})"
"""One row of ``events``: values in ``EVENT_FIELDS`` order (``holon.ledger.store.event_row``)."""
BLOB_INSERT = (
    "INSERT INTO blobs (hash, size, body, created_us, referenced_us) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (hash) DO UPDATE SET referenced_us = excluded.referenced_us, "
    "body = coalesce(blobs.body, excluded.body), "
    "pruned_us = CASE WHEN blobs.body IS NULL THEN NULL ELSE blobs.pruned_us END"
)
"""A body stored once per hash; storing it again refreshes its reference time and restores a
pruned body (``holon.ledger.store``'s statement, in PostgreSQL's placeholders)."""

Conn = psycopg.Connection[tuple[Any, ...]]
Row = Sequence[Any]
"""An ``events`` row's values in ``EVENT_FIELDS`` order (``seq, id, ..., payload, hash``)."""


@dataclass(frozen=True, slots=True)
class Head:
    """The last committed event as the lock holder sees it (``0``, the genesis hash, ``0`` when empty).

    ``ts_us`` lets the writer keep time in the ledger from going backwards across machines
    whose clocks disagree (RFC 0008, "Timestamps across machines")."""

    seq: int
    hash: str
    ts_us: int


FENCE_REFUSED = "HLF01"
"""The SQLSTATE of the fence trigger's refusal (migration 2); its DETAIL is the agent id."""


def _refused(conn: Conn, e: psycopg.Error, doing: str | None = None) -> Exception:
    """A database error of an append (or of ``doing``, e.g. "the heartbeat") as holon's error: the
    server gone is retryable (``StorageUnavailable``); the fence's refusal is ``FencedOut``; any
    other refusal (a trigger, a key) is the ledger's (``LedgerError``)."""
    diag = e.diag.message_primary or (str(e).strip().splitlines() or [type(e).__name__])[0]
    if e.sqlstate == FENCE_REFUSED and not conn.closed:  # checked first: psycopg maps the unknown class
        return FencedOut(f"append refused by the database: {diag}", agent_id=e.diag.message_detail or "")
    if isinstance(e, psycopg.OperationalError) or conn.closed:  # "HL" to OperationalError
        info = conn.info
        return StorageUnavailable(
            f"lost PostgreSQL at {info.host}:{info.port} during {doing or 'an append'}: {e}".splitlines()[0]
        )
    return LedgerError(f"{doing or 'append'} refused by the database: {diag}")


@contextlib.contextmanager
def translated(conn: Conn, doing: str) -> Iterator[None]:
    """Statements outside an append (a heartbeat, a read of the leases) raising holon's errors
    only, as ``_refused`` translates them; an open transaction is rolled back."""
    try:
        yield
    except psycopg.Error as e:
        err = _refused(conn, e, doing)
        rollback_quietly(conn)
        raise err from e


def rollback(conn: Conn) -> None:
    """End the open transaction, if any and if the connection still lives (after a failure)."""
    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.execute("ROLLBACK")


def rollback_quietly(conn: Conn) -> None:
    """``rollback`` that never raises (the connection may be the thing that failed)."""
    with contextlib.suppress(psycopg.Error):
        rollback(conn)


def begin_append(conn: Conn, *, fence: Fence | None = None) -> Head:
    """Open the append transaction on ``conn`` (autocommit mode, ``BEGIN`` sent here) holding the
    ledger lock, and return the head: one round trip. The caller ends it with
    ``insert_and_commit`` or ``rollback``.

    ``fence``: the node and its lease tokens, set for this transaction only (``holon.fence``, in
    the same pipeline), for appends that act as the owner of agents; the database then refuses
    any fenced event whose agent's live lease it does not name (``FencedOut``)."""
    return begin_append_with(conn, fence=fence)[0]


def begin_append_with(
    conn: Conn, *statements: tuple[str, Any], fence: Fence | None = None
) -> tuple[Head, list[tuple[Any, ...] | None]]:
    """``begin_append`` that also runs ``statements`` (SQL, parameters) after the lock, in the same
    round trip; returns the head and each statement's first row (``None`` if it returned none).
    A lease's acquire is one: the lock, the head and the lease row at once."""
    if not conn.autocommit:
        raise ValueError("begin_append needs an autocommit connection (it sends BEGIN itself)")
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            if fence is not None:
                conn.execute("SELECT set_config(%s, %s, true)", (FENCE_SETTING, fence.setting()))
            cur = conn.execute("SELECT head_seq, head_hash, head_ts_us FROM holon_begin_append()")
            extra = [conn.execute(sql, params) for sql, params in statements]
        row = cur.fetchone()
        results = [c.fetchone() for c in extra]
    except psycopg.Error as e:
        err = _refused(conn, e)
        rollback_quietly(conn)
        raise err from e
    assert row is not None  # a function with OUT parameters returns exactly one row
    return Head(int(row[0]), str(row[1]), int(row[2])), results


def insert_and_commit(
    conn: Conn, rows: Sequence[Row], blobs: Sequence[BlobBody] = (), *, now_us: int = 0, notify: bool = False
) -> None:
    """Insert ``blobs`` then ``rows`` and COMMIT, in one pipeline (one round trip), inside the
    transaction ``begin_append`` opened; on any error the transaction is rolled back.

    ``notify``: also send ``pg_notify`` on ``holon.ledger.pg.notify.CHANNEL`` with the new head
    and the agents of ``rows``, in the same pipeline (no extra round trip). PostgreSQL delivers it
    at COMMIT, in commit order, and never for a transaction rolled back."""
    try:
        with conn.pipeline():
            cur = conn.cursor()
            if blobs:
                cur.executemany(BLOB_INSERT, [(b.hash, len(b.data), b.data, now_us, now_us) for b in blobs])
            if rows:
                cur.executemany(EVENT_INSERT, rows)
                if notify:
                    cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, notification(rows)))
            cur.execute("COMMIT")
    except psycopg.Error as e:
        err = _refused(conn, e)
        rollback_quietly(conn)
        raise err from e


Build = Callable[[Head], tuple[Sequence[Row], Sequence[BlobBody]]]
"""Rows (and blob bodies) chained from the head the lock holder read."""


def append(conn: Conn, build: Build, *, now_us: int = 0, fence: Fence | None = None, notify: bool = False) -> Head:
    """One append transaction: lock and head, ``build(head)``'s rows, commit. Returns the new head.

    ``build`` runs while the ledger lock is held (keep it short: every writer of the database
    waits for it); an exception from it rolls back and propagates. ``fence`` and ``notify`` as
    for ``begin_append`` and ``insert_and_commit``."""
    head = begin_append(conn, fence=fence)
    try:
        rows, blobs = build(head)
    except BaseException:
        rollback_quietly(conn)
        raise
    insert_and_commit(conn, rows, blobs, now_us=now_us, notify=notify)
    if not rows:
        return head
    last = rows[-1]
    return Head(int(last[0]), str(last[-1]), int(last[EVENT_FIELDS.index("ts_us")]))
