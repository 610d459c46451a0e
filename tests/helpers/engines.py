"""Marks for tests that run over both storage engines (the ``engine`` fixture, RFC 0008 "Tests")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from holon.bench import workload
from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.projections import Store

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


def open_store(root: Path, monkeypatch: pytest.MonkeyPatch, url: str | None) -> Store:
    """A store on a home of its own: the SQLite file (no URL) or the PostgreSQL database ``url``."""
    if url is None:
        monkeypatch.delenv("HOLON_STORAGE_URL", raising=False)
    else:
        monkeypatch.setenv("HOLON_STORAGE_URL", url)
    home = resolve_home(root)
    return Store.open(home, load_settings(home), clock=FakeClock())


def three_agents_script(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three agents' turns (with the episodes, seals and working-memory deltas the projector derives
    from them), appended seven events at a time; ids from a counter, so two runs give the same."""
    counter = itertools.count(1)
    monkeypatch.setattr("holon.ledger.store.new_id", lambda prefix: f"{prefix}_{next(counter):032x}")
    store.append(*workload.creation_events(3))
    events = list(itertools.islice(workload.stream(3), 700))
    for i in range(0, len(events), 7):
        store.append(*events[i : i + 7])
