"""The PostgreSQL schema (real PostgreSQL, RFC 0008): the migrations apply once, the ledger tables
of migration 1 agree with the SQLModel classes as ``schema.ddl("postgresql")`` renders them today
(columns, types, NOT NULL, keys, indexes, collation), migration 2 adds the node tables (which have
no SQLModel class: they exist on PostgreSQL only) with their fence trigger, and a database newer
than the code is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers.pg import PgDatabase

from holon.errors import MigrationError
from holon.ledger.envelope import EVENT_FIELDS
from holon.ledger.pg.migrations import MIGRATIONS, UNFENCED_TYPES, current_version, latest_version, migrate
from holon.ledger.schema import BlobRow, EventRow, ProjectionCursorRow, ProjectionRow, SchemaMigrationRow, ddl

MODELS = [EventRow, BlobRow, ProjectionRow, ProjectionCursorRow, SchemaMigrationRow]
Conn = psycopg.Connection[tuple[Any, ...]]


def _shape(conn: Conn) -> dict[str, Any]:
    """Each table's columns (name, type, NOT NULL, collation, in order), its constraints (primary
    key, unique) and its indexes (definition as PostgreSQL prints it back)."""
    out: dict[str, Any] = {}
    tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
    for table in tables:
        columns = conn.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(co.collname, '')
            FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
                 AND co.collname <> 'default'
            WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
            """,
            (table,),
        ).fetchall()
        constraints = conn.execute(
            "SELECT contype, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass ORDER BY 1, 2",
            (table,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s ORDER BY indexname",
            (table,),
        ).fetchall()
        # constraint-backed indexes get generated names (events_pkey, events_id_key): compare definitions only
        out[table] = (columns, constraints, sorted(i[0].split(" ON ", 1)[1] for i in indexes))
    return out


NODE_TABLES = {"nodes", "leases", "unfenced_types"}
"""Migration 2's tables (several nodes on one database; no SQLite counterpart)."""


def test_migrations_apply_once(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        assert current_version(conn) == 0
        assert migrate(conn, now_us=7) == [m.version for m in MIGRATIONS]
        assert migrate(conn, now_us=8) == []
        assert current_version(conn) == latest_version()
        rows = conn.execute("SELECT version, name, applied_us FROM schema_migrations ORDER BY version").fetchall()
        assert rows == [(m.version, m.name, 7) for m in MIGRATIONS]
        functions = {r[0] for r in conn.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'holon\\_%%'")}
        assert functions == {"holon_refuse", "holon_gapless", "holon_begin_append", "holon_fence"}
        triggers = {r[0] for r in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        assert triggers == {
            "events_no_update", "events_no_delete", "events_no_truncate", "events_gapless", "events_lease_fence"
        }  # fmt: skip
        assert conn.execute("SELECT * FROM holon_begin_append()").fetchone() == (0, "0" * 64, 0)
        unfenced = [r[0] for r in conn.execute("SELECT type FROM unfenced_types ORDER BY type")]
        assert unfenced == sorted(UNFENCED_TYPES)


def test_migration_1_then_2(pg_new_db: Callable[..., PgDatabase]) -> None:
    """A database at migration 1 (as main built them before) is brought to 2 with its events kept."""
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        assert migrate(conn, now_us=1, target=1) == [1]
        assert conn.execute("SELECT to_regclass('leases')").fetchone() == (None,)
        assert migrate(conn, now_us=2, target=2) == [2]
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert tables >= NODE_TABLES
        unfenced = {r[0] for r in conn.execute("SELECT type FROM unfenced_types")}
        assert "turn.abort_requested" not in unfenced and "message.received" in unfenced


def test_migration_3_declares_the_abort_request_unfenced(pg_new_db: Callable[..., PgDatabase]) -> None:
    """A database at migration 2 (as the first nodes built them) gains ``turn.abort_requested`` in
    ``unfenced_types`` (RFC 0008 section 4, "Aborts across nodes"), the rest of the list kept."""
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        assert migrate(conn, now_us=1, target=2) == [1, 2]
        assert migrate(conn, now_us=2) == [3]
        unfenced = [r[0] for r in conn.execute("SELECT type FROM unfenced_types ORDER BY type")]
        assert unfenced == sorted(UNFENCED_TYPES) and "turn.abort_requested" in unfenced


def test_fence_fires_after_the_gapless_trigger(pg_db: PgDatabase) -> None:
    """Same-event triggers fire in name order: the fence's lease read must come after
    ``events_gapless`` took the ledger lock, so no takeover commits between check and insert."""
    with pg_db.connect() as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'events'::regclass AND NOT tgisinternal "
                "AND tgtype & 4 = 4 ORDER BY tgname"  # INSERT triggers, in firing order
            )
        ]
        assert names == ["events_gapless", "events_lease_fence"]


def test_migrated_database_matches_the_schema_classes(pg_new_db: Callable[..., PgDatabase]) -> None:
    """What migration 1 built (frozen text) is what the SQLModel classes generate today."""
    migrated, generated = pg_new_db(), pg_new_db(migrated=False)
    with generated.connect() as conn:
        for statement in ddl("postgresql"):
            conn.execute(statement)
        want = _shape(conn)
    with migrated.connect() as conn:
        have = _shape(conn)
    assert sorted(have) == sorted([*want, *NODE_TABLES])
    have = {t: v for t, v in have.items() if t not in NODE_TABLES}
    assert sorted(have) == sorted(want) == sorted(m.__tablename__ for m in MODELS)
    for table in want:
        assert have[table] == want[table], table
    # and the classes say it: column order is the envelope's, NOT NULL and keys as declared
    columns, constraints, _indexes = have["events"]
    assert tuple(c[0] for c in columns) == EVENT_FIELDS
    for model in MODELS:
        cols = {c[0]: c[2] for c in have[model.__tablename__][0]}
        table = model.__table__  # type: ignore[attr-defined]
        assert cols == {c.name: not c.nullable for c in table.columns}, model.__tablename__
    assert ("p", "PRIMARY KEY (seq)") in constraints and ("u", "UNIQUE (id)") in constraints


def test_text_keys_compare_bytewise(pg_db: PgDatabase) -> None:
    """Key and label columns are ``COLLATE "C"`` (SQLite's byte order); documents are plain text."""
    with pg_db.connect() as conn:
        rows = conn.execute(
            """
            SELECT c.table_name, c.column_name, coalesce(c.collation_name, '') FROM information_schema.columns c
            WHERE c.table_schema = 'public' AND c.data_type IN ('character varying', 'text')
            """
        ).fetchall()
        documents = {("events", "payload"), ("projection_rows", "state")}
        assert rows
        for table, column, collation in rows:
            assert collation == ("" if (table, column) in documents else "C"), (table, column)
        ordered = conn.execute("SELECT x COLLATE \"C\" FROM (VALUES ('a'), ('B'), ('_')) v(x) ORDER BY 1").fetchall()
        assert [r[0] for r in ordered] == ["B", "_", "a"]  # bytes: 0x42 < 0x5F < 0x61, as SQLite sorts


def test_newer_schema_is_refused(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db()
    with db.connect() as conn:
        newer = latest_version() + 1
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_us) VALUES (%s, 'from the future', 1)", (newer,)
        )
        with pytest.raises(MigrationError, match=rf"schema v{newer} is newer than this holon \(v{latest_version()}\)"):
            migrate(conn, now_us=2)
        with pytest.raises(MigrationError, match="newer"):
            migrate(conn, now_us=2, create=False)


def test_a_database_without_holon_schema_is_not_created_into(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        with pytest.raises(MigrationError, match="holds no holon schema"):
            migrate(conn, now_us=1, create=False)
        assert current_version(conn) == 0


def test_failed_migration_is_rolled_back(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        conn.execute("CREATE TABLE blobs (x INTEGER)")  # squatting on a name migration 1 creates
        with pytest.raises(MigrationError, match=r"migration 1 \(ledger\) failed on PostgreSQL: .*blobs"):
            migrate(conn, now_us=1)
        assert current_version(conn) == 0
        assert conn.execute("SELECT to_regclass('events')").fetchone() == (None,)
