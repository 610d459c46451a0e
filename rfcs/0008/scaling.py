"""RFC 0008, the risk behind ``scaling_3_over_1``: several nodes share one commit stream.

Simulates ``holon bench cluster``'s shape without holon: ``--nodes`` processes, each running
``--concurrency`` turns at a time (threads, one connection each); a turn is ``--tx`` append
transactions (ledger lock + head, two chained events, COMMIT, as ``append.py``'s
``advisory_pipeline``) separated by a fake model call of ``--latency`` seconds. Reports turns
per second at 1, 2 and 3 nodes and the ratios to one node, at ``synchronous_commit`` on (the
shipped default): how far the nodes scale before the serialized commits (one WAL flush each) are
the limit. Usage: ``python scaling.py [--seconds 8] [--latency 0.2 0.05] [--concurrency 4]
[--tx 5]``; prints JSON.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from typing import Any

import psycopg
from append import INSERT, rows_for, setup
from common import emit, scratch_db


def turn_loop(url: str, agent: str, latency: float, tx: int, stop_at: float, out: list[int], base: int) -> None:
    conn = psycopg.connect(url, autocommit=True)
    cur = conn.cursor()
    n, turns = base, 0  # event ids are made of the pid and n: threads of one process need apart ranges
    while time.perf_counter() < stop_at:
        for _ in range(tx):
            time.sleep(latency)  # the fake model's answer
            with conn.pipeline():
                cur.execute("BEGIN")
                cur.execute("SELECT * FROM holon_begin_append()")
            seq, prev = cur.fetchone()
            rows, _, _ = rows_for(agent, n, 2, seq, prev)
            with conn.pipeline():
                cur.executemany(INSERT, rows)
                cur.execute("COMMIT")
            n += 2
        if time.perf_counter() < stop_at:
            turns += 1
    out.append(turns)
    conn.close()


def node(url: str, idx: int, conc: int, latency: float, tx: int, start: Any, q: Any, seconds: float) -> None:
    start.wait()
    stop_at = time.perf_counter() + seconds
    out: list[int] = []
    ts = [
        threading.Thread(target=turn_loop, args=(url, f"agt_{idx}_{j}", latency, tx, stop_at, out, j * 10**9))
        for j in range(conc)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(sum(out))


def run(url: str, nodes: int, conc: int, latency: float, tx: int, seconds: float) -> float:
    setup(url)
    ctx = mp.get_context("fork")
    start, q = ctx.Barrier(nodes + 1), ctx.Queue()
    ps = [ctx.Process(target=node, args=(url, i, conc, latency, tx, start, q, seconds)) for i in range(nodes)]
    for p in ps:
        p.start()
    start.wait()
    turns = sum(q.get() for _ in ps)
    for p in ps:
        p.join()
    return turns / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--latency", type=float, nargs="+", default=[0.2, 0.05])
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tx", type=int, default=5)
    a = ap.parse_args()
    out: dict[str, Any] = {"concurrency_per_node": a.concurrency, "tx_per_turn": a.tx, "seconds": a.seconds}
    with scratch_db("rfc0008_scaling") as url:
        for lat in a.latency:
            rates = {n: run(url, n, a.concurrency, lat, a.tx, a.seconds) for n in (1, 2, 3)}
            out[f"latency_{lat}"] = {
                "turns_per_s": {str(n): round(r, 2) for n, r in rates.items()},
                "commits_per_s_at_3": round(rates[3] * a.tx, 1),
                "scaling_2_over_1": round(rates[2] / rates[1], 2),
                "scaling_3_over_1": round(rates[3] / rates[1], 2),
            }
    emit(out)


if __name__ == "__main__":
    main()
