"""RFC 0008, decision 3 as built: µs per inserted row of holon's fence trigger (migration 2's
``holon_fence``, the JSON fence), measured inside the server as ``triggers.py`` measures the
prototype's, on a database migrated by holon itself (``holon.ledger.pg.migrations``).

Configurations, each one ``DO`` block of ``--rows`` single-row INSERTs (one transaction, the
transaction's ``holon.fence`` set once), rounds alternating, medians reported:

* ``fence_off``: migrations 1 and 2, the fence trigger disabled (the append-only and gapless
  triggers on, as always);
* ``fenced``: the fence trigger on, a fenced type (``tool.called``) under a live lease;
* ``unfenced``: the fence trigger on, an unfenced type (``message.received``: the early return
  after the ``unfenced_types`` lookup);
* ``fenced10``/``fence_off10``: ten rows per INSERT statement.

The table is never emptied between configurations (it grows to rounds x configurations x rows):
emptying it by DELETE and VACUUM made the gapless trigger's cached plan a sequential scan (the
statistics said "empty"), about 1.4 ms per row at 20,000 rows in one transaction, hiding
everything else (see RFC 0008, "Built so far"). Toggling the fence trigger (``ALTER TABLE``)
invalidates the cached plans, so each configuration plans with the table's real size. Usage: run from the repository root,
``PYTHONPATH=. python rfcs/0008/fence_trigger.py [--rows 20000] [--rounds 5]``; prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from common import emit, median, scratch_db

from holon.ledger.pg.migrations import migrate

FENCE = '{"node":"node-a","tokens":{"agt_1":1}}'
LOOP = """
DO $$
DECLARE i BIGINT; base BIGINT := coalesce((SELECT max(seq) FROM events), 0);
BEGIN
  PERFORM set_config('holon.fence', '{fence}', true);
  FOR i IN 1..{rows} LOOP
    INSERT INTO events (seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, payload, hash)
    VALUES (base + i, 'evt_' || (base + i), 'agt_1', '{type}', 1, 1700000000000000 + i, 'agent:agt_1', 'agent',
            'trn_' || (i / 10), repeat('x', 300), repeat('f', 64));
  END LOOP;
END $$;
"""
LOOP10 = """
DO $$
DECLARE i BIGINT; base BIGINT := coalesce((SELECT max(seq) FROM events), 0);
BEGIN
  PERFORM set_config('holon.fence', '{fence}', true);
  FOR i IN 0..({rows} / 10 - 1) LOOP
    INSERT INTO events (seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, payload, hash)
    SELECT base + i * 10 + g, 'evt_' || (base + i * 10 + g), 'agt_1', '{type}', 1, 1700000000000000 + i,
           'agent:agt_1', 'agent', 'trn_' || i, repeat('x', 300), repeat('f', 64) FROM generate_series(1, 10) g;
  END LOOP;
END $$;
"""
CONFIGS: dict[str, tuple[str, str, bool]] = {
    # name: (loop, type, fence trigger on)
    "fence_off": (LOOP, "tool.called", False),
    "fenced": (LOOP, "tool.called", True),
    "unfenced": (LOOP, "message.received", True),
    "fence_off10": (LOOP10, "tool.called", False),
    "fenced10": (LOOP10, "tool.called", True),
}


def reset(c: psycopg.Connection[Any], fence_on: bool) -> None:
    c.execute(f"ALTER TABLE events {'ENABLE' if fence_on else 'DISABLE'} TRIGGER events_lease_fence")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    samples: dict[str, list[float]] = {k: [] for k in CONFIGS}
    with scratch_db("rfc0008_fence") as url, psycopg.connect(url, autocommit=True) as c:
        migrate(c, now_us=1)
        c.execute("SET synchronous_commit = off")
        c.execute("INSERT INTO leases VALUES ('agt_1', 'node-a', 1, clock_timestamp() + interval '1 hour')")
        for _ in range(a.rounds):
            for name, (loop, type_, on) in CONFIGS.items():
                reset(c, on)
                t0 = time.perf_counter()
                c.execute(loop.format(rows=a.rows, type=type_, fence=FENCE))  # type: ignore[arg-type]
                samples[name].append((time.perf_counter() - t0) / a.rows * 1e6)
    med = {k: round(median(v), 2) for k, v in samples.items()}
    emit(
        {
            "rows": a.rows,
            "rounds": a.rounds,
            "us_per_row": med,
            "fence_cost_us_per_row": {
                "fenced": round(med["fenced"] - med["fence_off"], 2),
                "unfenced": round(med["unfenced"] - med["fence_off"], 2),
                "fenced_10_per_statement": round(med["fenced10"] - med["fence_off10"], 2),
            },
        }
    )


if __name__ == "__main__":
    main()
