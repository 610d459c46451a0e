"""Node-local projections: a SQLite file of this node's own, folded from a ledger held elsewhere.

When the ledger is remote (PostgreSQL, RFC 0008 section 5) the search index does not move into the
shared database: each node keeps it as a local, rebuildable projection caught up from the shared
ledger, so that ranking is the single-node engine's. ``LocalDb`` is where such a projection keeps
its tables and its cursor: ``<home>/nodes/<node>/search.db`` (``node_db_path``), with the search
engine's directory beside it. It offers the part of ``Ledger`` that the projection framework
(``holon.projections.framework``) and the index use:

* ``transaction()`` opens ``BEGIN IMMEDIATE`` on the local file and yields a ``Transaction`` whose
  ``conn`` is that file's connection (the projection's rows and ``projection_cursors``, committed
  together: a crash loses nothing and repeats nothing), whose ``head_seq`` is the shared ledger's
  head read when it began, and whose ``find``/``find_keys`` read the shared ledger's events through
  its engine. It cannot append (``LedgerError``): the shared ledger's events are written through
  the shared ledger only.
* ``query``/``has_table`` read the local file; ``head()`` and ``clock`` are the shared ledger's.

The shared ledger's lock is held for a local transaction (``Ledger.reading``): locks are then
always taken in one order (ledger, then local file), whatever thread folds or searches.

On a SQLite home nothing of this is used: the index's tables sit in the ledger's own file and ride
in its transactions, as before (``Store.projection_db``).

A local file records which ledger it follows (the first event's hash; the location for the reader):
opened beside a different ledger (another one, or one emptied and refilled: a head behind the
cursor), its cursors are dropped, so every local projection is cleared and refolded from seq 0. A
copy of the same ledger (``holon storage migrate`` into another database) keeps the index.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from holon.clock import Clock
from holon.config import HomePaths
from holon.errors import LedgerError
from holon.ledger import Database, Event, Ledger, NewEvent, Transaction
from holon.ledger.sql import Params, Row
from holon.ledger.sqlite import SqliteEngine
from holon.ledger.sqlite.db import SqliteConn
from holon.paths import private_dir

__all__ = ["DEFAULT_NODE", "LocalDb", "LocalTransaction", "node_db_path", "node_dir"]

DEFAULT_NODE = "local"
"""The node name of a home that runs without named nodes (one process, ``holon serve`` without
``--node``): its local projections live in ``<home>/nodes/local/``."""

_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS projection_cursors ("
    " name TEXT PRIMARY KEY, seq INTEGER NOT NULL, version INTEGER NOT NULL) STRICT",
    "CREATE TABLE IF NOT EXISTS local_source (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " location TEXT NOT NULL, first_hash TEXT NOT NULL) STRICT",
)
"""The same ``projection_cursors`` as the ledger's migration 1 makes; ``local_source`` names the
ledger the file's projections were folded from."""


def node_dir(paths: HomePaths, node: str) -> Path:
    """The directory of node ``node``'s local state in the home (``<home>/nodes/<node>``)."""
    if not node or "/" in node or node in {".", ".."}:
        raise LedgerError(f"a node name must be a plain name (got {node!r})")
    return paths.root / "nodes" / node


def node_db_path(paths: HomePaths, node: str) -> Path:
    """Node ``node``'s local projection database (the search index's tables and cursor)."""
    return node_dir(paths, node) / "search.db"


class LocalTransaction(Transaction):
    """A transaction on a node-local file: rows and cursors locally, events read from the shared
    ledger (``find``/``find_keys``, inherited), never appended."""

    def append(self, *new: NewEvent) -> list[Event]:
        raise LedgerError("a node-local projection cannot append to the ledger from its own transaction")


class LocalDb:
    """A node-local SQLite database for projections of the shared ``ledger`` (see the module)."""

    def __init__(self, ledger: Ledger, path: Path, *, synchronous: str = "NORMAL") -> None:
        self.ledger = ledger
        self.path = path
        # NORMAL: a power loss may lose the last local commits, which the next catch-up refolds.
        self._db = Database(path, synchronous=synchronous)
        self._conn: SqliteConn | None = None
        self._lock = threading.RLock()

    @property
    def clock(self) -> Clock:
        return self.ledger.clock

    def _connection(self) -> SqliteConn:
        if self._conn is None:
            private_dir(self.path.parent.parent)
            private_dir(self.path.parent)
            conn = self._db.connect()
            try:
                for stmt in _BOOKKEEPING:
                    conn.execute(stmt)
                self._check_source(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _check_source(self, conn: SqliteConn) -> None:
        """Drop every cursor when the file was folded from another ledger than this one."""
        first = self.ledger.get_many([1])
        first_hash = first[0].hash if first else ""
        location = _location(self.ledger)
        row = conn.execute("SELECT location, first_hash FROM local_source WHERE id = 1").fetchone()
        top = conn.execute("SELECT coalesce(max(seq), 0) FROM projection_cursors").fetchone()[0]
        # The first event's hash names the ledger (a moved copy keeps it, so its index stays
        # good); the location is recorded for the reader only (one database has many URLs).
        if row is not None and row[1] == first_hash and top <= self.ledger.head():
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM projection_cursors")
            conn.execute(
                "INSERT INTO local_source(id, location, first_hash) VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE "
                "SET location = excluded.location, first_hash = excluded.first_hash",
                (location, first_hash),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self.ledger.reading() as head, self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield LocalTransaction(self.ledger, conn, head, "")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _opened(self) -> SqliteConn:
        """The connection, opened (and its source checked) under the shared ledger's lock first,
        then the file's: the one order every path here takes the two locks in."""
        conn = self._conn
        if conn is None:
            with self.ledger.reading(), self._lock:
                conn = self._connection()
        return conn

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        conn = self._opened()
        with self._lock:
            return conn.fetchall(sql, params)

    def has_table(self, name: str) -> bool:
        conn = self._opened()
        with self._lock:
            return SqliteEngine(self._db).has_table(conn, name)

    def head(self) -> int:
        return self.ledger.head()

    def cursors(self) -> dict[str, int]:
        return {str(name): int(seq) for name, seq in self.query("SELECT name, seq FROM projection_cursors")}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _location(ledger: Ledger) -> str:
    return ledger.engine.location
