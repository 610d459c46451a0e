"""Marks for tests that run over both storage engines (the ``engine`` fixture, RFC 0008 "Tests")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

__all__ = ["Intruder", "sqlite_only"]


def sqlite_only(why: str) -> Any:  # Any: pytest's MarkDecorator
    """Run this test on the SQLite engine only; ``why`` says what it checks that only SQLite has
    (a raw ``sqlite3`` connection, the file, its pragmas). Not a skip: the PostgreSQL instance is
    never generated, so no ``postgresql`` test reports skipped."""
    assert why, "say why the test is SQLite's alone"
    return pytest.mark.parametrize("engine", ["sqlite"], indirect=True)


class Intruder:
    """A plain connection of the driver to a store's database beside holon's (``?`` placeholders on
    both engines, autocommit), for tests that change rows behind holon's back or read them raw."""

    def __init__(self, store: Any) -> None:
        self.pg = store.ledger.engine.dialect == "postgresql"
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(store.settings.storage.url, autocommit=True)
        else:
            import sqlite3

            self.conn = sqlite3.connect(store.paths.db, isolation_level=None)

    def _sql(self, sql: str) -> str:
        if self.pg:
            from holon.ledger.pg.conn import pg_sql

            return pg_sql(sql)
        return sql

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        return self.conn.execute(self._sql(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if self.pg:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.conn.executemany(sql, rows)

    def close(self) -> None:
        self.conn.close()
