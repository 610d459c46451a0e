"""RFC 0008, decision 1: the driver. psycopg 3 directly vs SQLAlchemy Core on psycopg.

* ``imports``: seconds to import each candidate in a fresh interpreter (median of 5);
* ``statement_us``: wall and client-CPU µs per statement inside one open transaction (no COMMIT
  in the loop, so the figure is the driver and one round trip, not the disk): a one-row INSERT of
  an ``events``-shaped row and a primary-key SELECT, through psycopg with its default automatic
  prepare (after 5 executions), never prepared, always prepared, and through SQLAlchemy Core
  (``text()`` and a compiled ``insert()``) on the same psycopg connection type;
* ``batch10_us``: ten rows per call: one ``execute`` each, ``executemany`` (psycopg 3 pipelines it),
  an explicit pipeline, one multi-row ``VALUES``, SQLAlchemy Core ``execute(insert(), rows)``;
* ``ddl``: ``holon.ledger.schema.ddl("postgresql")`` rendered from holon's SQLModel classes (the
  module loaded by path, so no other holon import is needed) and executed on PostgreSQL.

Usage: ``python driver.py [--n 3000]``; prints JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess
import sys
import time
from typing import Any

import psycopg
from common import EVENTS_DDL, emit, header_of, median, payload_of, scratch_db

ROOT = pathlib.Path(__file__).resolve().parents[2]
COLS = "seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, work_item_id, task_id, episode_id, idempotency_key, payload, hash"
INSERT = f"INSERT INTO events ({COLS}) VALUES ({', '.join(['%s'] * 15)})"
IMPORTS = {
    "psycopg": "import psycopg",
    "psycopg_pool": "import psycopg, psycopg_pool",
    "sqlalchemy_core": "import sqlalchemy",
    "sqlalchemy_core_pg_dialect": "import sqlalchemy; sqlalchemy.create_engine('postgresql+psycopg://root@127.0.0.1/test')",
    "sqlmodel": "import sqlmodel",
}


def import_cost() -> dict[str, float]:
    out = {}
    for name, stmt in IMPORTS.items():
        vals = []
        for _ in range(5):
            code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
            vals.append(float(subprocess.check_output([sys.executable, "-c", code], text=True)))
        out[name] = round(median(vals), 4)
    return out


class Seq:
    n = 1_000_000

    def next_rows(self, k: int) -> list[tuple[Any, ...]]:
        rows = []
        for _ in range(k):
            Seq.n += 1
            rows.append((*header_of(Seq.n, "agt_drv", Seq.n), payload_of(Seq.n), "f" * 64))
        return rows


def timed(fn: Any, n: int) -> tuple[float, float]:
    for _ in range(20):
        fn()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6


def statement_costs(url: str, n: int) -> dict[str, Any]:
    seq = Seq()
    out: dict[str, Any] = {}
    from sqlalchemy import MetaData, Table, create_engine, insert, select, text

    for mode, threshold in (
        ("psycopg_auto_prepare", 5),
        ("psycopg_never_prepared", None),
        ("psycopg_always_prepared", 0),
    ):
        with psycopg.connect(url, prepare_threshold=threshold) as c:
            ins = lambda: c.execute(INSERT, seq.next_rows(1)[0])  # noqa: E731
            sel = lambda: c.execute("SELECT payload FROM events WHERE seq = %s", (1_000_001,)).fetchone()  # noqa: E731
            w, cpu = timed(ins, n)
            out[f"{mode}/insert"] = {"wall_us": round(w, 1), "cpu_us": round(cpu, 1)}
            w, cpu = timed(sel, n)
            out[f"{mode}/select_pk"] = {"wall_us": round(w, 1), "cpu_us": round(cpu, 1)}
            c.rollback()
    eng = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    events = Table("events", MetaData(), autoload_with=eng)
    names = [c.name for c in events.columns]
    with eng.connect() as c:
        t_ins = text(f"INSERT INTO events ({COLS}) VALUES ({', '.join(':' + x for x in names)})")
        t_sel = text("SELECT payload FROM events WHERE seq = :s")
        core_ins = insert(events)
        core_sel = select(events.c.payload).where(events.c.seq == 1_000_001)
        cases = {
            "sqlalchemy_text/insert": lambda: c.execute(t_ins, dict(zip(names, seq.next_rows(1)[0], strict=True))),
            "sqlalchemy_core/insert": lambda: c.execute(core_ins, dict(zip(names, seq.next_rows(1)[0], strict=True))),
            "sqlalchemy_text/select_pk": lambda: c.execute(t_sel, {"s": 1_000_001}).fetchone(),
            "sqlalchemy_core/select_pk": lambda: c.execute(core_sel).fetchone(),
        }
        for name, fn in cases.items():
            w, cpu = timed(fn, n)
            out[name] = {"wall_us": round(w, 1), "cpu_us": round(cpu, 1)}
        c.rollback()
    # the cost of the rows themselves (header and payload built in Python), to subtract mentally
    w, cpu = timed(lambda: seq.next_rows(1), n)
    out["row_building_only"] = {"wall_us": round(w, 1), "cpu_us": round(cpu, 1)}
    eng.dispose()
    return out


def batch_costs(url: str, n: int) -> dict[str, Any]:
    seq = Seq()
    out: dict[str, Any] = {}
    from sqlalchemy import MetaData, Table, create_engine, insert

    values10 = f"INSERT INTO events ({COLS}) VALUES " + ", ".join([f"({', '.join(['%s'] * 15)})"] * 10)
    with psycopg.connect(url) as c:
        cur = c.cursor()

        def one_by_one() -> None:
            for r in seq.next_rows(10):
                cur.execute(INSERT, r)

        def pipelined() -> None:
            with c.pipeline():
                for r in seq.next_rows(10):
                    cur.execute(INSERT, r)

        cases = {
            "psycopg_execute_x10": one_by_one,
            "psycopg_executemany": lambda: cur.executemany(INSERT, seq.next_rows(10)),
            "psycopg_pipeline": pipelined,
            "psycopg_multirow_values": lambda: cur.execute(values10, [v for r in seq.next_rows(10) for v in r]),
        }
        for name, fn in cases.items():
            w, cpu = timed(fn, n // 10)
            out[name] = {"wall_us_per_10": round(w, 1), "cpu_us_per_10": round(cpu, 1)}
        c.rollback()
    eng = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    events = Table("events", MetaData(), autoload_with=eng)
    names = [col.name for col in events.columns]
    with eng.connect() as c:
        core_ins = insert(events)
        w, cpu = timed(
            lambda: c.execute(core_ins, [dict(zip(names, r, strict=True)) for r in seq.next_rows(10)]), n // 10
        )
        out["sqlalchemy_core_executemany"] = {"wall_us_per_10": round(w, 1), "cpu_us_per_10": round(cpu, 1)}
        c.rollback()
    eng.dispose()
    return out


def holon_ddl(url: str) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("holon_schema", ROOT / "holon" / "ledger" / "schema.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stmts = mod.ddl("postgresql")
    errors = []
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS public CASCADE")
        c.execute("CREATE SCHEMA public")
        for s in stmts:
            try:
                c.execute(s)
            except psycopg.Error as e:
                errors.append(f"{s[:60]}: {e}")
        cols = c.execute(
            "SELECT table_name, column_name, data_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = 'events' ORDER BY ordinal_position"
        ).fetchall()
    return {"statements": stmts, "errors": errors, "events_columns": [list(x) for x in cols]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    a = ap.parse_args()
    result: dict[str, Any] = {"imports_s": import_cost()}
    with scratch_db("rfc0008_driver") as url:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(EVENTS_DDL)
        result["statement_us"] = statement_costs(url, a.n)
        result["batch10_us"] = batch_costs(url, a.n)
        result["ddl"] = holon_ddl(url)
    import sqlalchemy

    result["sqlalchemy"] = sqlalchemy.__version__
    emit(result)


if __name__ == "__main__":
    main()
