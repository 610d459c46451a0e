"""RFC 0008, decision 2 (the triggers' price): µs per inserted row of each guard on ``events``,
measured inside the server so that client and scheduling noise on a shared machine stay out.

For each configuration a fresh table gets ``--rows`` rows inserted by one ``DO`` block (one
transaction, one statement from the client): no trigger; append-only triggers (UPDATE, DELETE,
TRUNCATE: they do not fire on INSERT, so they should cost nothing); + the gapless trigger (the
advisory lock and the head read per row); + the fencing trigger of ``cluster.py`` (the
``unfenced_types`` lookup and the lease row read per row). Then ten rows per INSERT statement:
no trigger, the row-level guards, and the same guards as one statement-level trigger over the
statement's transition table (``STATEMENT_GUARDS``). Rounds alternate the configurations;
medians are reported. Usage: ``python triggers.py [--rows 20000] [--rounds 5]``; prints JSON.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg
from cluster import LEASE_DDL
from common import APPEND_ONLY_DDL, EVENTS_DDL, GAPLESS_DDL, LEDGER_LOCK, emit, median, scratch_db

LOOP = """
DO $$
DECLARE i BIGINT; base BIGINT := coalesce((SELECT max(seq) FROM events), 0);
BEGIN
  PERFORM set_config('holon.fence', 'node-a:1', true);
  FOR i IN 1..{rows} LOOP
    INSERT INTO events (seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, payload, hash)
    VALUES (base + i, 'evt_' || (base + i), 'agt_1', 'tool.called', 1, 1700000000000000 + i, 'agent:agt_1', 'agent',
            'trn_' || (i / 10), repeat('x', 300), repeat('f', 64));
  END LOOP;
END $$;
"""
LOOP10 = """
DO $$
DECLARE i BIGINT; base BIGINT := coalesce((SELECT max(seq) FROM events), 0);
BEGIN
  PERFORM set_config('holon.fence', 'node-a:1', true);
  FOR i IN 0..({rows} / 10 - 1) LOOP
    INSERT INTO events (seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, payload, hash)
    SELECT base + i * 10 + g, 'evt_' || (base + i * 10 + g), 'agt_1', 'tool.called', 1, 1700000000000000 + i, 'agent:agt_1',
           'agent', 'trn_' || i, repeat('x', 300), repeat('f', 64) FROM generate_series(1, 10) g;
  END LOOP;
END $$;
"""
# The same guards as statement-level AFTER triggers over the statement's transition table: one
# check per INSERT statement whatever its row count (holon would insert a transaction's rows with
# one multi-row statement).
STATEMENT_GUARDS = f"""
DROP TRIGGER events_gapless ON events;
DROP TRIGGER events_fence ON events;
CREATE FUNCTION holon_guard_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE lo BIGINT; hi BIGINT; n BIGINT; before_lo BIGINT; top BIGINT; f TEXT := current_setting('holon.fence', true);
BEGIN
  PERFORM pg_advisory_xact_lock({LEDGER_LOCK});
  SELECT min(seq), max(seq), count(*) INTO lo, hi, n FROM new_rows;
  SELECT coalesce(max(seq), 0) INTO before_lo FROM events WHERE seq < lo;
  SELECT max(seq) INTO top FROM events;
  IF before_lo <> lo - 1 OR hi - lo + 1 <> n OR top <> hi THEN
    RAISE EXCEPTION 'events.seq must continue the ledger without gaps' USING ERRCODE = 'P0002';
  END IF;
  IF EXISTS (SELECT 1 FROM new_rows r WHERE NOT EXISTS (SELECT 1 FROM unfenced_types u WHERE u.type = r.type)
             AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.agent_id = r.agent_id AND f = l.node || ':' || l.token
                             AND l.expires_at > clock_timestamp())) THEN
    RAISE EXCEPTION 'fencing: % does not hold the lease of every agent of this append', f USING ERRCODE = 'HLF01';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER events_guard AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION holon_guard_stmt();
"""
CONFIGS = {
    "no_trigger": "",
    "append_only": APPEND_ONLY_DDL,
    "append_only_gapless": APPEND_ONLY_DDL + GAPLESS_DDL,
    "append_only_gapless_fence": APPEND_ONLY_DDL + GAPLESS_DDL + "@LEASE",
    "stmt10/no_trigger": "",
    "stmt10/row_guards": APPEND_ONLY_DDL + GAPLESS_DDL + "@LEASE",
    "stmt10/statement_guards": APPEND_ONLY_DDL + GAPLESS_DDL + "@LEASE@STMT",
}


def setup(c: psycopg.Connection, ddl: str) -> None:
    c.execute("DROP SCHEMA IF EXISTS public CASCADE")
    c.execute("CREATE SCHEMA public")
    c.execute(EVENTS_DDL)
    stmt = ddl.endswith("@STMT")
    ddl = ddl.removesuffix("@STMT")
    if ddl.endswith("@LEASE"):
        c.execute(ddl.removesuffix("@LEASE"))
        c.execute(LEASE_DDL)
        if stmt:
            c.execute(STATEMENT_GUARDS)
        c.execute("INSERT INTO leases VALUES ('agt_1', 'node-a', 1, clock_timestamp() + interval '1 hour')")
    elif ddl:
        c.execute(ddl)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    samples: dict[str, list[float]] = {k: [] for k in CONFIGS}
    with scratch_db("rfc0008_triggers") as url, psycopg.connect(url, autocommit=True) as c:
        c.execute("SET synchronous_commit = off")
        for _ in range(a.rounds):
            for name, ddl in CONFIGS.items():
                setup(c, ddl)
                t0 = time.perf_counter()
                c.execute((LOOP10 if name.startswith("stmt10/") else LOOP).format(rows=a.rows))
                samples[name].append((time.perf_counter() - t0) / a.rows * 1e6)
    med = {k: round(median(v), 2) for k, v in samples.items()}
    out: dict[str, Any] = {"rows": a.rows, "rounds": a.rounds, "us_per_row": med}
    out["cost_us_per_row"] = {
        "append_only": round(med["append_only"] - med["no_trigger"], 2),
        "gapless": round(med["append_only_gapless"] - med["append_only"], 2),
        "fence": round(med["append_only_gapless_fence"] - med["append_only_gapless"], 2),
        "row_guards_10_per_statement": round(med["stmt10/row_guards"] - med["stmt10/no_trigger"], 2),
        "statement_guards_10_per_statement": round(med["stmt10/statement_guards"] - med["stmt10/no_trigger"], 2),
    }
    emit(out)


if __name__ == "__main__":
    main()
