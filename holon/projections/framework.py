"""One projection framework: a schema under named migrations, a version, and a cursor with the rows.

A **projection** is a disposable fold of the ledger into tables of its own (RFC 0001,
"Projections"). Three live in a home: the synchronous projector (``projection_rows``, folded
inside every append), the search index (``search_*``, caught up in batches) and the evolve job
queue (``evolve_jobs``, fed from ``turn.settled``). Each is described by the same ``Projection``
protocol and kept by the same helpers here:

* **Schema.** ``migrations`` are named, versioned DDL steps in a namespace of their own (the
  projection's name, in the ``projection_migrations`` table), so the ledger's own migration
  numbers are untouched. Each step runs in its own ``BEGIN IMMEDIATE`` (a ledger transaction),
  re-checks its bookkeeping row inside the lock and writes it in the same transaction, exactly as
  the ledger's ``migrate`` does. A database whose projection schema is newer than this holon is
  refused with ``MigrationError``.
* **Version.** ``version`` names what the fold produces. The cursor row carries the version it was
  built with; when it differs (a bump) ``open_projection`` clears the projection and its cursor
  goes back to the start, so the next catch-up rebuilds it from the ledger.
* **Cursor.** ``projection_cursors`` holds one ``(seq, version)`` per projection. ``advance``
  folds a window of events and moves the cursor in one transaction: a crash loses nothing and
  repeats nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from holon.clock import Clock
from holon.errors import MigrationError
from holon.ledger import Transaction
from holon.ledger.migrations import Migration
from holon.ledger.sql import Conn, Params, Row

__all__ = [
    "Cursor",
    "Host",
    "Migration",
    "Projection",
    "advance",
    "applied_migrations",
    "catch_up",
    "cursors",
    "migrate_projection",
    "open_projection",
    "read_cursor",
    "rebuild",
    "stored_cursor",
    "write_cursor",
]

_BOOKKEEPING = {
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS projection_migrations ("
        " projection TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL, applied_us INTEGER NOT NULL,"
        " PRIMARY KEY (projection, version)) STRICT"
    ),
    "postgresql": (
        "CREATE TABLE IF NOT EXISTS projection_migrations ("
        ' projection TEXT COLLATE "C" NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,'
        " applied_us BIGINT NOT NULL, PRIMARY KEY (projection, version))"
    ),
}
"""DDL is the one place SQL may differ by engine: SQLite's tables are ``STRICT`` (typed, and its
INTEGER is 64-bit); on PostgreSQL a microsecond time needs ``BIGINT`` and keys sort bytewise
(``"C"``), as in the ledger's own tables."""
_UPSERT_CURSOR = (
    "INSERT INTO projection_cursors(name, seq, version) VALUES (?, ?, ?) "
    "ON CONFLICT(name) DO UPDATE SET seq = excluded.seq, version = excluded.version"
)


class Host(Protocol):
    """Where a projection keeps its tables and cursor: the ``Ledger`` itself (its rows ride in the
    ledger's transactions), or a node-local file folded from a remote ledger
    (``holon.projections.local.LocalDb``). Events are read through ``Transaction.find``."""

    @property
    def clock(self) -> Clock: ...

    def transaction(self) -> AbstractContextManager[Transaction]: ...

    def query(self, sql: str, params: Params = ()) -> list[Row]: ...

    def has_table(self, name: str) -> bool: ...

    def head(self) -> int: ...


@runtime_checkable
class Projection(Protocol):
    """A fold of the ledger into tables of its own, with a cursor committed with its rows."""

    @property
    def name(self) -> str:
        """The cursor's row in ``projection_cursors`` and the namespace of the migrations."""
        ...

    @property
    def version(self) -> int:
        """What the fold produces; a bump clears the projection and rebuilds it from seq 0."""
        ...

    @property
    def migrations(self) -> Sequence[Migration]:
        """The projection's DDL, as named, versioned steps (empty when the ledger's own
        migrations made its tables, as for ``projection_rows``)."""
        ...

    def clear(self, tx: Transaction) -> None:
        """Remove every row the projection holds (its schema stays as its migrations left it)."""
        ...

    def fold(self, tx: Transaction, after: int, upto: int) -> None:
        """Fold the events with ``after < seq <= upto`` into the projection's rows, inside ``tx``."""
        ...


@dataclass(frozen=True, slots=True)
class Cursor:
    seq: int
    version: int


# --- cursor bookkeeping -------------------------------------------------------------------------


def read_cursor(conn: Conn, name: str) -> Cursor | None:
    """The cursor of projection ``name`` as seen by ``conn`` (inside a transaction: as of it)."""
    row = conn.fetchone("SELECT seq, version FROM projection_cursors WHERE name = ?", (name,))
    return None if row is None else Cursor(int(row[0]), int(row[1]))


def write_cursor(conn: Conn, name: str, seq: int, version: int) -> None:
    """Move the cursor of ``name``; call it in the transaction that wrote the rows up to ``seq``."""
    conn.execute(_UPSERT_CURSOR, (name, seq, version))


def stored_cursor(ledger: Host, name: str) -> Cursor | None:
    """The committed cursor of ``name``, read without a write transaction (cheap, for freshness)."""
    rows = ledger.query("SELECT seq, version FROM projection_cursors WHERE name = ?", (name,))
    return Cursor(int(rows[0][0]), int(rows[0][1])) if rows else None


