"""Opening the SQLite database: one SQLAlchemy engine per home, pragmas on every connection.

Writes go through the engine's raw DB-API connection in autocommit mode so that holon issues
``BEGIN IMMEDIATE`` / ``COMMIT`` itself: explicit write transactions that take the write lock up
front and never deadlock on a lock upgrade. Typed reads may use SQLModel sessions on the same
engine. WAL lets readers run beside the single writer; ``busy_timeout`` makes a second process
wait for the lock instead of failing with "database is locked".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlmodel import Session, create_engine

__all__ = ["Database"]


class Database:
    def __init__(self, path: Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self._pragmas = (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA synchronous={synchronous}",
            f"PRAGMA busy_timeout={int(busy_timeout_ms)}",
            "PRAGMA foreign_keys=ON",
            "PRAGMA temp_store=MEMORY",
            # 64 MiB of page cache per connection (default 2 MiB): hot index pages stay in memory.
            "PRAGMA cache_size=-65536",
        )
        self.engine: Engine = create_engine(
            f"sqlite:///{path}",
            connect_args={
                "isolation_level": None,
                "check_same_thread": False,
                "timeout": busy_timeout_ms / 1000,
            },
            pool_size=2,
            max_overflow=8,
        )
        event.listen(self.engine, "connect", self._on_connect)
        self._raw: Any = None

    def _on_connect(self, dbapi_conn: sqlite3.Connection, _record: object) -> None:
        for pragma in self._pragmas:
            dbapi_conn.execute(pragma)

    @property
    def pragmas(self) -> tuple[str, ...]:
        return self._pragmas

    def connection(self) -> sqlite3.Connection:
        """The writer connection (autocommit DB-API connection), opened on first use."""
        if self._raw is None:
            self._raw = self.engine.raw_connection()
        conn: sqlite3.Connection = self._raw.driver_connection
        return conn

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own for a long read (stats over the whole ledger) from a worker
        thread: under WAL it reads a snapshot beside the writer and never holds the writer's lock."""
        raw = self.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert isinstance(conn, sqlite3.Connection)  # the engine is always SQLite's pysqlite
            yield conn
        finally:
            raw.close()

    def session(self) -> Session:
        return Session(self.engine)

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self.engine.dispose()
