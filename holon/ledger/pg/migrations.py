"""The PostgreSQL schema's history: named, ordered migrations, each applied once in its own transaction.

As on SQLite (``holon.ledger.migrations``) a migration is frozen text: what built a database never
changes when the SQLModel classes change later. Migration 1 is ``holon.ledger.schema.ddl
("postgresql")`` as it rendered when it was written (text keys in ``COLLATE "C"``, so that
ordering agrees with SQLite's bytewise comparison), plus what no portable metadata can say
(RFC 0008, "Append-only and gapless in the database"):

* ``events`` is append-only: row triggers refuse UPDATE and DELETE, and a statement trigger refuses
  TRUNCATE (which fires no row trigger);
* ``events`` is gapless in one total order: the row trigger takes the ledger lock itself (a no-op
  for the writer already holding it), so any client, ``psql`` included, is serialized, then checks
  the new ``seq`` against the head, read after the lock in a fresh READ COMMITTED snapshot;
* ``holon_begin_append()`` takes the ledger lock and reads the head in one round trip.

Migration 2 adds what several nodes sharing the database need (RFC 0008, "Leases with fencing
tokens"): ``nodes``, ``leases`` (expiry in database time), ``unfenced_types`` and the fence
trigger, which refuses an event of a fenced type unless the transaction's ``holon.fence`` setting
names the agent's live lease (``holon.ledger.pg.leases``).

``migrate`` serializes concurrent runners with a second advisory lock (``MIGRATION_LOCK``) instead
of SQLite's ``BEGIN IMMEDIATE`` and refuses a database whose schema is newer than this code.
``tests/test_pg_migrations.py`` checks the migrated database against the SQLModel classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from holon.errors import MigrationError, SchemaMismatch

__all__ = [
    "LEDGER_LOCK",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "UNFENCED_TYPES",
    "Migration",
    "current_version",
    "latest_version",
    "migrate",
]

LEDGER_LOCK = 0x686F6C6F6E
"""The transaction-level advisory lock every append holds ("holon" in ASCII). Advisory locks are
per database, so two holon databases on one server never contend."""
MIGRATION_LOCK = LEDGER_LOCK + 1
"""Held by whoever applies migrations, one step at a time."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


# Bookkeeping first (its own statement, created by ``migrate`` before migration 1 so that the
# step can be recorded): the ``schema_migrations`` table as ``ddl("postgresql")`` renders it.
_BOOKKEEPING = """
    CREATE TABLE schema_migrations (
        version INTEGER NOT NULL,
        name VARCHAR COLLATE "C" NOT NULL,
        applied_us BIGINT NOT NULL,
        PRIMARY KEY (version)
    )
    """

_TABLES: tuple[str, ...] = (
    # --- holon.ledger.schema.ddl("postgresql") as rendered for this migration (whitespace aside,
    # schema_migrations apart); frozen ---
    """
    CREATE TABLE blobs (
        hash VARCHAR COLLATE "C" NOT NULL,
        size BIGINT NOT NULL,
        body BYTEA,
        created_us BIGINT NOT NULL,
        referenced_us BIGINT NOT NULL,
        pruned_us BIGINT,
        PRIMARY KEY (hash)
    )
    """,
    "CREATE INDEX blobs_referenced ON blobs (referenced_us) WHERE body IS NOT NULL",
    """
    CREATE TABLE events (
        seq BIGINT NOT NULL,
        id VARCHAR COLLATE "C" NOT NULL,
        agent_id VARCHAR COLLATE "C" NOT NULL,
        type VARCHAR COLLATE "C" NOT NULL,
        version INTEGER NOT NULL,
        ts_us BIGINT NOT NULL,
        origin VARCHAR COLLATE "C" NOT NULL,
        authority VARCHAR COLLATE "C" NOT NULL,
        turn_id VARCHAR COLLATE "C",
        work_item_id VARCHAR COLLATE "C",
        task_id VARCHAR COLLATE "C",
        episode_id VARCHAR COLLATE "C",
        idempotency_key VARCHAR COLLATE "C",
        payload VARCHAR NOT NULL,
        hash VARCHAR COLLATE "C" NOT NULL,
        PRIMARY KEY (seq),
        UNIQUE (id)
    )
    """,
    "CREATE INDEX events_agent ON events (agent_id, seq)",
    "CREATE INDEX events_agent_type ON events (agent_id, type, seq, turn_id)",
    "CREATE UNIQUE INDEX events_idempotency ON events (idempotency_key) WHERE idempotency_key IS NOT NULL",
    """
    CREATE TABLE projection_cursors (
        name VARCHAR COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (name)
    )
    """,
    """
    CREATE TABLE projection_rows (
        kind VARCHAR COLLATE "C" NOT NULL,
        key VARCHAR COLLATE "C" NOT NULL,
        agent_id VARCHAR COLLATE "C" NOT NULL,
        status VARCHAR COLLATE "C",
        label VARCHAR COLLATE "C",
        seq BIGINT NOT NULL,
        state VARCHAR NOT NULL,
        PRIMARY KEY (kind, key)
    )
    """,
    "CREATE UNIQUE INDEX projection_agent_name ON projection_rows (label) WHERE kind = 'agent'",
    "CREATE INDEX projection_rows_agent ON projection_rows (kind, agent_id)",
)

