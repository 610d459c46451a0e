"""``SqliteEngine``: the ledger on one SQLite file (the embedded default), behind ``Engine``.

One writer connection in autocommit mode (holon issues ``BEGIN IMMEDIATE`` / ``COMMIT`` itself),
readers of their own under WAL, prepared statements only. What is SQLite's alone lives here: the
file checks before anything touches it (``damage``), the frozen DDL history (``migrations``),
JSON1 and ``INDEXED BY`` in the named reads, ``PRAGMA quick_check`` and page counts.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from holon.errors import LedgerError, NotFoundError
from holon.ledger.codec import BlobBody
from holon.ledger.engine import CommonReads, Head, LedgerStats
from holon.ledger.envelope import GENESIS_HASH
from holon.ledger.rows import EVENT_INSERT
from holon.ledger.sql import Conn, Row
from holon.ledger.sqlite.damage import empty_file_error, file_state, inspect_existing, translate
from holon.ledger.sqlite.db import Database, SqliteConn
from holon.ledger.sqlite.migrations import create_database, migrate
from holon.ledger.sqlite.pages import quick_check
from holon.paths import tighten

if TYPE_CHECKING:
    from sqlmodel import Session

__all__ = ["SqliteEngine"]

_INSERT_BLOB = (
    "INSERT INTO blobs(hash, size, body, created_us, referenced_us) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(hash) DO UPDATE SET referenced_us = excluded.referenced_us, "
    "body = coalesce(blobs.body, excluded.body), "
    "pruned_us = CASE WHEN blobs.body IS NULL THEN NULL ELSE blobs.pruned_us END"
)
_HEAD = "SELECT seq, hash, ts_us FROM events ORDER BY seq DESC LIMIT 1"
_EMPTY_HEAD: Final = Head(0, GENESIS_HASH, 0)

# Reads on the hot path of the API's reply tracking. They walk the covering index
# ``events_agent_type`` (migration 4) and look into the payload with SQLite's JSON functions, so
# nothing is decoded; the JSON layout stays the ledger's business.
_TURN_TAKING = (
    "SELECT seq, json_extract(payload, '$.turn_id') FROM events INDEXED BY events_agent_type "
    "WHERE agent_id = ? AND type = 'turn.started' AND seq > ? "
    "AND EXISTS (SELECT 1 FROM json_each(events.payload, '$.inputs') WHERE value = ?) "
    "ORDER BY seq DESC LIMIT 1"
)
_TURN_SETTLED = (
    "SELECT seq FROM events INDEXED BY events_agent_type WHERE agent_id = ? AND type = 'turn.settled' "
    "AND seq > ? AND json_extract(payload, '$.turn_id') = ? LIMIT 1"
)
_ROUND_ENDED = (
    "SELECT 1 FROM events WHERE seq > ? AND seq <= ? AND type = 'model.responded' "
    "AND json_extract(payload, '$.turn_id') = ? LIMIT 1"
)
_RECENT = (
    "SELECT seq, type, turn_id FROM events INDEXED BY events_agent_type "
    "WHERE agent_id = ? AND type = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
)


class SqliteEngine(CommonReads):
    """The ledger in ``db``'s file. Cheap to construct: nothing is opened before ``open``."""

    dialect: Final = "sqlite"

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: SqliteConn | None = None

    @property
    def location(self) -> str:
        return str(self.db.path)

    # --- lifecycle ------------------------------------------------------------------------------

    def exists(self) -> bool:
        state = file_state(self.db.path)
        if state == "empty":
            raise empty_file_error(self.db.path)
        return state == "present"

    def open(self, *, create: bool, now_us: Callable[[], int]) -> bool:
        """Connect, creating the file only when it is absent and ``create`` is set (``holon init``).

        An empty (0-byte) file or a SQLite file without holon's schema is refused, never migrated
        into: that would hide a truncated or a wrong database behind a fresh, empty ledger.
        """
        path = self.db.path
        created = False
        if not self.exists():
            if not create:
                raise LedgerError(f"there is no ledger database at {path} (run 'holon init')")
            try:
                created = create_database(path, now_us=now_us())
            except OSError as e:
                raise LedgerError(f"cannot create the ledger database {path}: {e.strerror}") from e
            except sqlite3.Error as e:
                raise LedgerError(f"cannot create the ledger database {path}: {e}") from e
        for suffix in ("", "-wal", "-shm"):
            tighten(path.with_name(path.name + suffix))
        try:
            inspect_existing(path)
            self._conn = self.db.connection()
            self.migrate(now_us=now_us(), create=False)
        except LedgerError:
            self.close()
            raise
        except Exception as e:
            err = translate(e, path)
            self.close()
            if err is None:
                raise
            raise err from e
        return created

    def migrate(self, *, now_us: int, create: bool = True) -> list[int]:
        return migrate(self.connection(), now_us=now_us, create=create)

    def connection(self) -> SqliteConn:
        if self._conn is None:
            self._conn = self.db.connection()
        return self._conn

    @contextmanager
    def reader(self) -> Iterator[SqliteConn]:
        with self.db.reader() as conn:
            yield conn

    def session(self) -> Session:
        return self.db.session()

    def close(self) -> None:
        self._conn = None
        self.db.close()

    def translate(self, e: BaseException) -> LedgerError | None:
        return translate(e, self.db.path)

    # --- the append path --------------------------------------------------------------------------

    def begin_append(self) -> tuple[SqliteConn, Head]:
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            head = self.head(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return conn, head

    def insert(self, conn: Conn, rows: Sequence[Row], blobs: Sequence[BlobBody], *, now_us: int) -> None:
        try:
            if blobs:
                conn.executemany(_INSERT_BLOB, [(b.hash, len(b.data), b.data, now_us, now_us) for b in blobs])
            conn.executemany(EVENT_INSERT, rows)
        except sqlite3.IntegrityError as e:
            raise LedgerError(f"append refused by the database: {e}") from e

    def commit(self, conn: Conn) -> None:
        conn.execute("COMMIT")

    def rollback(self, conn: Conn) -> None:
        if isinstance(conn, sqlite3.Connection) and conn.in_transaction:
            conn.execute("ROLLBACK")

    def head(self, conn: Conn) -> Head:
        row = conn.execute(_HEAD).fetchone()
        return _EMPTY_HEAD if row is None else Head(row[0], row[1], row[2])

    def load_rows(self, rows: Iterable[Row]) -> int:
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.executemany(EVENT_INSERT, rows)
            n = cur.rowcount
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as e:
            conn.execute("ROLLBACK")
            raise LedgerError(f"rows refused by the database: {e}") from e
        except BaseException:
            self.rollback(conn)
            raise
        return int(n)

    # --- reads ------------------------------------------------------------------------------------

    def text_bytes(self, column: str) -> str:
        return f"CAST({column} AS BLOB)"

    def has_table(self, conn: Conn, name: str) -> bool:
        return (
            conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
            is not None
        )

    def recent_index(
        self, conn: Conn, agent_id: str, types: Sequence[str], *, limit: int, before: int
    ) -> list[tuple[int, str, str | None]]:
        found: list[tuple[int, str, str | None]] = []
        for type_ in types:
            found += conn.execute(_RECENT, (agent_id, type_, before, limit)).fetchall()
        return found

    def turn_taking(self, conn: Conn, agent_id: str, input_seq: int) -> tuple[int, str] | None:
        row = conn.execute(_TURN_TAKING, (agent_id, input_seq, input_seq)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def turn_settled_seq(self, conn: Conn, agent_id: str, turn_id: str, *, after: int) -> int | None:
        row = conn.execute(_TURN_SETTLED, (agent_id, after, turn_id)).fetchone()
        return None if row is None else int(row[0])

    def round_ended(self, conn: Conn, turn_id: str, *, after: int, upto: int) -> bool:
        return conn.execute(_ROUND_ENDED, (after, upto, turn_id)).fetchone() is not None

    # --- blobs ------------------------------------------------------------------------------------

    def blob_body(self, conn: Conn, hash_: str) -> bytes | None:
        row = conn.execute("SELECT body FROM blobs WHERE hash = ?", (hash_,)).fetchone()
        if row is None:
            raise NotFoundError(f"no blob {hash_}")
        return None if row[0] is None else bytes(row[0])

    def prune_blobs(self, conn: Conn, *, older_than_us: int, now_us: int) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                "UPDATE blobs SET body = NULL, pruned_us = ? WHERE body IS NOT NULL AND referenced_us < ?",
                (now_us, older_than_us),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return int(cur.rowcount)

    def first_bad_blob(self) -> str | None:
        with self.db.reader() as conn:
            for h, body in conn.execute("SELECT hash, body FROM blobs WHERE body IS NOT NULL"):
                if hashlib.sha256(bytes(body)).hexdigest() != h:
                    return str(h)
        return None

    # --- integrity and size -----------------------------------------------------------------------

    def verify_pages(self, *, budget_s: float | None = None) -> str | None:
        with self.db.reader() as conn:
            return quick_check(conn, self.db.path, budget_s=budget_s)

    def stats(self) -> LedgerStats:
        with self.db.reader() as conn:
            conn.execute("BEGIN")  # one snapshot for every count below
            by_type = {
                t: {"count": n, "payload_bytes": b}
                for t, n, b in conn.execute(
                    "SELECT type, count(*), sum(length(CAST(payload AS BLOB))) FROM events GROUP BY type ORDER BY type"
                )
            }
            blobs, blob_bytes, pruned = conn.execute(
                "SELECT count(*), coalesce(sum(length(body)), 0), count(pruned_us) FROM blobs"
            ).fetchone()
            page_count = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            head = self.head(conn)[0]
            conn.execute("COMMIT")
        total = sum(v["count"] for v in by_type.values())
        return LedgerStats(total, head, by_type, blobs, blob_bytes, pruned, page_count * page_size)
