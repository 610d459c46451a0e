"""Schema migrations: a v1 database is brought forward once, and the SQLModel classes match the DDL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers.factories import agent_created, make_event

from holon.clock import FakeClock
from holon.config import HomePaths, Settings
from holon.errors import MigrationError
from holon.ledger import GENESIS_HASH, Database, Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import chain_hash, encode_payload, envelope_header
from holon.ledger.envelope import header_of
from holon.ledger.schema import BlobRow, EventRow, ProjectionCursorRow, ProjectionRow, SchemaMigrationRow
from holon.ledger.sqlite.migrations import MIGRATIONS, current_version, migrate
from holon.ledger.store import EVENT_INSERT, event_row
from holon.projections import Store

LATEST = MIGRATIONS[-1].version


def _write_v1_events(db: Path, events: list[NewEvent]) -> None:
    """Write events the way holon v1 did: rows with a correct hash chain, straight into ``events``."""
    conn = sqlite3.connect(db, isolation_level=None)
    prev, ts = GENESIS_HASH, 1_700_000_000_000_000
    conn.execute("BEGIN IMMEDIATE")
    for seq, ne in enumerate(events, start=1):
        enc = encode_payload(ne.payload, blob_threshold=1 << 30, preview_chars=10)
        assert not enc.blobs  # v1 has no blob store
        envelope = header_of(ne, seq=seq, event_id=f"evt_v1_{seq:04d}", ts_us=ts + seq)
        h = chain_hash(prev, envelope_header(envelope), enc.text)
        conn.execute(EVENT_INSERT, event_row(envelope, enc.text, h))
        prev = h
    conn.execute("COMMIT")
    conn.close()


def _migrations(db: Path) -> list[tuple[int, str, int]]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT version, name, applied_us FROM schema_migrations ORDER BY version").fetchall()
    conn.close()
    return rows


def _tables(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    conn.close()
    return {r[0] for r in rows}


V1_HISTORY = [
    agent_created("agt_old", "oldtimer", settings={"model": "m0"}),
    make_event("agt_old", ev.MessageReceived(text="hello from v1"), origin="operator:cli", authority="operator"),
    make_event("agt_old", ev.WorkItemOpened(work_item_id="wi_1", title="legacy work", objective="keep it")),
    make_event("agt_old", ev.DecisionRecorded(text="v1 decided this")),
    make_event("agt_old", ev.TurnSettled(turn_id="t1", outcome="completed"), turn_id="t1"),
]


@pytest.fixture
def v1_home(home: HomePaths) -> HomePaths:
    home.root.mkdir(parents=True)
    db = Database(home.db, synchronous="NORMAL")
    assert migrate(db.connection(), now_us=1, target=1) == [1]
    assert current_version(db.connection()) == 1
    db.close()
    assert "blobs" not in _tables(home.db)
    _write_v1_events(home.db, V1_HISTORY)
    return home


def test_v1_database_is_migrated_once_and_caught_up(v1_home: HomePaths, settings: Settings) -> None:
    clock = FakeClock(start_us=5_000)
    with Store.open(v1_home, settings, clock=clock) as store:
        applied = _migrations(v1_home.db)
        assert [(v, n) for v, n, _ in applied] == [(m.version, m.name) for m in MIGRATIONS]
        assert applied[0][2] == 1  # v1 kept its own record
        assert all(at >= 5_000 for _, _, at in applied[1:])
        assert {"events", "blobs", "projection_rows", "projection_cursors", "schema_migrations"} <= _tables(v1_home.db)
        # Projections were built from the v1 events.
        agent = store.agent("oldtimer")
        assert (agent.agent_id, agent.settings, agent.turns, agent.last_turn_id) == (
            "agt_old",
            {"model": "m0"},
            1,
            "t1",
        )
        wm = store.working_memory("agt_old")
        assert (wm["active_work_item"], wm["objective"], wm["recent_decisions"]) == (
            "wi_1",
            "keep it",
            ["v1 decided this"],
        )
        assert store.ledger.verify().ok
        result = store.replay()
        assert result.ok and result.events == len(V1_HISTORY)
        # v1 events read back as they were written; new events chain on top of them.
        assert store.ledger.get(2).payload == ev.MessageReceived(text="hello from v1")
        assert store.ledger.get(2).authority == "operator"
        [e] = store.append(make_event("agt_old", ev.FileTouched(path="new.py")))
        assert e.seq == len(V1_HISTORY) + 1
        assert store.ledger.verify().ok
        assert store.replay().ok
    # Opening again applies nothing.
    with Store.open(v1_home, settings, clock=FakeClock(start_us=9_000_000)) as again:
        assert _migrations(v1_home.db) == applied
        assert migrate(again.ledger.db.connection(), now_us=10) == []
        assert again.replay().ok
        assert again.agent("oldtimer").agent_id == "agt_old"


def test_fresh_database_gets_every_migration(home: HomePaths, settings: Settings) -> None:
    with Store.open(home, settings, clock=FakeClock()) as store:
        assert [v for v, _, _ in _migrations(home.db)] == [m.version for m in MIGRATIONS]
        assert current_version(store.ledger.db.connection()) == LATEST
        assert store.ledger.head() == 0


def test_migrate_to_a_target_then_the_rest(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.db")
    conn = db.connection()
    assert migrate(conn, now_us=1, target=2) == [1, 2]
    assert migrate(conn, now_us=2, target=2) == []
    assert migrate(conn, now_us=3) == list(range(3, LATEST + 1))
    assert migrate(conn, now_us=4) == []
    db.close()


def test_migration_versions_are_ordered_and_unique() -> None:
    versions = [m.version for m in MIGRATIONS]
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)


def test_newer_schema_is_refused(home: HomePaths, settings: Settings) -> None:
    with Store.open(home, settings, clock=FakeClock()) as store:
        store.append(agent_created("agt_1", "one"))
    conn = sqlite3.connect(home.db, isolation_level=None)
    conn.execute(
        "INSERT INTO schema_migrations(version, name, applied_us) VALUES (?, 'from the future', 1)", (LATEST + 1,)
    )
    conn.close()
    with pytest.raises(MigrationError, match="newer"):
        Store.open(home, settings, clock=FakeClock())
    with pytest.raises(MigrationError):
        Ledger(Database(home.db), clock=FakeClock())


def test_failed_migration_is_rolled_back(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.db")
    conn = db.connection()
    migrate(conn, now_us=1, target=1)
    conn.execute("CREATE TABLE blobs (x INTEGER)")  # squatting on the name migration 2 creates
    with pytest.raises(MigrationError, match="migration 2"):
        migrate(conn, now_us=2)
    assert current_version(conn) == 1
    assert not conn.in_transaction
    db.close()


# --- SQLModel classes agree with the migrated tables ------------------------------------------


@pytest.mark.parametrize("model", [EventRow, BlobRow, ProjectionRow, ProjectionCursorRow, SchemaMigrationRow])
def test_sqlmodel_classes_match_the_migrated_schema(home: HomePaths, settings: Settings, model: type) -> None:
    with Store.open(home, settings, clock=FakeClock()):
        pass
    conn = sqlite3.connect(home.db)
    info = conn.execute(f"PRAGMA table_info({model.__tablename__})").fetchall()
    conn.close()
    assert info, f"no table {model.__tablename__}"
    table = model.__table__  # type: ignore[attr-defined]
    db_columns = {name: bool(notnull) or bool(pk) for _cid, name, _type, notnull, _default, pk in info}
    model_columns = {c.name: not c.nullable for c in table.columns}
    assert sorted(model_columns) == sorted(db_columns)
    assert model_columns == db_columns, "NOT NULL differs"


def test_sqlmodel_reads_the_ledger(store: Store) -> None:
    """Typed reads through SQLModel sessions see the same rows as the ledger."""
    from sqlmodel import select

    store.append(agent_created("agt_1", "one"), make_event("agt_1", ev.DecisionRecorded(text="d")))
    with store.ledger.db.session() as s:
        rows = s.exec(select(EventRow).order_by(EventRow.seq)).all()  # type: ignore[arg-type]
        assert [(r.seq, r.type, r.agent_id) for r in rows] == [
            (1, "agent.created", "agt_1"),
            (2, "decision.recorded", "agt_1"),
        ]
        assert [r.hash for r in rows] == [e.hash for e in store.ledger.read()]
        cursor = s.get(ProjectionCursorRow, "projections")
        assert cursor is not None and cursor.seq == 2


# --- the schema classes: one definition, DDL per engine ----------------------------------------


def _shape(db: Path) -> dict[str, object]:
    """Each table's columns (name, NOT NULL or key) and each index (name, unique, columns, partial)."""
    conn = sqlite3.connect(db)
    out: dict[str, object] = {}
    tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        cols = [
            (name, bool(notnull) or bool(pk))
            for _c, name, _t, notnull, _d, pk in conn.execute(f"PRAGMA table_info({table})")
        ]
        indexes = []
        for _seq, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({table})"):
            if origin == "c":  # named indexes (a UNIQUE or PRIMARY KEY constraint's index is the table's business)
                cols_of = [c for _n, _cid, c in conn.execute(f"PRAGMA index_info({name})")]
                indexes.append((name, bool(unique), tuple(cols_of), bool(partial)))
        out[table] = (cols, sorted(indexes))
    conn.close()
    return out


