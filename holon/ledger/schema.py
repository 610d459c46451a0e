"""The schema of a holon database as SQLModel table classes: one definition, DDL for any engine.

These classes are the single description of the tables, their columns and their indexes.
``ddl(dialect)`` renders it for an engine SQLAlchemy knows (``"sqlite"``, ``"postgresql"``): the
bridge a second storage engine starts from (RFC 0001, "The storage seam"). What no portable
metadata can say is per engine: the ``events`` triggers that make the table append-only and
gapless, and SQLite's ``STRICT`` tables.

PostgreSQL's history is frozen text too (``holon.ledger.pg.migrations``, migration 1 rendered from
``ddl("postgresql")``); ``tests/test_pg_migrations.py`` checks that database against these classes.

SQLite's own DDL is history: ``holon.ledger.sqlite.migrations`` holds the statements that built every
existing database and never changes them. ``tests/test_migrations.py`` checks that these classes,
the DDL they generate and the migrated database agree (columns, NOT NULL, keys, indexes), and that
the ``events`` columns are the envelope's ``EVENT_FIELDS`` in order.

This module imports SQLAlchemy (most of a second of start-up): nothing on a hot path imports it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String, text
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlmodel import Field, SQLModel

__all__ = ["BlobRow", "EventRow", "ProjectionCursorRow", "ProjectionRow", "SchemaMigrationRow", "ddl"]

#: Microsecond times and sequence numbers outgrow 32 bits: BIGINT, except on SQLite where
#: ``INTEGER`` is already 64-bit (and only ``INTEGER PRIMARY KEY`` is the rowid).
Int64: Any = BigInteger().with_variant(Integer(), "sqlite")


#: Text compared as bytes on every engine: SQLite compares text bytewise; PostgreSQL compares in the
#: database's collation (``en_US.UTF-8`` orders ``a`` < ``B``), so key and label columns are
#: ``COLLATE "C"`` there and any ``ORDER BY`` over them agrees across engines (RFC 0008,
#: "Collation"). The SQLite DDL is unchanged (``VARCHAR``, as SQLModel's ``str`` renders it).
#: Documents (``payload``, ``state``) are never compared or sorted: plain text.
ByteText: Any = String().with_variant(String(collation="C"), "postgresql")


def _text(*, primary_key: bool = False, unique: bool = False, nullable: bool = False) -> Any:  # Any: SQLModel's Field
    return Field(default=None if nullable else ..., primary_key=primary_key, unique=unique, sa_type=ByteText)


def _int64(*, primary_key: bool = False, nullable: bool = False) -> Any:  # Any: SQLModel's Field
    kwargs: dict[str, Any] = {"autoincrement": False} if primary_key else {}
    return Field(default=None if nullable else ..., primary_key=primary_key, sa_type=Int64, sa_column_kwargs=kwargs)


class EventRow(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        Index(
            "events_idempotency", "idempotency_key", unique=True,
            sqlite_where=text("idempotency_key IS NOT NULL"), postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index("events_agent", "agent_id", "seq"),
        Index("events_agent_type", "agent_id", "type", "seq", "turn_id"),
    )  # fmt: skip

    seq: int = _int64(primary_key=True)
    id: str = _text(unique=True)
    agent_id: str = _text()
    type: str = _text()
    version: int
    ts_us: int = _int64()
    origin: str = _text()
    authority: str = _text()
    turn_id: str | None = _text(nullable=True)
    work_item_id: str | None = _text(nullable=True)
    task_id: str | None = _text(nullable=True)
    episode_id: str | None = _text(nullable=True)
    idempotency_key: str | None = _text(nullable=True)
    payload: str
    hash: str = _text()


class BlobRow(SQLModel, table=True):
    __tablename__ = "blobs"
    __table_args__ = (
        Index("blobs_referenced", "referenced_us", sqlite_where=text("body IS NOT NULL"),
              postgresql_where=text("body IS NOT NULL")),
    )  # fmt: skip

    hash: str = _text(primary_key=True)
    size: int = _int64()
    body: bytes | None = None
    created_us: int = _int64()
    referenced_us: int = _int64()
    pruned_us: int | None = _int64(nullable=True)


class ProjectionRow(SQLModel, table=True):
    __tablename__ = "projection_rows"
    __table_args__ = (
        Index("projection_rows_agent", "kind", "agent_id"),
        Index("projection_agent_name", "label", unique=True, sqlite_where=text("kind = 'agent'"),
              postgresql_where=text("kind = 'agent'")),
    )  # fmt: skip

    kind: str = _text(primary_key=True)
    key: str = _text(primary_key=True)
    agent_id: str = _text()
    status: str | None = _text(nullable=True)
    label: str | None = _text(nullable=True)
    seq: int = _int64()
    state: str


class ProjectionCursorRow(SQLModel, table=True):
    __tablename__ = "projection_cursors"

    name: str = _text(primary_key=True)
    seq: int = _int64()
    version: int


class SchemaMigrationRow(SQLModel, table=True):
    __tablename__ = "schema_migrations"

    version: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    name: str = _text()
    applied_us: int = _int64()


def ddl(dialect: str) -> list[str]:
    """``CREATE TABLE`` and ``CREATE INDEX`` statements of every table, for the named SQLAlchemy
    dialect (``"sqlite"``, ``"postgresql"``); no database driver is needed."""
    from sqlalchemy.dialects import registry

    engine_dialect = registry.load(dialect)()
    out: list[str] = []
    for table in SQLModel.metadata.sorted_tables:
        out.append(str(CreateTable(table).compile(dialect=engine_dialect)).strip())
        out += [str(CreateIndex(i).compile(dialect=engine_dialect)).strip() for i in sorted(table.indexes, key=str)]
    return out
