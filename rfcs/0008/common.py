"""Shared helpers of the RFC 0008 measurement scripts: a scratch database per run, the events DDL.

Run every script with a Python that has ``psycopg[binary,pool]`` (and, for ``driver.py``,
``sqlalchemy`` and ``sqlmodel``): ``python3 -m venv /tmp/pgvenv && /tmp/pgvenv/bin/pip install
'psycopg[binary,pool]' sqlalchemy sqlmodel``. ``HOLON_PG`` (default
``postgresql://root@127.0.0.1:5432/postgres``) is the server's maintenance database; each script
creates its own database beside it and drops it at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg

ADMIN_URL = os.environ.get("HOLON_PG", "postgresql://root@127.0.0.1:5432/postgres")
GENESIS = "0" * 64


def url_of(db: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{db}"


@contextlib.contextmanager
def scratch_db(prefix: str = "rfc0008") -> Iterator[str]:
    """A fresh database (dropped on exit); yields its URL."""
    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The events table as holon's schema.ddl("postgresql") renders it (see driver.py), text columns
# in the "C" collation so that ORDER BY and comparisons are byte order, as on SQLite.
EVENTS_DDL = """
CREATE TABLE events (
    seq BIGINT PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL UNIQUE,
    agent_id TEXT COLLATE "C" NOT NULL,
    type TEXT COLLATE "C" NOT NULL,
    version INTEGER NOT NULL,
    ts_us BIGINT NOT NULL,
    origin TEXT COLLATE "C" NOT NULL,
    authority TEXT COLLATE "C" NOT NULL,
    turn_id TEXT COLLATE "C",
    work_item_id TEXT COLLATE "C",
    task_id TEXT COLLATE "C",
    episode_id TEXT COLLATE "C",
    idempotency_key TEXT COLLATE "C",
    payload TEXT NOT NULL,
    hash TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX events_idempotency ON events (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX events_agent ON events (agent_id, seq);
CREATE INDEX events_agent_type ON events (agent_id, type, seq, turn_id);
CREATE TABLE projection_rows (
    kind TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, agent_id TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C", label TEXT COLLATE "C", seq BIGINT NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (kind, key)
);
CREATE INDEX projection_rows_agent ON projection_rows (kind, agent_id);
CREATE TABLE projection_cursors (name TEXT COLLATE "C" PRIMARY KEY, seq BIGINT NOT NULL, version INTEGER NOT NULL);
"""

# Append-only: row triggers refuse UPDATE and DELETE; a statement trigger refuses TRUNCATE (which
# fires no row trigger at all).
APPEND_ONLY_DDL = """
CREATE FUNCTION holon_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'events are append-only: % refused', TG_OP USING ERRCODE = 'P0001'; END $$;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION holon_refuse();
CREATE TRIGGER events_no_delete BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION holon_refuse();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION holon_refuse();
"""

# Gapless and one total order, whoever the client: the trigger itself takes the ledger's
# transaction-level advisory lock (a no-op when the writer already holds it) and then checks
# NEW.seq against the head. Under READ COMMITTED each statement of a plpgsql function reads a
# fresh snapshot, so the max(seq) below is read after the lock is held.
LEDGER_LOCK = 0x686F6C6F6E  # "holon"
GAPLESS_DDL = f"""
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
END $$;
CREATE TRIGGER events_gapless BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION holon_gapless();
"""


def payload_of(i: int, size: int = 300) -> str:
    body = f"word{i % 97} " * (size // 8)
    return json.dumps({"text": body[:size], "turn_id": f"trn_{i // 10:08d}"}, sort_keys=True, separators=(",", ":"))


def chain(prev: str, header: tuple[Any, ...], payload: str) -> str:
    h = hashlib.sha256()
    h.update(prev.encode())
    h.update(b"\n")
    h.update(json.dumps(header, separators=(",", ":")).encode())
    h.update(b"\n")
    h.update(payload.encode())
    return h.hexdigest()


def header_of(seq: int, agent: str, n: int) -> tuple[Any, ...]:
    return (seq, f"evt_{os.getpid():06x}{n:026x}", agent, "tool.resulted", 1, 1_700_000_000_000_000 + n,
            f"agent:{agent}", "agent", f"trn_{n // 10:08d}", None, None, None, None)  # fmt: skip


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def emit(result: dict[str, Any]) -> None:
    result.setdefault("python", sys.version.split()[0])
    result.setdefault("psycopg", psycopg.__version__)
    result.setdefault("measured_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with contextlib.suppress(Exception):
        result.setdefault("load_average", os.getloadavg())
    print(json.dumps(result, indent=2, sort_keys=True))
