"""The SQLite ledger's schema: named, ordered migrations, each applied once, forwards, in its own transaction.

The bookkeeping table ``schema_migrations`` records each applied version. A migration is plain
DDL so that what it does never changes when Python models change later. ``migrate`` is safe to
call from several processes at once: each step re-checks its row inside ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path

from holon.errors import MigrationError
from holon.ledger.migrations import Migration
from holon.paths import open_private

__all__ = ["MIGRATIONS", "Migration", "create_database", "current_version", "migrate"]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "events",
        (
            """
            CREATE TABLE events (
                seq INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                agent_id TEXT NOT NULL,
                type TEXT NOT NULL,
                version INTEGER NOT NULL,
                ts_us INTEGER NOT NULL,
                origin TEXT NOT NULL,
                authority TEXT NOT NULL,
                turn_id TEXT,
                work_item_id TEXT,
                task_id TEXT,
                episode_id TEXT,
                idempotency_key TEXT,
                payload TEXT NOT NULL,
                hash TEXT NOT NULL
            ) STRICT
            """,
            "CREATE UNIQUE INDEX events_idempotency ON events(idempotency_key) WHERE idempotency_key IS NOT NULL",
            "CREATE INDEX events_agent ON events(agent_id, seq)",
            # Append-only and gapless, enforced by the database itself.
            """
            CREATE TRIGGER events_no_update BEFORE UPDATE ON events
            BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE refused'); END
            """,
            """
            CREATE TRIGGER events_no_delete BEFORE DELETE ON events
            BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused'); END
            """,
            """
            CREATE TRIGGER events_gapless BEFORE INSERT ON events
            WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), 0) + 1 FROM events)
            BEGIN SELECT RAISE(ABORT, 'events.seq must be the next sequence number'); END
            """,
        ),
    ),
    Migration(
        2,
        "blobs",
        (
            """
            CREATE TABLE blobs (
                hash TEXT PRIMARY KEY,
                size INTEGER NOT NULL,
                body BLOB,
                created_us INTEGER NOT NULL,
                referenced_us INTEGER NOT NULL,
                pruned_us INTEGER
            ) STRICT
            """,
            "CREATE INDEX blobs_referenced ON blobs(referenced_us) WHERE body IS NOT NULL",
        ),
    ),
    Migration(
        3,
        "projections",
        (
            """
            CREATE TABLE projection_rows (
                kind TEXT NOT NULL,
                key TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                status TEXT,
                label TEXT,
                seq INTEGER NOT NULL,
                state TEXT NOT NULL,
                UNIQUE (kind, key)
            ) STRICT
            """,
            "CREATE INDEX projection_rows_agent ON projection_rows(kind, agent_id)",
            "CREATE UNIQUE INDEX projection_agent_name ON projection_rows(label) WHERE kind = 'agent'",
            """
            CREATE TABLE projection_cursors (
                name TEXT PRIMARY KEY,
                seq INTEGER NOT NULL,
                version INTEGER NOT NULL
            ) STRICT
            """,
        ),
    ),
    Migration(
        4,
        "events_by_agent_and_type",
        (
            # Covers "this agent's latest events of these types" (history, episodes, briefs):
            # answered from the index alone, so its cost does not grow with the ledger.
            "CREATE INDEX events_agent_type ON events(agent_id, type, seq, turn_id)",
        ),
    ),
)


def _ensure_bookkeeping(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_us INTEGER NOT NULL) STRICT"
    )


def create_database(path: Path, *, now_us: int) -> bool:
    """Create a fully migrated database at ``path`` if there is none; True when this call made it.

    The database is built under a temporary name, closed (its WAL checkpointed away) and then
    linked into place, which fails if ``path`` exists: ``path`` is never seen half-made, several
    processes may race to create it and exactly one wins, and a crash leaves at most a stray
    temporary file, never an empty ``holon.db`` that a later open would have to guess about.
    """
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}-{secrets.token_hex(4)}")
    os.close(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            migrate(conn, now_us=now_us, create=True)
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{tmp}{suffix}")


def _has_bookkeeping(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone()
    return row is not None


def current_version(conn: sqlite3.Connection) -> int:
    _ensure_bookkeeping(conn)
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, *, now_us: int, target: int | None = None, create: bool = True) -> list[int]:
    """Apply pending migrations up to ``target`` (default: all). Returns the versions applied.

    ``conn`` must be in autocommit mode (``isolation_level=None``). With ``create=False`` the
    database must already hold holon's schema (its bookkeeping table): ``migrate`` brings an
    existing holon database forwards and never turns some other database into one.
    """
    if not create and not _has_bookkeeping(conn):
        raise MigrationError("the database holds no holon schema (no schema_migrations table); not creating one")
    _ensure_bookkeeping(conn)
    latest = MIGRATIONS[-1].version
    have = current_version(conn)
    if have > latest:
        raise MigrationError(f"database schema v{have} is newer than this holon (v{latest}); upgrade holon")
    applied: list[int] = []
    for m in MIGRATIONS:
        if target is not None and m.version > target:
            break
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (m.version,)).fetchone()
            if done is None:
                for stmt in m.statements:
                    conn.execute(stmt)
                conn.execute(
                    "INSERT INTO schema_migrations(version, name, applied_us) VALUES (?, ?, ?)",
                    (m.version, m.name, now_us),
                )
                applied.append(m.version)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            conn.execute("ROLLBACK")
            raise MigrationError(f"migration {m.version} ({m.name}) failed: {e}") from e
    return applied
