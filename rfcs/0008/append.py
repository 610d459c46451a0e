"""RFC 0008, decision 2: one total order across writers, and what it costs.

Measures appends (events per second, wall clock; client CPU beside it) into holon's ``events`` table
on PostgreSQL, for 1 and 10 events per transaction and 1 and 4 concurrent writer processes, with:

* ``raw``: precomputed rows (seq, hash) inserted by one writer, same DDL and triggers: the
  denominator of the issue's ``append_ratio_pg_vs_raw``;
* ``advisory``: ``pg_advisory_xact_lock`` then the head read, the hash chain computed by the writer
  holding the lock, the rows inserted (``executemany``), COMMIT: three round trips plus COMMIT;
* ``advisory_fn``: the lock and the head read in one plpgsql call (one round trip fewer);
* ``advisory_pipeline``: ``advisory_fn`` then everything else (inserts, COMMIT) in one pipeline;
* ``advisory_proj``: ``advisory_pipeline`` plus what holon's synchronous projector writes per
  transaction (one ``projection_rows`` upsert per event, the cursor): holon's storage path;
* ``head_row``: ``SELECT ... FROM ledger_head FOR UPDATE``, inserts, ``UPDATE ledger_head``;
* ``sequence``: ``seq`` from a sequence (no chain: nothing to chain from without a lock) — the
  upper bound of an unordered design, and ``gaps_demo`` shows why it is not an option.

Every variant runs on the full DDL (indexes, append-only and gapless triggers). Then per-trigger
costs on raw single-writer inserts. Usage: ``python append.py [--seconds 2] [--rounds 3]
[--sync on|off]``; prints JSON.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Any

import psycopg
from common import (
    APPEND_ONLY_DDL,
    EVENTS_DDL,
    GAPLESS_DDL,
    GENESIS,
    LEDGER_LOCK,
    chain,
    emit,
    header_of,
    median,
    payload_of,
    scratch_db,
)  # fmt: skip

COLS = "seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, work_item_id, task_id, episode_id, idempotency_key, payload, hash"
INSERT = f"INSERT INTO events ({COLS}) VALUES ({', '.join(['%s'] * 15)})"
INSERT_SEQ = f"INSERT INTO events ({COLS}) VALUES (nextval('events_seq'), {', '.join(['%s'] * 14)})"
HEAD = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
UPSERT = (
    "INSERT INTO projection_rows(kind, key, agent_id, status, label, seq, state) VALUES (%s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (kind, key) DO UPDATE SET agent_id = excluded.agent_id, status = excluded.status, "
    "label = excluded.label, seq = excluded.seq, state = excluded.state"
)
CURSOR = (
    "INSERT INTO projection_cursors(name, seq, version) VALUES ('projections', %s, 1) "
    "ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, version = excluded.version"
)
BEGIN_APPEND_FN = f"""
CREATE FUNCTION holon_begin_append(OUT head_seq BIGINT, OUT head_hash TEXT) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock({LEDGER_LOCK});
  SELECT seq, hash INTO head_seq, head_hash FROM events ORDER BY seq DESC LIMIT 1;
  IF head_seq IS NULL THEN head_seq := 0; head_hash := repeat('0', 64); END IF;
