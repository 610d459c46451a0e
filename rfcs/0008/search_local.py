"""The search index as a node-local projection (RFC 0008 step 7): catch-up rate and search latency
of holon's own ``SearchIndex`` on a SQLite home (tables in the ledger's file) and on a PostgreSQL
home (tables in ``<home>/nodes/local/search.db``, events read from PostgreSQL), same events, same
run; and whether the results are identical.

Imports holon (run from the repository root with ``PYTHONPATH=$PWD``). The ledger is
``holon.bench.workload``'s three agents' turns (``--events``), appended 10 per transaction with
ids from a counter; the index is caught up from seq 0 (``rebuild``), then ``--queries`` searches
per agent are timed (CPU-bound; the first of each is a warm-up). Prints JSON.

    PYTHONPATH=$PWD python rfcs/0008/search_local.py --events 20000
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg

from holon.bench import workload
from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.memory.access import search_memory
from holon.memory.index import SearchIndex
from holon.projections import Store

ADMIN = os.environ.get("HOLON_PG", "postgresql://root@127.0.0.1:5432/postgres")
QUERIES = ("ledger", "projection budget", "memory search tool", "operator brief timer", "request 17", "plan todo",
           "context episode wait", "result", "agent ledger projection memory", "timer wait brief")  # fmt: skip


def _open(root: Path, url: str | None) -> Store:
    if url is None:
        os.environ.pop("HOLON_STORAGE_URL", None)
    else:
        os.environ["HOLON_STORAGE_URL"] = url
    os.environ["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    home = resolve_home(root)
    return Store.open(home, load_settings(home), clock=FakeClock())


def _fill(store: Store, n: int) -> None:
    counter = itertools.count(1)
    with mock.patch("holon.ledger.store.new_id", lambda prefix: f"{prefix}_{next(counter):032x}"):
        store.append(*workload.creation_events(3))
        events = list(itertools.islice(workload.stream(3), n))
        for i in range(0, len(events), 10):
            store.append(*events[i : i + 10])


def _measure(store: Store, rounds: int) -> dict[str, Any]:
    index = SearchIndex(store)
    t0, c0 = time.perf_counter(), time.process_time()
    index.rebuild()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    head = store.ledger.head()
    agents = sorted(store.agents(), key=lambda a: a.name)
    results = [[(h.ref, h.score) for h in search_memory(store, a, q, limit=10).hits] for a in agents for q in QUERIES]
    times: list[float] = []
    for _ in range(rounds):
        for a in agents:
            for q in QUERIES:
                s = time.perf_counter()
                search_memory(store, a, q, limit=10)
                times.append((time.perf_counter() - s) * 1000)
    times.sort()
    return {
        "events": head,
        "catch_up_s": round(wall, 2),
        "catch_up_cpu_s": round(cpu, 2),
        "events_per_s": round(head / wall),
        "search_ms_p50": round(statistics.median(times), 2),
        "search_ms_p95": round(times[int(len(times) * 0.95)], 2),
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    name = f"holon_search_local_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + f"/{name}"
    out: dict[str, Any] = {"events_requested": args.events}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for engine, target in (("sqlite", None), ("postgresql", url)):
                with _open(Path(tmp) / engine, target) as store:
                    _fill(store, args.events)
                    out[engine] = _measure(store, args.rounds)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    out["identical_results"] = out["sqlite"].pop("results") == out["postgresql"].pop("results")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
