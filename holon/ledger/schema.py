"""SQLModel table classes describing the current schema, for typed reads.

The DDL itself lives in ``holon.ledger.migrations`` (what a migration does must never change);
``tests/test_migrations.py`` checks that these classes and the migrated database agree.
"""

from __future__ import annotations

from sqlmodel import Field, SQLModel

__all__ = ["BlobRow", "EventRow", "ProjectionCursorRow", "ProjectionRow", "SchemaMigrationRow"]


class EventRow(SQLModel, table=True):
    __tablename__ = "events"

    seq: int = Field(primary_key=True)
    id: str = Field(unique=True)
    agent_id: str
    type: str
    version: int
    ts_us: int
    origin: str
    authority: str
    turn_id: str | None = None
    work_item_id: str | None = None
    task_id: str | None = None
    episode_id: str | None = None
    idempotency_key: str | None = None
    payload: str
    hash: str


class BlobRow(SQLModel, table=True):
    __tablename__ = "blobs"

    hash: str = Field(primary_key=True)
    size: int
    body: bytes | None = None
    created_us: int
    referenced_us: int
    pruned_us: int | None = None


class ProjectionRow(SQLModel, table=True):
    __tablename__ = "projection_rows"

    kind: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    agent_id: str
    status: str | None = None
    label: str | None = None
    seq: int
    state: str


class ProjectionCursorRow(SQLModel, table=True):
    __tablename__ = "projection_cursors"

    name: str = Field(primary_key=True)
    seq: int
    version: int


class SchemaMigrationRow(SQLModel, table=True):
    __tablename__ = "schema_migrations"

    version: int = Field(primary_key=True)
    name: str
    applied_us: int
