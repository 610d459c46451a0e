"""RFC 0008, decision 6: how fast ``holon storage migrate`` can load a ledger into PostgreSQL.

Loads ``--events`` precomputed events rows (chained, 300-byte payloads) with ``COPY events FROM
STDIN`` in chunks of ``--chunk`` rows, each chunk one transaction holding the ledger lock, into
the full DDL (indexes, append-only and row-level gapless triggers) and into the same table
without the gapless trigger (the migration could disable it as the owner and check the result
with ``verify`` instead), then reads the rows back in seq order and re-checks the chain (what
``verify`` on arrival does). Events per second, wall clock. Usage: ``python migrate_copy.py [--events
100000] [--chunk 10000]``; prints JSON.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg
from append import COLS, rows_for
from common import APPEND_ONLY_DDL, EVENTS_DDL, GAPLESS_DDL, GENESIS, LEDGER_LOCK, chain, emit, scratch_db


def load(url: str, rows: list[tuple[Any, ...]], chunk: int, *, gapless: bool) -> float:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS public CASCADE")
        c.execute("CREATE SCHEMA public")
        c.execute(EVENTS_DDL)
        c.execute(APPEND_ONLY_DDL)
        if gapless:
            c.execute(GAPLESS_DDL)
        t0 = time.perf_counter()
        for i in range(0, len(rows), chunk):
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock(%s)", (LEDGER_LOCK,))
                with c.cursor().copy(f"COPY events ({COLS}) FROM STDIN") as cp:
                    for r in rows[i : i + chunk]:
                        cp.write_row(r)
        return len(rows) / (time.perf_counter() - t0)


def verify(url: str) -> tuple[float, bool]:
    with psycopg.connect(url) as c:
        t0 = time.perf_counter()
        prev, expect, ok = GENESIS, 1, True
        with c.cursor(name="verify") as cur:  # server-side cursor: rows streamed, not all in memory
            cur.itersize = 10_000
            cur.execute(f"SELECT {COLS} FROM events ORDER BY seq")
            n = 0
            for row in cur:
                h = chain(prev, tuple(row[:13]), row[13])
                ok = ok and row[0] == expect and h == row[14]
                prev, expect, n = h, expect + 1, n + 1
        return n / (time.perf_counter() - t0), ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=10_000)
    a = ap.parse_args()
    rows, _, _ = rows_for("agt_1", 0, a.events, 0, GENESIS)
    out: dict[str, Any] = {"events": a.events, "chunk": a.chunk}
    with scratch_db("rfc0008_copy") as url:
        out["copy_without_gapless_trigger_per_s"] = round(load(url, rows, a.chunk, gapless=False))
        out["copy_with_gapless_trigger_per_s"] = round(load(url, rows, a.chunk, gapless=True))
        rate, ok = verify(url)
        out["verify_read_and_rechain_per_s"] = round(rate)
        out["verify_ok"] = ok
    emit(out)


if __name__ == "__main__":
    main()