def test_the_schema_classes_generate_the_migrated_schema(home: HomePaths, settings: Settings, tmp_path: Path) -> None:
    """``schema.ddl("sqlite")`` builds the tables and indexes the migrations built (triggers aside)."""
    from holon.ledger.schema import ddl

    with Store.open(home, settings, clock=FakeClock()):
        pass
    generated = tmp_path / "generated.db"
    conn = sqlite3.connect(generated)
    for stmt in ddl("sqlite"):
        conn.execute(stmt)
    conn.close()
    assert _shape(generated) == _shape(home.db)


def test_the_events_table_is_the_envelope() -> None:
    """The ``events`` columns are ``Event``'s fields in order: the column list, INSERT and row
    decoding are derived from them."""
    from holon.ledger.envelope import EVENT_FIELDS
    from holon.ledger.schema import EventRow

    assert tuple(c.name for c in EventRow.__table__.columns) == EVENT_FIELDS  # type: ignore[attr-defined]


def test_the_schema_renders_for_postgresql() -> None:
    """The bridge to a second engine: the same classes give PostgreSQL DDL (64-bit times and seqs)."""
    from holon.ledger.schema import ddl

    statements = ddl("postgresql")
    events = next(s for s in statements if s.startswith("CREATE TABLE events"))
    assert "seq BIGINT NOT NULL" in events and "ts_us BIGINT NOT NULL" in events
    assert (
        "CREATE UNIQUE INDEX events_idempotency ON events (idempotency_key) WHERE idempotency_key IS NOT NULL"
        in statements
    )