_GUARDS: tuple[str, ...] = (
    """
    CREATE FUNCTION holon_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'events are append-only: % refused', TG_OP USING ERRCODE = 'P0001';
    END $$
    """,
    "CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION holon_refuse()",
    "CREATE TRIGGER events_no_delete BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION holon_refuse()",
    "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION holon_refuse()",
    f"""
    CREATE FUNCTION holon_gapless() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE head BIGINT;
    BEGIN
      PERFORM pg_advisory_xact_lock({LEDGER_LOCK});
      SELECT seq INTO head FROM events ORDER BY seq DESC LIMIT 1;
      IF NEW.seq IS DISTINCT FROM coalesce(head, 0) + 1 THEN
        RAISE EXCEPTION 'events.seq must be the next sequence number (% after %)', NEW.seq, coalesce(head, 0)
          USING ERRCODE = 'P0002';
      END IF;
      RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER events_gapless BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION holon_gapless()",
    f"""
    CREATE FUNCTION holon_begin_append(OUT head_seq BIGINT, OUT head_hash TEXT, OUT head_ts_us BIGINT)
    LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_advisory_xact_lock({LEDGER_LOCK});
      SELECT seq, hash, ts_us INTO head_seq, head_hash, head_ts_us FROM events ORDER BY seq DESC LIMIT 1;
      IF head_seq IS NULL THEN
        head_seq := 0; head_hash := repeat('0', 64); head_ts_us := 0;
      END IF;
    END $$
    """,
)

_UNFENCED_V2: tuple[str, ...] = (
    "message.received",  # an input, through any node's API or CLI (RFC 0008, "API on any node")
    "wait.resolved",  # stored with the input that resolves the wait (holon.runtime.inputs)
    "agent.created",  # no lease can exist before the agent does; created on any node
    "agent.configured",  # operator command on any node (holon agent config, the API)
    "agent.deleted",  # operator command on any node (holon.daemon.deletion)
    "timer.scheduled",  # operator command or API on any node
    "timer.cancelled",  # operator command, and with agent.deleted in its transaction
    "timer.fired",  # claimed once cluster-wide by its idempotency key, whichever node fires
    "lease.released",  # a node may record giving up a lease that already ran out
    "proposal.accepted",  # operator review on any node (holon.evolve.review) ...
    "proposal.dismissed",
    "durable.recorded",  # ... which records the accepted entry in the same transaction
    "durable.forgotten",  # operator command (holon memory forget)
    "episode.sealed",  # derived by the projector in the transaction reaching the episode's boundary,
    # which may be an input's (an operator message switching topic, or after an idle gap)
)
"""Migration 2's list, as it was applied (a later type is added by a migration of its own)."""
_UNFENCED_V3: tuple[str, ...] = (
    "turn.abort_requested",  # POST .../abort on a node that does not run the turn: the owner acts on it
)
UNFENCED_TYPES: tuple[str, ...] = _UNFENCED_V2 + _UNFENCED_V3
"""Event types any node may append for any agent without holding its lease (migration 2's
``unfenced_types`` rows): inputs and operator commands, which never run a turn. Every other type,
``lease.acquired`` included (its own transaction holds the new lease), needs the fence. The list
is closed: a new type is fenced unless a migration declares it here."""

_NODES: tuple[str, ...] = (
    """
    CREATE TABLE nodes (
        name VARCHAR COLLATE "C" NOT NULL,
        host VARCHAR COLLATE "C" NOT NULL,
        pid INTEGER NOT NULL,
        url VARCHAR COLLATE "C",
        schema_version INTEGER NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        seen_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (name)
    )
    """,
    """
    CREATE TABLE leases (
        agent_id VARCHAR COLLATE "C" NOT NULL,
        node VARCHAR COLLATE "C" NOT NULL,
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (agent_id)
    )
    """,
    "CREATE INDEX leases_node ON leases (node)",
    """
    CREATE TABLE unfenced_types (
        type VARCHAR COLLATE "C" NOT NULL,
        PRIMARY KEY (type)
    )
    """,
    "INSERT INTO unfenced_types (type) VALUES " + ", ".join(f"('{t}')" for t in _UNFENCED_V2),
    # The fence. Named so that it fires after events_gapless (same-event triggers fire in name
    # order), which holds the ledger lock by then: a client that skipped holon_begin_append() is
    # checked under the lock too, so no takeover can commit between its check and its insert.
    """
    CREATE FUNCTION holon_fence() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      f JSONB;
      want TEXT;
      l RECORD;
    BEGIN
      IF EXISTS (SELECT 1 FROM unfenced_types WHERE type = NEW.type) THEN
        RETURN NEW;
      END IF;
      f := nullif(current_setting('holon.fence', true), '')::jsonb;
      want := f -> 'tokens' ->> NEW.agent_id;
      IF want IS NULL AND NOT EXISTS (SELECT 1 FROM leases WHERE agent_id = NEW.agent_id) THEN
        RETURN NEW;  -- never leased: a single process without nodes owns every agent
      END IF;
      IF want IS NULL THEN
        RAISE EXCEPTION 'fencing: % for agent % needs the agent''s lease (no fence for it in this transaction)',
          NEW.type, NEW.agent_id USING ERRCODE = 'HLF01', DETAIL = NEW.agent_id;
      END IF;
      SELECT node, token, expires_at INTO l FROM leases WHERE agent_id = NEW.agent_id;
      IF NOT FOUND OR l.node <> f ->> 'node' OR l.token <> want::bigint OR l.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'fencing: node % (token %) no longer holds the lease of agent %', f ->> 'node', want,
          NEW.agent_id USING ERRCODE = 'HLF01', DETAIL = NEW.agent_id;
      END IF;
      RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER events_lease_fence BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION holon_fence()",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "ledger", _TABLES + _GUARDS),
    Migration(2, "nodes", _NODES),
    Migration(
        3,
        "abort requests",
        ("INSERT INTO unfenced_types (type) VALUES " + ", ".join(f"('{t}')" for t in _UNFENCED_V3),),
    ),
)


def latest_version() -> int:
    return MIGRATIONS[-1].version


Conn = psycopg.Connection[tuple[Any, ...]]


def _has_bookkeeping(conn: Conn) -> bool:
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    return bool(row and row[0])


def current_version(conn: Conn) -> int:
    """The highest applied migration (0 for a database without holon's schema)."""
    if not _has_bookkeeping(conn):
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row else 0


def _check_not_newer(conn: Conn) -> None:
    have, latest = current_version(conn), latest_version()
    if have > latest:
        raise SchemaMismatch(
            f"the PostgreSQL database's schema v{have} is newer than this holon (v{latest}); upgrade holon"
        )


_OLDER_LIVE_NODES = """
SELECT n.name, n.schema_version FROM nodes n
WHERE n.schema_version < %s AND EXISTS (
  SELECT 1 FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('holon.node:' || n.name, 0))
ORDER BY n.name
"""
"""Nodes running code older than a migration, live: their name's session lock is held (the lock
dies with the node's connection, so a crashed or stopped node does not count)."""


def _check_no_older_nodes(conn: Conn, version: int) -> None:
    """Refuse migration ``version`` while a live node runs older code (RFC 0008, "Schema
    versions"): it would meet a schema it does not know. Stop-all-upgrade-start, or upgrade the
    listed nodes first."""
    if conn.execute("SELECT to_regclass('nodes')").fetchone() in (None, (None,)):
        return  # before migration 2: no nodes
    older = conn.execute(_OLDER_LIVE_NODES, (version,)).fetchall()
    if older:
        names = ", ".join(f"{name} (v{v})" for name, v in older)
        raise SchemaMismatch(
            f"migration {version} is due, but live nodes run an older holon: {names}; stop or upgrade them first"
        )


def migrate(conn: Conn, *, now_us: int, target: int | None = None, create: bool = True) -> list[int]:
    """Apply pending migrations up to ``target`` (default: all); returns the versions applied.

    ``conn`` must be in autocommit mode (each step is its own transaction). Safe beside other
    runners: each step takes ``MIGRATION_LOCK`` and re-checks its row. With ``create=False`` the
    database must already hold holon's schema: an empty or foreign database is never turned
    into a ledger silently."""
    if not conn.autocommit:
        raise ValueError("migrate needs an autocommit connection (each migration is its own transaction)")
    applied: list[int] = []
    step = "the schema check"
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if not _has_bookkeeping(conn):
                if not create:
                    raise MigrationError(
                        "the PostgreSQL database holds no holon schema (no schema_migrations table); not creating one"
                    )
                conn.execute(_BOOKKEEPING)
            _check_not_newer(conn)
        for m in MIGRATIONS:
            if target is not None and m.version > target:
                break
            step = f"migration {m.version} ({m.name})"
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                _check_not_newer(conn)  # another runner may have moved on meanwhile
                done = conn.execute("SELECT 1 FROM schema_migrations WHERE version = %s", (m.version,)).fetchone()
                if done is not None:
                    continue
                _check_no_older_nodes(conn, m.version)
                for statement in m.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_us) VALUES (%s, %s, %s)",
                    (m.version, m.name, now_us),
                )
                applied.append(m.version)
    except psycopg.OperationalError:
        raise  # the server went away: not a problem of the schema (the caller translates it)
    except psycopg.Error as e:
        raise MigrationError(f"{step} failed on PostgreSQL: {str(e).strip().splitlines()[0]}") from e
    return applied