def cursors(ledger: Host) -> dict[str, int]:
    """Every projection's committed cursor by name (for status: lag = head - cursor)."""
    return {str(name): int(seq) for name, seq in ledger.query("SELECT name, seq FROM projection_cursors")}


# --- migrations ---------------------------------------------------------------------------------


def applied_migrations(ledger: Host, name: str) -> list[int]:
    """The versions of ``name``'s migrations this database has applied, in order."""
    if not ledger.has_table("projection_migrations"):
        return []
    rows = ledger.query("SELECT version FROM projection_migrations WHERE projection = ? ORDER BY version", (name,))
    return [int(r[0]) for r in rows]


def _check_order(name: str, migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"projection {name!r}: migrations must be numbered 1, 2, ... (got {versions})")


def migrate_projection(ledger: Host, name: str, migrations: Sequence[Migration], *, now_us: int) -> list[int]:
    """Apply ``name``'s pending migrations, each in its own transaction with its bookkeeping row.

    Safe from several processes at once: each step re-checks its row inside ``BEGIN IMMEDIATE``.
    Returns the versions this call applied.
    """
    _check_order(name, migrations)
    have = applied_migrations(ledger, name)
    latest = migrations[-1].version if migrations else 0
    if have and have[-1] > latest:
        raise MigrationError(
            f"the {name} projection's schema v{have[-1]} is newer than this holon (v{latest}); upgrade holon"
        )
    applied: list[int] = []
    for m in migrations:
        if m.version in have:
            continue
        with ledger.transaction() as tx:
            conn = tx.conn
            conn.execute(_BOOKKEEPING[conn.dialect])
            done = conn.fetchone(
                "SELECT 1 FROM projection_migrations WHERE projection = ? AND version = ?", (name, m.version)
            )
            if done is not None:
                continue
            try:
                for stmt in m.statements:
                    conn.execute(stmt)
            except conn.Error as e:
                raise MigrationError(f"migration {name} {m.version} ({m.name}) failed: {e}") from e
            conn.execute(
                "INSERT INTO projection_migrations(projection, version, name, applied_us) VALUES (?, ?, ?, ?)",
                (name, m.version, m.name, now_us),
            )
            applied.append(m.version)
    return applied


# --- opening, catching up, rebuilding -----------------------------------------------------------


def open_projection(ledger: Host, p: Projection, *, start_at_head: bool = False) -> None:
    """Bring ``p``'s schema forwards and check its version; a new or changed version starts over.

    A projection without a cursor starts at seq 0 (or at the ledger's head with ``start_at_head``:
    a queue that should not re-read history it was never asked about). A cursor of another version
    means the fold changed: the projection is cleared and its cursor reset in one transaction.
    Costs only reads when everything is current.
    """
    migrations = p.migrations
    if not migrations or applied_migrations(ledger, p.name)[-1:] != [migrations[-1].version]:
        migrate_projection(ledger, p.name, migrations, now_us=ledger.clock.now_us())
    cur = stored_cursor(ledger, p.name)
    if cur is not None and cur.version == p.version:
        return
    with ledger.transaction() as tx:
        cur = read_cursor(tx.conn, p.name)  # again, inside the lock: another process may have done it
        if cur is not None and cur.version == p.version:
            return
        p.clear(tx)  # a version change, or rows without a cursor: nothing in them can be trusted
        write_cursor(tx.conn, p.name, tx.head_seq if start_at_head and cur is None else 0, p.version)


def advance(ledger: Host, p: Projection, *, window: int) -> int:
    """Fold up to ``window`` events after ``p``'s cursor and move the cursor, in one transaction.

    Returns how many events the cursor moved over (0: the projection was current).
    """
    with ledger.transaction() as tx:
        cur = read_cursor(tx.conn, p.name)
        after = cur.seq if cur is not None else 0
        upto = min(after + window, tx.head_seq)
        if upto <= after:
            return 0
        p.fold(tx, after, upto)
        write_cursor(tx.conn, p.name, upto, p.version)
        return upto - after


def catch_up(
    ledger: Host,
    p: Projection,
    *,
    window: int,
    max_events: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Fold events after ``p``'s cursor, ``window`` per transaction (at most ``max_events`` in all).

    ``progress(cursor)`` after each transaction. Returns how many events the cursor moved over.
    """
    cur = stored_cursor(ledger, p.name)
    if cur is not None and cur.seq >= ledger.head():
        return 0  # current: no write transaction (an idle daemon polls this)
    done = 0
    while max_events is None or done < max_events:
        moved = advance(ledger, p, window=window if max_events is None else min(window, max_events - done))
        if not moved:
            break
        done += moved
        if progress is not None:
            cur = stored_cursor(ledger, p.name)
            progress(cur.seq if cur is not None else 0)
    return done


def rebuild(ledger: Host, p: Projection) -> None:
    """Clear ``p`` and put its cursor back to seq 0 in one transaction; the next catch-up refolds it."""
    migrate_projection(ledger, p.name, p.migrations, now_us=ledger.clock.now_us())
    with ledger.transaction() as tx:
        p.clear(tx)
        write_cursor(tx.conn, p.name, 0, p.version)