END $$;
"""
STATE = '{"name":"a","status":"running","turns":12,"settings":{"model":"x"},"last_turn":"trn_0001"}' * 8

STRATEGIES = ("raw", "advisory", "advisory_fn", "advisory_pipeline", "advisory_proj", "head_row", "sequence")


def setup(url: str, *, gapless: bool = True, append_only: bool = True) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS public CASCADE")
        c.execute("CREATE SCHEMA public")
        c.execute(EVENTS_DDL)
        if append_only:
            c.execute(APPEND_ONLY_DDL)
        if gapless:
            c.execute(GAPLESS_DDL)
        c.execute(BEGIN_APPEND_FN)
        c.execute("CREATE TABLE ledger_head (id INT PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL)")
        c.execute("INSERT INTO ledger_head VALUES (1, 0, %s)", (GENESIS,))
        c.execute("CREATE SEQUENCE events_seq")


def rows_for(agent: str, n0: int, k: int, seq: int, prev: str) -> tuple[list[tuple[Any, ...]], int, str]:
    rows = []
    for j in range(k):
        seq += 1
        header = header_of(seq, agent, n0 + j)
        payload = payload_of(n0 + j)
        prev = chain(prev, header, payload)
        rows.append((*header, payload, prev))
    return rows, seq, prev


def one_tx(conn: psycopg.Connection, strategy: str, agent: str, n0: int, k: int) -> None:
    if strategy == "advisory":
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LEDGER_LOCK,))
            r = conn.execute(HEAD).fetchone()
            seq, prev = (0, GENESIS) if r is None else r
            rows, _, _ = rows_for(agent, n0, k, seq, prev)
            conn.cursor().executemany(INSERT, rows)
    elif strategy == "advisory_fn":
        with conn.transaction():
            seq, prev = conn.execute("SELECT * FROM holon_begin_append()").fetchone()
            rows, _, _ = rows_for(agent, n0, k, seq, prev)
            conn.cursor().executemany(INSERT, rows)
    elif strategy in ("advisory_pipeline", "advisory_proj"):
        conn.execute("BEGIN")
        seq, prev = conn.execute("SELECT * FROM holon_begin_append()").fetchone()
        rows, head, _ = rows_for(agent, n0, k, seq, prev)
        try:
            with conn.pipeline():
                cur = conn.cursor()
                cur.executemany(INSERT, rows)
                if strategy == "advisory_proj":
                    cur.executemany(
                        UPSERT,
                        [("agent", f"{agent}:{j}", agent, "running", None, r[0], STATE) for j, r in enumerate(rows)],
                    )
                    cur.execute(CURSOR, (head,))
                cur.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
    elif strategy == "head_row":
        with conn.transaction():
            seq, prev = conn.execute("SELECT seq, hash FROM ledger_head WHERE id = 1 FOR UPDATE").fetchone()
            rows, head, h = rows_for(agent, n0, k, seq, prev)
            conn.cursor().executemany(INSERT, rows)
            conn.execute("UPDATE ledger_head SET seq = %s, hash = %s WHERE id = 1", (head, h))
    elif strategy == "sequence":
        with conn.transaction():
            rows = [(*header_of(0, agent, n0 + j)[1:], payload_of(n0 + j), "-" * 64) for j in range(k)]
            conn.cursor().executemany(INSERT_SEQ, rows)
    else:
        raise ValueError(strategy)


def writer(url: str, strategy: str, k: int, wid: int, seconds: float, start: Any, out: Any, sync: str) -> None:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f"SET synchronous_commit = {sync}")
    agent = f"agt_{wid:04d}"
    n = 0
    for _ in range(3):  # warm up: prepared statements (psycopg prepares after 5 executions)
        one_tx(conn, strategy, agent, n, k)
        n += k
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    done = 0
    while time.perf_counter() - t0 < seconds:
        one_tx(conn, strategy, agent, n, k)
        n += k
        done += k
    out.put((done, time.perf_counter() - t0, time.process_time() - c0))
    conn.close()


def raw_run(url: str, k: int, seconds: float, sync: str) -> tuple[int, float, float]:
    """One writer inserting precomputed rows (seq and hash computed before timing)."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f"SET synchronous_commit = {sync}")
    r = conn.execute(HEAD).fetchone()
    seq, prev = (0, GENESIS) if r is None else r
    # Estimate how many we need from a quick probe, precompute generously.
    batches = []
    n = 10_000_000
    rows, seq, prev = rows_for("agt_raw", n, 200_000 if k == 10 else 60_000, seq, prev)
    batches = [rows[i : i + k] for i in range(0, len(rows), k)]
    cur = conn.cursor()
    for b in batches[:3]:
        with conn.transaction():
            cur.executemany(INSERT, b)
    t0, c0 = time.perf_counter(), time.process_time()
    done = 0
    for b in batches[3:]:
        with conn.transaction():
            cur.executemany(INSERT, b)
        done += len(b)
        if time.perf_counter() - t0 >= seconds:
            break
    out = (done, time.perf_counter() - t0, time.process_time() - c0)
    conn.close()
    return out


def run(url: str, strategy: str, k: int, writers: int, seconds: float, sync: str) -> dict[str, float]:
    setup(url, gapless=strategy != "sequence")
    if strategy == "raw":
        done, wall, cpu = raw_run(url, k, seconds, sync)
        return {"events_per_s": done / wall, "client_cpu_us_per_event": cpu / done * 1e6}
    ctx = mp.get_context("fork")
    start = ctx.Barrier(writers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=writer, args=(url, strategy, k, w, seconds, start, out, sync)) for w in range(writers)]
    for p in procs:
        p.start()
    start.wait()
    res = [out.get() for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in res)
    wall = max(r[1] for r in res)
    cpu = sum(r[2] for r in res)
    check_chain(url, strategy)
    return {"events_per_s": done / wall, "client_cpu_us_per_event": cpu / done * 1e6}


