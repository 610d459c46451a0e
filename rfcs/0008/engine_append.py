"""Append events/s through holon's PostgreSQL engine (``Ledger`` on ``PgEngine``) against the
standalone prototype (``holon.ledger.pg.append.append``, two round trips) and SQLite, same run.

Unlike the other scripts here this one imports holon (run it from the repository root with
``PYTHONPATH=$PWD``): it measures holon's own code. Each variant appends for ``--seconds`` into a
database of its own (``synchronous_commit`` as ``--sync``; SQLite at ``synchronous=NORMAL``, its
analogue), rounds alternate the variants; prints JSON with the median events/s of each.

    PYTHONPATH=$PWD python rfcs/0008/engine_append.py --seconds 2 --rounds 3 --sync off
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from holon.clock import SystemClock
from holon.ids import new_id
from holon.ledger import Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import chain_hash_of, encode_payload
from holon.ledger.envelope import header_values
from holon.ledger.pg import append as pg_append
from holon.ledger.pg.engine import PgEngine
from holon.ledger.sqlite import Database, SqliteEngine
from holon.projections.projector import Projector

ADMIN = os.environ.get("HOLON_PG", "postgresql://root@127.0.0.1:5432/postgres")


def _url(name: str) -> str:
    return ADMIN.rsplit("/", 1)[0] + "/" + name


def _new_db(sync: str) -> str:
    name = f"holon_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = {sync}")
    return name


def _drop(name: str) -> None:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _event(i: int) -> NewEvent:
    return NewEvent(agent_id="agt_bench", payload=ev.DecisionRecorded(text=f"decision {i} " + "x" * 200))


def _timed(step: Any, per_tx: int, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        step(n)
        n += per_tx
    return n / elapsed


def run_ledger(engine: Any, per_tx: int, seconds: float, *, hooks: bool) -> float:
    ledger = Ledger(engine, clock=SystemClock(), hooks=[Projector()] if hooks else [])
    try:
        return _timed(lambda n: ledger.append(*(_event(n + k) for k in range(per_tx))), per_tx, seconds)
    finally:
        ledger.close()


def run_prototype(url: str, per_tx: int, seconds: float) -> float:
    clock = SystemClock()
    conn = psycopg.connect(url, autocommit=True)
    try:

        def build(head: pg_append.Head, n: int) -> tuple[list[Any], list[Any]]:
            rows, prev, seq = [], head.hash, head.seq
            for k in range(per_tx):
                ne = _event(n + k)
                enc = encode_payload(ne.payload, blob_threshold=16_384, preview_chars=400)
                seq += 1
                header = header_values(ne, seq=seq, event_id=new_id("evt"), ts_us=clock.now_us())
                prev = chain_hash_of(prev, header, enc.data)
                rows.append((*header, enc.text, prev))
            return rows, []

        return _timed(lambda n: pg_append.append(conn, lambda h: build(h, n)), per_tx, seconds)
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync", choices=["on", "off"], default="off")
    args = ap.parse_args()
    results: dict[str, list[float]] = {}
    variants = ["prototype", "pg_ledger", "pg_ledger_projector", "sqlite_ledger", "sqlite_ledger_projector"]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for per_tx in (1, 10):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for v in order:
                    key = f"{v}_{per_tx}"
                    if v.startswith("sqlite"):
                        path = Path(tmp) / f"{key}_{r}.db"
                        engine = SqliteEngine(Database(path, synchronous="NORMAL" if args.sync == "off" else "FULL"))
                        rate = run_ledger(engine, per_tx, args.seconds, hooks=v.endswith("projector"))
                    else:
                        name = _new_db(args.sync)
                        try:
                            if v == "prototype":
                                PgEngine(_url(name)).open(create=True, now_us=lambda: 1)  # migrate
                                rate = run_prototype(_url(name), per_tx, args.seconds)
                            else:
                                engine = PgEngine(_url(name))
                                rate = run_ledger(engine, per_tx, args.seconds, hooks=v.endswith("projector"))
                        finally:
                            _drop(name)
                    results.setdefault(key, []).append(rate)
    out = {
        "sync": args.sync,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "load": os.getloadavg()[0],
        "events_per_s_median": {k: round(statistics.median(v)) for k, v in sorted(results.items())},
        "events_per_s_all": {k: [round(x) for x in v] for k, v in sorted(results.items())},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
