"""RFC 0008, decision 7: a database per test. What each way of getting a fresh, migrated
PostgreSQL database costs on this machine (median ms of ``--n`` tries each):

* ``create_from_template_wal_log`` / ``_file_copy``: ``CREATE DATABASE t TEMPLATE holon_tpl``
  (PostgreSQL 15's two strategies; the template holds the migrated schema) and its ``DROP``;
* ``schema_per_test``: ``CREATE SCHEMA`` + the DDL run in it (``search_path``), ``DROP SCHEMA CASCADE``;
* ``empty_database_plus_ddl``: ``CREATE DATABASE`` from template0 then the DDL;
* ``reset_by_truncate`` / ``reset_by_delete``: one database kept per worker and emptied between
  tests (200 events in it), in ``session_replication_role = replica`` (the append-only triggers
  do not fire there; superuser only), and the plain TRUNCATE the guard refuses.

Usage: ``python testdb.py [--n 10]``; prints JSON.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import psycopg
from cluster import LEASE_DDL
from common import ADMIN_URL, APPEND_ONLY_DDL, EVENTS_DDL, GAPLESS_DDL, emit, median, url_of

DDL = EVENTS_DDL + APPEND_ONLY_DDL + GAPLESS_DDL + LEASE_DDL


def ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def main() -> None:  # noqa: PLR0915 (one measurement after another, read top to bottom)
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args()
    tpl = f"holon_tpl_{os.getpid()}"
    out: dict[str, Any] = {}
    admin = psycopg.connect(ADMIN_URL, autocommit=True)
    admin.execute(f'DROP DATABASE IF EXISTS "{tpl}"')
    admin.execute(f'CREATE DATABASE "{tpl}"')
    with psycopg.connect(url_of(tpl), autocommit=True) as c:
        c.execute(DDL)
    try:
        for strategy in ("wal_log", "file_copy"):
            create, drop = [], []
            for i in range(a.n):
                name = f"t_{os.getpid()}_{strategy}_{i}"
                t0 = time.perf_counter()
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}" STRATEGY {strategy}')
                create.append(ms(t0))
                t0 = time.perf_counter()
                admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
                drop.append(ms(t0))
            out[f"create_from_template_{strategy}"] = {
                "create_ms": round(median(create), 1),
                "drop_ms": round(median(drop), 1),
            }
        create, drop = [], []
        with psycopg.connect(url_of(tpl), autocommit=True) as c:
            for i in range(a.n):
                s = f"t_{i}"
                t0 = time.perf_counter()
                c.execute(f'CREATE SCHEMA "{s}"')
                c.execute(f'SET search_path = "{s}"')
                c.execute(DDL)
                create.append(ms(t0))
                t0 = time.perf_counter()
                c.execute(f'DROP SCHEMA "{s}" CASCADE')
                c.execute("SET search_path = public")
                drop.append(ms(t0))
        out["schema_per_test"] = {"create_ms": round(median(create), 1), "drop_ms": round(median(drop), 1)}
        create, drop = [], []
        for i in range(a.n):
            name = f"t_{os.getpid()}_empty_{i}"
            t0 = time.perf_counter()
            admin.execute(f'CREATE DATABASE "{name}"')
            with psycopg.connect(url_of(name), autocommit=True) as c:
                c.execute(DDL)
            create.append(ms(t0))
            t0 = time.perf_counter()
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            drop.append(ms(t0))
        out["empty_database_plus_ddl"] = {"create_ms": round(median(create), 1), "drop_ms": round(median(drop), 1)}
        # one database per xdist worker, emptied between tests: TRUNCATE (or DELETE) with the
        # session in replica mode, where ordinary triggers (the append-only guards) do not fire
        # (superuser only: a test-only path, and the reason the runtime role must not be one)
        tables = "events, blobs, projection_rows, projection_cursors, leases, nodes"
        with psycopg.connect(url_of(tpl), autocommit=True) as c:
            c.execute("CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, body BYTEA)")
            for how in ("truncate", "delete"):
                vals = []
                for _ in range(a.n):
                    c.execute(
                        "INSERT INTO events (seq, id, agent_id, type, version, ts_us, origin, authority, payload, hash) "
                        "SELECT g, 'e' || g, 'a', 'message.received', 1, 0, 'o', 'a', 'p', 'h' FROM generate_series(1, 200) g"
                    )
                    t0 = time.perf_counter()
                    with c.transaction():
                        c.execute("SET LOCAL session_replication_role = replica")
                        if how == "truncate":
                            c.execute(f"TRUNCATE {tables}")
                        else:
                            for t in tables.split(", "):
                                c.execute(f"DELETE FROM {t}")
                    vals.append(ms(t0))
                out[f"reset_by_{how}_ms"] = round(median(vals), 1)
            refused = None
            try:
                c.execute("TRUNCATE events")
            except psycopg.Error as e:
                refused = f"{e.sqlstate}: {str(e).splitlines()[0]}"
            out["truncate_without_replica_mode"] = refused
        t0 = time.perf_counter()
        for _ in range(a.n):
            with psycopg.connect(url_of(tpl)) as c:
                c.execute("SELECT 1")
        out["connect_and_query_ms"] = round(ms(t0) / a.n, 2)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{tpl}" WITH (FORCE)')
        admin.close()
    emit(out)


if __name__ == "__main__":
    main()