def check_chain(url: str, strategy: str) -> None:
    """After a concurrent run: seqs gapless from 1 and (when chained) every hash links to its predecessor."""
    with psycopg.connect(url) as c:
        n, lo, hi = c.execute("SELECT count(*), min(seq), max(seq) FROM events").fetchone()
        if strategy != "sequence":
            assert (lo, hi) == (1, n), (strategy, lo, hi, n)
            prev = GENESIS
            for row in c.execute(f"SELECT {COLS} FROM events ORDER BY seq"):
                h = chain(prev, tuple(row[:13]), row[13])
                assert h == row[14], (strategy, row[0])
                prev = h


def gaps_demo(url: str) -> dict[str, Any]:
    """Why a sequence alone is no ledger: a rolled-back nextval leaves a hole forever, and commit
    order differs from seq order, so a reader following ``seq > cursor`` skips a later-committed seq."""
    setup(url, gapless=False)
    a = psycopg.connect(url)
    b = psycopg.connect(url)
    r = psycopg.connect(url, autocommit=True)

    def ins(c: psycopg.Connection, i: int) -> int:
        row = (*header_of(0, "agt_demo", i)[1:], payload_of(i), "-" * 64)
        return int(c.execute(INSERT_SEQ + " RETURNING seq", row).fetchone()[0])

    sa = ins(a, 1)  # A takes seq 1 ...
    sb = ins(b, 2)  # ... B takes seq 2 and commits first
    b.commit()
    seen_first = [x[0] for x in r.execute("SELECT seq FROM events WHERE seq > 0 ORDER BY seq")]
    cursor = max(seen_first)
    a.commit()
    seen_after = [x[0] for x in r.execute("SELECT seq FROM events WHERE seq > %s ORDER BY seq", (cursor,))]
    sc = ins(a, 3)
    a.rollback()  # C's seq is burnt
    sd = ins(a, 4)
    a.commit()
    all_seqs = [x[0] for x in r.execute("SELECT seq FROM events ORDER BY seq")]
    for c in (a, b, r):
        c.close()
    return {
        "a_seq": sa, "b_seq": sb, "reader_saw_first": seen_first, "reader_cursor_then_missed_a": seen_after == [],
        "rolled_back_seq": sc, "next_seq": sd, "final_seqs": all_seqs,
    }  # fmt: skip


def trigger_costs(url: str, seconds: float, sync: str) -> dict[str, Any]:
    """Raw single-writer inserts with each trigger added in turn (µs per event, wall and client CPU)."""
    out: dict[str, Any] = {}
    for name, gapless, append_only in (
        ("no_trigger", False, False),
        ("append_only", False, True),
        ("append_only_and_gapless", True, True),
    ):
        for k in (1, 10):
            vals = []
            for _ in range(3):
                setup(url, gapless=gapless, append_only=append_only)
                done, wall, _cpu = raw_run(url, k, seconds, sync)
                vals.append(wall / done * 1e6)
            out[f"{name}_us_per_event_batch{k}"] = round(median(vals), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync", default="on", choices=("on", "off"))
    ap.add_argument("--skip-triggers", action="store_true")
    a = ap.parse_args()
    result: dict[str, Any] = {"synchronous_commit": a.sync, "seconds_per_run": a.seconds, "rounds": a.rounds}
    with scratch_db("rfc0008_append") as url:
        grid = [(s, k, w) for w in (1, 4) for k in (1, 10) for s in STRATEGIES if not (s == "raw" and w > 1)]
        samples: dict[str, list[dict[str, float]]] = {}
        for rnd in range(a.rounds):
            order = grid[rnd % len(grid) :] + grid[: rnd % len(grid)]  # rotate, so load drifts hit every variant
            for s, k, w in order:
                samples.setdefault(f"{s}/batch{k}/writers{w}", []).append(run(url, s, k, w, a.seconds, a.sync))
        table = {key: {m: round(median([v[m] for v in vs]), 1) for m in vs[0]} for key, vs in samples.items()}
        result["appends"] = table
        for k in (1, 10):
            raw = table[f"raw/batch{k}/writers1"]["events_per_s"]
            for s in STRATEGIES[1:]:
                for w in (1, 4):
                    result.setdefault("ratio_to_raw_single_writer", {})[f"{s}/batch{k}/writers{w}"] = round(
                        table[f"{s}/batch{k}/writers{w}"]["events_per_s"] / raw, 3
                    )
        result["gaps_demo"] = gaps_demo(url)
        if not a.skip_triggers:
            result["trigger_costs"] = trigger_costs(url, a.seconds, a.sync)
    emit(result)


if __name__ == "__main__":
    main()
