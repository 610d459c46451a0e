"""Projections across engines (RFC 0008 step 5): the same scripted events appended through a
``Store`` on SQLite and on PostgreSQL give the same ledger rows and byte-identical projection rows
and cursors; ``Store.replay`` on PostgreSQL agrees with its live rows, and a PostgreSQL store whose
projection rows and cursors are lost rebuilds them, again byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.engines import Intruder, open_store, three_agents_script
from helpers.pg import PgDatabase

from holon.projections import Store

ROWS = "SELECT kind, key, agent_id, status, label, seq, state FROM projection_rows"
CURSORS = "SELECT name, seq, version FROM projection_cursors"


def _snapshot(store: Store) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The ledger's rows, the projection rows and the cursors, as the driver returns them (sorted in
    Python, so no collation decides the order)."""
    store.write_projections()  # the projector writes its rows every few commits: write them now
    raw = Intruder(store)
    try:
        rows = sorted(tuple(r) for r in raw.execute(ROWS).fetchall())
        cursors = sorted(tuple(r) for r in raw.execute(CURSORS).fetchall())
    finally:
        raw.close()
    return [tuple(r) for r in store.ledger.read_rows(0)], rows, cursors


def test_the_same_events_give_byte_identical_projections_and_replay_rebuilds_them(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(tmp_path / "sqlite", monkeypatch, None) as lite:
        assert lite.ledger.engine.dialect == "sqlite"
        three_agents_script(lite, monkeypatch)
        assert lite.replay().ok
        expected = _snapshot(lite)
    events, rows, cursors = expected
    assert cursors and {"agent", "working_memory"} <= {r[0] for r in rows}
    assert "episode.sealed" in {e[3] for e in events}  # derived by the projector, on both engines

    # An empty database of its own, so that creating the ledger reads the clock as on SQLite.
    url = pg_new_db(migrated=False).url
    with open_store(tmp_path / "pg", monkeypatch, url) as pg:
        assert pg.ledger.engine.dialect == "postgresql"
        three_agents_script(pg, monkeypatch)
        assert _snapshot(pg) == expected
        result = pg.replay()
        assert result.ok and result.cursor_ok and result.mismatches == 0, result.examples
        assert result.events == len(events)
        assert pg.ledger.verify().ok
        raw = Intruder(pg)
        raw.execute("DELETE FROM projection_rows")
        raw.execute("DELETE FROM projection_cursors")
        raw.close()
    # Reopened with nothing projected, the store rebuilds every row from the ledger on PostgreSQL.
    with open_store(tmp_path / "pg", monkeypatch, url) as again:
        assert _snapshot(again) == expected
        assert again.replay().ok
