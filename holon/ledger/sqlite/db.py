"""Opening the SQLite database: plain ``sqlite3`` connections, pragmas on every connection.

The writer connection is in autocommit mode so that holon issues ``BEGIN IMMEDIATE`` / ``COMMIT``
itself: explicit write transactions that take the write lock up front and never deadlock on a
lock upgrade. WAL lets readers run beside the single writer; ``busy_timeout`` makes a second
process wait for the lock instead of failing with "database is locked".

SQLAlchemy and SQLModel are not imported here: they cost more start-up time than a CLI command
takes (RFC 0001, "The storage seam"). ``session()`` imports them on first use, for the typed
inspection reads of ``holon.ledger.schema``'s table classes; every hot path runs prepared
statements on the connections below.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from holon.ledger.sql import Params, Row

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlmodel import Session

__all__ = ["Database", "SqliteConn"]


class SqliteConn(sqlite3.Connection):
    """The SQLite engine's ``holon.ledger.sql.Conn``: the ``sqlite3`` connection itself, plus
    ``dialect`` and the two fetch helpers (``execute``/``executemany`` stay the C methods)."""

    dialect: Final = "sqlite"

    def fetchone(self, sql: str, parameters: Params = ()) -> Row | None:
        row: Row | None = self.execute(sql, parameters).fetchone()
        return row

    def fetchall(self, sql: str, parameters: Params = ()) -> list[Row]:
        return self.execute(sql, parameters).fetchall()


class Database:
    def __init__(self, path: Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._pragmas = (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA synchronous={synchronous}",
            f"PRAGMA busy_timeout={int(busy_timeout_ms)}",
            "PRAGMA foreign_keys=ON",
            "PRAGMA temp_store=MEMORY",
            # 64 MiB of page cache per connection (default 2 MiB): hot index pages stay in memory.
            "PRAGMA cache_size=-65536",
        )
        self._conn: SqliteConn | None = None
        self._engine: Engine | None = None

    @property
    def pragmas(self) -> tuple[str, ...]:
        return self._pragmas

    def connect(self) -> SqliteConn:
        """A new autocommit connection with holon's pragmas (the caller closes it)."""
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self._busy_timeout_s, factory=SqliteConn
        )
        try:
            for pragma in self._pragmas:
                conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        return conn

    def connection(self) -> SqliteConn:
        """The writer connection (autocommit), opened on first use."""
        if self._conn is None:
            self._conn = self.connect()
        return self._conn

    @contextmanager
    def reader(self) -> Iterator[SqliteConn]:
        """A connection of its own for a long read (stats over the whole ledger) from a worker
        thread: under WAL it reads a snapshot beside the writer and never holds the writer's lock."""
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    @property
    def engine(self) -> Engine:
        """A SQLAlchemy engine on the same file (imported and built on first use; same pragmas)."""
        if self._engine is None:
            from sqlmodel import create_engine

            self._engine = create_engine(f"sqlite:///{self.path}", creator=self.connect, pool_size=2, max_overflow=8)
        return self._engine

    def session(self) -> Session:
        """A SQLModel session for typed reads of ``holon.ledger.schema``'s tables (not a hot path)."""
        from sqlmodel import Session

        return Session(self.engine)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
