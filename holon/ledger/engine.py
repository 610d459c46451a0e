"""``Engine``: what a storage engine gives the ledger (RFC 0008, "The engine seam").

``Ledger`` and ``Transaction`` (the append path, hooks, idempotency), the codec and the hash chain,
``EventQuery``'s semantics and the row checks of ``verify`` are engine-independent and sit above
this protocol; below it sit the engines: ``holon.ledger.sqlite`` (the embedded default) and
``holon.ledger.pg`` (PostgreSQL); ``holon.ledger.engines.engine_for`` picks one from ``[storage] url``. An engine owns its connections, its schema history and everything whose SQL
cannot be common (the head read and lock, JSON inside payloads, page checks, sizes).

Rules every implementation keeps, checked by ``tests/test_engine_contract.py``:

* **No driver types cross the protocol.** Connections are ``holon.ledger.sql.Conn``; rows are
  tuples in ``EVENT_COLUMNS`` order; driver exceptions become ``holon.errors`` types
  (``LedgerError`` for a refused append or an unreadable store, ``MigrationError``,
  ``NotFoundError`` for a missing blob) wherever a caller catches them.
* **The ledger's lock is the caller's.** Every method that takes a ``conn`` runs on it without
  locking; ``Ledger`` holds its lock around each call. Methods without one (``reader``,
  ``verify_pages``, ``stats``, ``first_bad_blob``) use connections of their own.
* **Same bytes on every engine.** ``insert`` stores the rows it is given as they are (the ledger
  computed ``seq``, ``id``, ``ts_us`` and the chain); ``read_rows`` gives them back unchanged.
* **No per-event calls.** ``insert`` takes a transaction's rows at once; nothing here is called
  once per event on the append path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from holon.errors import HolonError
from holon.ledger.codec import BlobBody
from holon.ledger.query import EventQuery
from holon.ledger.rows import EVENT_COLUMNS
from holon.ledger.sql import Conn, Dialect, Row

if TYPE_CHECKING:
    from sqlmodel import Session

__all__ = ["QUICK_CHECK_SKIPPED", "CommonReads", "Engine", "Head", "LedgerStats", "translate"]

QUICK_CHECK_SKIPPED = "quick_check skipped: over its time budget"
"""What ``Engine.verify_pages`` returns when its budget ran out first (the check counts as passed)."""


class Head(NamedTuple):
    """The last committed event as the append lock's holder sees it; ``(0, GENESIS_HASH, 0)`` when
    the ledger is empty. ``ts_us`` lets a writer keep time in the ledger from going backwards
    across machines whose clocks disagree (RFC 0008, "Timestamps across machines")."""

    seq: int
    hash: str
    ts_us: int


@dataclass(frozen=True, slots=True)
class LedgerStats:
    events: int
    head_seq: int
    by_type: dict[str, dict[str, int]]
    """type -> {"count": n, "payload_bytes": b}"""
    blobs: int
    blob_bytes: int
    blobs_pruned: int
    db_bytes: int


class Engine(Protocol):
    """One ledger database: its connections, schema, append primitives and engine-specific reads."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def location(self) -> str:
        """What messages name: the database file, or a URL without its password."""
        ...

    # --- lifecycle ------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the database holds anything yet; raises ``LedgerError`` for one that can be
        neither created nor opened (a 0-byte file, a directory in its place)."""
        ...

    def open(self, *, create: bool, now_us: Callable[[], int]) -> bool:
        """Create the database when it does not exist and ``create`` is set (else ``LedgerError``),
        refuse one without holon's schema, connect, and migrate forwards. Returns whether this call
        created it. Driver errors become ``LedgerError``/``MigrationError`` naming ``location``.
        ``now_us`` (the ledger's clock) is read when the database is created and when it is
        migrated, once each, as before the engine seam (a fake clock's readings stay the same)."""
        ...

    def migrate(self, *, now_us: int) -> list[int]:
        """Apply pending migrations; returns the versions applied (``MigrationError`` on failure)."""
        ...

    def connection(self) -> Conn:
        """The ledger's own connection: every write transaction and the reads beside it."""
        ...

    def reader(self) -> AbstractContextManager[Conn]:
        """A connection of its own for a long read (verify, replay, stats) beside the writer."""
        ...

    def session(self) -> Session:
        """A SQLModel session for typed inspection reads (imports SQLAlchemy; never a hot path)."""
        ...

    def close(self) -> None: ...

    def translate(self, e: BaseException) -> HolonError | None:
        """``e`` as a one-line ``LedgerError`` naming the database when it is a driver error (a
        connection the server dropped: ``StorageUnavailable``, retryable), else ``None``."""
        ...

    # --- the append path --------------------------------------------------------------------------

    def begin_append(self) -> tuple[Conn, Head]:
        """Open the write transaction (holding the ledger's total order) and read the head in it."""
        ...

    def insert(self, conn: Conn, rows: Sequence[Row], blobs: Sequence[BlobBody], *, now_us: int) -> None:
        """Store one transaction's event rows (``EVENT_INSERT``'s values) and blob bodies;
        ``LedgerError`` when the database refuses them (a gap, a reused key). An engine may hold
        the rows back to send them with ``commit`` (PostgreSQL: one round trip), provided every
        later statement of the transaction sees them; its refusal then comes from that statement
        or from ``commit``, and the caller rolls back either way."""
        ...

    def commit(self, conn: Conn) -> None: ...

    def rollback(self, conn: Conn) -> None:
        """Roll back the open transaction, if there is one (safe after a failed COMMIT)."""
        ...

    def head(self, conn: Conn) -> Head: ...

    def load_rows(self, rows: Iterable[Row]) -> int:
        """Append rows that were already chained elsewhere (a copy of a ledger), as they are, in
        one transaction: the database's gapless check still applies. Returns how many."""
        ...

    # --- reads ------------------------------------------------------------------------------------

    def sql(self, q: EventQuery, columns: str) -> tuple[str, list[object]]:
        """``q`` as a SELECT of ``columns`` in this engine's SQL (``Conn``'s placeholders)."""
        ...

    def count_sql(self, q: EventQuery) -> tuple[str, list[object]]: ...

    def read_rows(
        self, conn: Conn, after: int, *, agent_id: str | None = None, limit: int
    ) -> list[Row]:  # fmt: skip
        """Up to ``limit`` rows (``EVENT_COLUMNS``) with ``seq > after``, in order."""
        ...

    def text_bytes(self, column: str) -> str:
        """A SQL expression reading text ``column`` as its stored bytes (a damaged byte is then
        reported by the reader, not raised by the driver)."""
        ...

    def has_table(self, conn: Conn, name: str) -> bool: ...

    def recent_index(
        self, conn: Conn, agent_id: str, types: Sequence[str], *, limit: int, before: int
    ) -> list[tuple[int, str, str | None]]:
        """``(seq, type, turn_id)`` of the agent's newest ``limit`` events of each type before
        ``before``, unsorted (the caller merges): one bounded index walk per type."""
        ...

    def turn_taking(self, conn: Conn, agent_id: str, input_seq: int) -> tuple[int, str] | None:
        """``(seq, turn id)`` of the agent's latest ``turn.started`` after ``input_seq`` that took it."""
        ...

    def turn_settled_seq(self, conn: Conn, agent_id: str, turn_id: str, *, after: int) -> int | None: ...

    def round_ended(self, conn: Conn, turn_id: str, *, after: int, upto: int) -> bool: ...

    # --- blobs ------------------------------------------------------------------------------------

    def blob_body(self, conn: Conn, hash_: str) -> bytes | None:
        """A blob's body (``None`` once pruned); ``NotFoundError`` when there is no such blob."""
        ...

    def prune_blobs(self, conn: Conn, *, older_than_us: int, now_us: int) -> int:
        """Drop bodies last referenced before ``older_than_us`` in a transaction of its own; how many."""
        ...

    def first_bad_blob(self) -> str | None:
        """The hash of the first blob whose body does not match it, or ``None``."""
        ...

    # --- integrity and size -----------------------------------------------------------------------

    def verify_pages(self, *, budget_s: float | None = None) -> str | None:
        """The storage's own structural check (``QUICK_CHECK_SKIPPED`` past the budget), or
        ``None`` when sound or when the engine has none to run."""
        ...

    def stats(self) -> LedgerStats:
        """Counts and sizes over the whole ledger, in one snapshot on a connection of its own."""
        ...


class CommonReads:
    """The reads whose SQL is the same on every engine (``Conn``'s ``?`` placeholders, translated by
    the PostgreSQL ``Conn``); an engine inherits them and keeps only what differs."""

    def sql(self, q: EventQuery, columns: str) -> tuple[str, list[object]]:
        return q.sql(columns)

    def count_sql(self, q: EventQuery) -> tuple[str, list[object]]:
        return q.count_sql()

    def read_rows(self, conn: Conn, after: int, *, agent_id: str | None = None, limit: int) -> list[Row]:
        if agent_id:
            sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND agent_id = ? ORDER BY seq LIMIT ?"
            return conn.fetchall(sql, (after, agent_id, limit))
        return conn.fetchall(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit))


def translate(e: BaseException) -> HolonError | None:
    """A foreign database error as a ``LedgerError`` without knowing which ledger raised it (the
    CLI's safety net); ``None`` when it is not one. psycopg's are looked at only when something
    already imported it (a SQLite home never does)."""
    from holon.ledger.sqlite.damage import translate as sqlite_translate

    err: HolonError | None = sqlite_translate(e)
    if err is None and "psycopg" in sys.modules:
        from holon.ledger.pg.conn import translate as pg_translate

        err = pg_translate(e)
    return err
