"""RFC 0008, decisions 3, 4 and 6: leases with fencing tokens, wakes, timers, node names, reconnects.

Each check runs on a scratch database with holon's events DDL, the append-only and gapless
triggers, and the lease schema this RFC proposes (``LEASE_DDL``):

* ``fencing``: node A holds agent X's lease (token 1) and appends; its lease expires (database
  clock); A's next fenced append is refused by the trigger on ``events`` *before* anyone took
  over; B takes over (token 2, a ``lease.acquired`` event in the same transaction); A's append is
  refused again, B's accepted; a heartbeat cannot revive an expired lease; inputs (unfenced types)
  are accepted from any node; an append without a fence for a fenced type is refused.
* ``takeover_waits_for_append``: A's append transaction is open (ledger lock held) when B tries to
  take over: B waits, and A's events come before B's ``lease.acquired`` in the order.
* ``timer_once``: two nodes fire the same timer due time concurrently: one ``timer.fired``.
* ``node_name``: a second node with the same name is refused (session advisory lock); after the
  first one's connection dies, the name is free again.
* ``notify``: append-to-wake latency through LISTEN/NOTIFY (p50/p95), the cost of the NOTIFY on
  the append, and a notification lost while the listener was disconnected found by the catch-up.
* ``heartbeat``: one UPDATE renewing all of a node's leases, for 50 and 500 agents.
* ``reconnect``: a backend killed under a pool: what the caller sees, how fast the pool serves
  again.
* ``fence_cost``: µs per event of the fencing trigger on a fenced append (1 and 10 per
  transaction, synchronous_commit off so the disk does not hide it).

Usage: ``python cluster.py``; prints JSON.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import psycopg_pool
from common import APPEND_ONLY_DDL, EVENTS_DDL, GAPLESS_DDL, LEDGER_LOCK, chain, emit, median, pct, scratch_db

COLS = "seq, id, agent_id, type, version, ts_us, origin, authority, turn_id, work_item_id, task_id, episode_id, idempotency_key, payload, hash"
INSERT = f"INSERT INTO events ({COLS}) VALUES ({', '.join(['%s'] * 15)})"

LEASE_DDL = f"""
CREATE TABLE nodes (
    name TEXT COLLATE "C" PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, url TEXT,
    schema_version INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL, seen_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE leases (
    agent_id TEXT COLLATE "C" PRIMARY KEY,
    node TEXT COLLATE "C" NOT NULL,
    token BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX leases_node ON leases (node);
-- Types any node may append for any agent (inputs and operator commands); every other type
-- needs the agent's live lease.
CREATE TABLE unfenced_types (type TEXT COLLATE "C" PRIMARY KEY);
INSERT INTO unfenced_types VALUES ('message.received'), ('agent.created'), ('agent.configured'),
    ('timer.scheduled'), ('timer.cancelled'), ('timer.fired'), ('lease.released');

-- The append transaction says who it is: SET LOCAL holon.fence = '<node>:<token>'.
CREATE FUNCTION holon_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  f TEXT := current_setting('holon.fence', true);
  l leases%ROWTYPE;
BEGIN
  IF EXISTS (SELECT 1 FROM unfenced_types WHERE type = NEW.type) THEN RETURN NEW; END IF;
  IF f IS NULL OR f = '' THEN
    RAISE EXCEPTION 'fencing: % for agent % needs the agent''s lease (no fence in this transaction)',
      NEW.type, NEW.agent_id USING ERRCODE = 'HLF01';
  END IF;
  SELECT * INTO l FROM leases WHERE agent_id = NEW.agent_id;
  IF NOT FOUND OR f <> l.node || ':' || l.token OR l.expires_at <= clock_timestamp() THEN
    RAISE EXCEPTION 'fencing: % no longer holds the lease of agent % (lease: %)', f, NEW.agent_id,
      coalesce(l.node || ':' || l.token || ' until ' || l.expires_at, 'none') USING ERRCODE = 'HLF01';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER events_fence BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION holon_fence();

CREATE FUNCTION holon_begin_append(OUT head_seq BIGINT, OUT head_hash TEXT) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock({LEDGER_LOCK});
  SELECT seq, hash INTO head_seq, head_hash FROM events ORDER BY seq DESC LIMIT 1;
  IF head_seq IS NULL THEN head_seq := 0; head_hash := repeat('0', 64); END IF;
END $$;
"""

# Acquire (or take over) an agent's lease: only when free, expired, or already ours. The caller
# holds the ledger lock (it appends lease.acquired in the same transaction), so takeovers are
# ordered with every fenced append.
ACQUIRE = """
INSERT INTO leases AS l (agent_id, node, token, expires_at)
VALUES (%(agent)s, %(node)s, 1, clock_timestamp() + make_interval(secs => %(lease_s)s))
ON CONFLICT (agent_id) DO UPDATE SET node = excluded.node, token = l.token + 1, expires_at = excluded.expires_at
WHERE l.expires_at <= clock_timestamp() OR l.node = excluded.node
RETURNING token
"""
# Renew every live lease of a node in one statement; an expired lease is never revived.
HEARTBEAT = """
UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s)
WHERE node = %(node)s AND expires_at > clock_timestamp()
"""


def setup(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS public CASCADE")
        c.execute("CREATE SCHEMA public")
        c.execute(EVENTS_DDL)
        c.execute(APPEND_ONLY_DDL)
        c.execute(GAPLESS_DDL)
        c.execute(LEASE_DDL)


class Node:
    """A minimal appender: one connection, the ledger lock, the chain, the fence."""

    n = 0

    def __init__(self, url: str, name: str) -> None:
        self.name = name
        self.conn = psycopg.connect(url, autocommit=True)
        self.tokens: dict[str, int] = {}

    def _rows(self, seq: int, prev: str, agent: str, types: list[str], key: str | None) -> list[tuple[Any, ...]]:
        rows = []
        for t in types:
            Node.n += 1
            seq += 1
            header = (seq, f"evt_{self.name}_{Node.n:08d}", agent, t, 1, 1_700_000_000_000_000 + Node.n,
                      f"runtime:{self.name}", "runtime", None, None, None, None, key)  # fmt: skip
            payload = f'{{"node":"{self.name}"}}'
            prev = chain(prev, header, payload)
            rows.append((*header, payload, prev))
        return rows

    def append(self, agent: str, types: list[str], *, fenced: bool = True, key: str | None = None,
               hold: threading.Event | None = None, started: threading.Event | None = None) -> list[int]:  # fmt: skip
        with self.conn.transaction():
            if fenced:
                token = self.tokens.get(agent, 0)
                self.conn.execute("SELECT set_config('holon.fence', %s, true)", (f"{self.name}:{token}",))
            seq, prev = self.conn.execute("SELECT * FROM holon_begin_append()").fetchone()
            if (
                key is not None
                and self.conn.execute("SELECT 1 FROM events WHERE idempotency_key = %s", (key,)).fetchone()
            ):
                return []  # already recorded (by another node): a no-op, as Ledger.append does
            rows = self._rows(seq, prev, agent, types, key)
            self.conn.cursor().executemany(INSERT, rows)
            if started is not None:
                started.set()
            if hold is not None:
                hold.wait()
        return [r[0] for r in rows]

    def acquire(self, agent: str, lease_s: float) -> int | None:
        with self.conn.transaction():
            seq, prev = self.conn.execute("SELECT * FROM holon_begin_append()").fetchone()
            row = self.conn.execute(ACQUIRE, {"agent": agent, "node": self.name, "lease_s": lease_s}).fetchone()
            if row is None:
                return None
            self.tokens[agent] = row[0]
            self.conn.execute("SELECT set_config('holon.fence', %s, true)", (f"{self.name}:{row[0]}",))
            self.conn.cursor().executemany(INSERT, self._rows(seq, prev, agent, ["lease.acquired"], None))
        return int(row[0])

    def heartbeat(self, lease_s: float) -> int:
        return self.conn.execute(HEARTBEAT, {"node": self.name, "lease_s": lease_s}).rowcount

    def close(self) -> None:
        self.conn.close()


def refused(fn: Any) -> str | None:
    try:
        fn()
    except psycopg.Error as e:
        return f"{e.sqlstate}: {str(e).splitlines()[0]}"
    return None


def wait_expired(conn: psycopg.Connection, agent: str) -> float:
    """Poll the database clock until the lease has expired (returns the seconds waited)."""
    t0 = time.perf_counter()
    while conn.execute("SELECT expires_at > clock_timestamp() FROM leases WHERE agent_id = %s", (agent,)).fetchone()[0]:
        time.sleep(0.02)
    return time.perf_counter() - t0


def fencing(url: str) -> dict[str, Any]:
    setup(url)
    a, b = Node(url, "node-a"), Node(url, "node-b")
    out: dict[str, Any] = {}
    out["a_acquires"] = a.acquire("agt_x", 0.5)
    out["b_acquire_while_a_live"] = b.acquire("agt_x", 0.5)
    out["a_turn_started"] = a.append("agt_x", ["turn.started", "model.requested"])
    out["unfenced_turn_event_refused"] = refused(lambda: b.append("agt_x", ["turn.started"], fenced=False))
    out["input_from_b_accepted"] = b.append("agt_x", ["message.received"], fenced=False)
    out["waited_for_expiry_s"] = round(wait_expired(a.conn, "agt_x"), 3)
    out["a_heartbeat_after_expiry_renewed"] = a.heartbeat(0.5)
    out["a_append_after_expiry_refused"] = refused(lambda: a.append("agt_x", ["model.responded"]))
    out["b_takes_over_token"] = b.acquire("agt_x", 5.0)
    out["a_append_after_takeover_refused"] = refused(lambda: a.append("agt_x", ["turn.settled"]))
    out["b_settles_interrupted"] = b.append("agt_x", ["turn.settled"])
    out["a_reacquire_while_b_live"] = a.acquire("agt_x", 5.0)
    out["order"] = [list(r) for r in a.conn.execute("SELECT seq, type, origin FROM events ORDER BY seq")]
    a.close()
    b.close()
    return out


def takeover_waits(url: str) -> dict[str, Any]:
    setup(url)
    a, b = Node(url, "node-a"), Node(url, "node-b")
    a.acquire("agt_y", 0.3)
    hold, started = threading.Event(), threading.Event()
    res: dict[str, Any] = {}
    # A starts an append while its lease is live and keeps the transaction open past the expiry.
    t = threading.Thread(
        target=lambda: res.setdefault("a", a.append("agt_y", ["tool.called"], hold=hold, started=started))
    )
    t.start()
    started.wait()
    waited = wait_expired(b.conn, "agt_y")
    bt = threading.Thread(target=lambda: res.setdefault("b_token", b.acquire("agt_y", 5.0)))
    bt.start()
    bt.join(timeout=0.5)
    res["b_blocked_while_a_open"] = bt.is_alive()
    hold.set()
    t.join()
    bt.join()
    res["expired_while_open_s"] = round(waited, 3)
    res["order"] = [list(r) for r in b.conn.execute("SELECT seq, type, origin FROM events ORDER BY seq")]
    a.close()
    b.close()
    return res


def timer_once(url: str) -> dict[str, Any]:
    setup(url)
    nodes = [Node(url, f"node-{i}") for i in range(3)]
    barrier = threading.Barrier(3)
    results: list[list[int]] = []

    def fire(n: Node) -> None:
        barrier.wait()
        results.append(n.append("agt_t", ["timer.fired"], fenced=False, key="timer:tmr_1:1700000000000000"))

    ts = [threading.Thread(target=fire, args=(n,)) for n in nodes]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    count = nodes[0].conn.execute("SELECT count(*) FROM events WHERE type = 'timer.fired'").fetchone()[0]
    for n in nodes:
        n.close()
    return {"appends_returned": sorted(results), "timer_fired_rows": count}


def node_name(url: str) -> dict[str, Any]:
    key = "SELECT pg_try_advisory_lock(hashtextextended('holon.node:' || %s, 0))"
    first = psycopg.connect(url, autocommit=True)
    second = psycopg.connect(url, autocommit=True)
    admin = psycopg.connect(url, autocommit=True)
    out = {
        "first": first.execute(key, ("n1",)).fetchone()[0],
        "second_same_name": second.execute(key, ("n1",)).fetchone()[0],
    }
    out["second_other_name"] = second.execute(key, ("n2",)).fetchone()[0]
    pid = first.info.backend_pid
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))  # the first node's process dies
    t0 = time.perf_counter()
    while not second.execute(key, ("n1",)).fetchone()[0]:
        time.sleep(0.005)
    out["name_free_after_death_s"] = round(time.perf_counter() - t0, 4)
    for c in (second, admin):
        c.close()
    first.close()
    return out


def notify(url: str, n: int = 200) -> dict[str, Any]:  # noqa: PLR0915 (one scenario, read top to bottom)
    setup(url)
    listener = psycopg.connect(url, autocommit=True)
    listener.execute("LISTEN holon_events")
    got: dict[int, float] = {}
    stop = threading.Event()

    def listen() -> None:
        gen = listener.notifies(timeout=0.2)
        while not stop.is_set():
            for note in gen:
                got[int(note.payload)] = time.perf_counter()
            gen = listener.notifies(timeout=0.2)

    t = threading.Thread(target=listen)
    t.start()
    a = Node(url, "node-a")
    a.conn.execute("SET synchronous_commit = off")
    sent: dict[int, float] = {}
    for _ in range(n):
        with a.conn.transaction():
            seq, prev = a.conn.execute("SELECT * FROM holon_begin_append()").fetchone()
            rows = a._rows(seq, prev, "agt_n", ["message.received"], None)
            a.conn.cursor().executemany(INSERT, rows)
            a.conn.execute("SELECT pg_notify('holon_events', %s)", (str(rows[-1][0]),))
            sent[rows[-1][0]] = time.perf_counter()
        deadline = time.perf_counter() + 2
        while rows[-1][0] not in got and time.perf_counter() < deadline:
            time.sleep(0.0002)
    lat = [(got[s] - t0) * 1000 for s, t0 in sent.items() if s in got]
    out: dict[str, Any] = {"received": len(lat), "sent": n, "latency_ms_p50": round(pct(lat, 50), 3),
                           "latency_ms_p95": round(pct(lat, 95), 3)}  # fmt: skip
    stop.set()
    t.join()
    # cost of the NOTIFY on an append (single event, synchronous_commit off), alternating blocks
    costs: dict[str, list[float]] = {"with_notify": [], "without_notify": []}
    for _ in range(4):
        for mode in ("without_notify", "with_notify"):
            t0 = time.perf_counter()
            for _ in range(300):
                with a.conn.transaction():
                    seq, prev = a.conn.execute("SELECT * FROM holon_begin_append()").fetchone()
                    rows = a._rows(seq, prev, "agt_n", ["message.received"], None)
                    a.conn.cursor().executemany(INSERT, rows)
                    if mode == "with_notify":
                        a.conn.execute("SELECT pg_notify('holon_events', %s)", (str(rows[-1][0]),))
            costs[mode].append((time.perf_counter() - t0) / 300 * 1e6)
    out["append_us_without_notify"] = round(median(costs["without_notify"]), 1)
    out["append_us_with_notify"] = round(median(costs["with_notify"]), 1)
    # a notification sent while the listener is disconnected is lost; the catch-up finds the event
    admin = psycopg.connect(url, autocommit=True)
    admin.execute("SELECT pg_terminate_backend(%s)", (listener.info.backend_pid,))
    listener.close()
    lost_seq = a.append("agt_n", ["message.received"], fenced=False)[0]
    admin.execute("SELECT pg_notify('holon_events', %s)", (str(lost_seq),))
    l2 = psycopg.connect(url, autocommit=True)
    l2.execute("LISTEN holon_events")
    late = [x.payload for x in l2.notifies(timeout=0.3)]
    cursor = max(got) if got else 0
    found = [r[0] for r in l2.execute("SELECT seq FROM events WHERE seq > %s ORDER BY seq", (cursor,))]
    out["lost_while_disconnected_received_later"] = late
    out["catch_up_found"] = lost_seq in found
    for c in (admin, l2):
        c.close()
    a.close()
    return out


def heartbeat(url: str) -> dict[str, Any]:
    setup(url)
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as c:
        for agents in (50, 500):
            c.execute("DELETE FROM leases")
            c.execute(
                "INSERT INTO leases SELECT 'agt_' || g, 'node-a', 1, clock_timestamp() + interval '15 s' FROM generate_series(1, %s) g",
                (agents,),
            )
            vals = []
            for _ in range(50):
                t0 = time.perf_counter()
                n = c.execute(HEARTBEAT, {"node": "node-a", "lease_s": 15}).rowcount
                vals.append((time.perf_counter() - t0) * 1000)
            out[f"agents_{agents}"] = {
                "renewed": n,
                "ms_p50": round(pct(vals, 50), 3),
                "ms_p95": round(pct(vals, 95), 3),
            }
    return out


def reconnect(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin = psycopg.connect(url, autocommit=True)
    # 1. a connection killed between statements: the next statement fails; what does it raise?
    c = psycopg.connect(url)
    c.execute("SELECT 1")
    admin.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,))
    try:
        c.execute("SELECT 1")
        out["killed_idle_in_tx_error"] = None
    except psycopg.Error as e:
        out["killed_idle_in_tx_error"] = (
            f"{type(e).__module__}.{type(e).__name__} sqlstate={e.sqlstate} closed={c.closed}"
        )
    c.close()
    # 2. a pool whose connections are checked on checkout: one killed connection is replaced unseen
    pool = psycopg_pool.ConnectionPool(
        url, min_size=2, max_size=4, check=psycopg_pool.ConnectionPool.check_connection, open=True
    )
    pool.wait()
    with pool.connection() as pc:
        pid = pc.info.backend_pid
    admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    time.sleep(0.05)  # let the server finish closing them
    t0 = time.perf_counter()
    with pool.connection() as pc:
        pc.execute("SELECT 1")
        out["pool_checked_new_backend"] = pc.info.backend_pid != pid
    out["pool_checked_first_query_after_kill_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    pool.close()
    # 3. the same without the check: the caller sees the error once; the pool discards the connection
    pool = psycopg_pool.ConnectionPool(url, min_size=1, max_size=1, open=True)
    pool.wait()
    with pool.connection() as pc:
        pid = pc.info.backend_pid
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.05)
    try:
        with pool.connection() as pc:
            pc.execute("SELECT 1")
        out["pool_unchecked_error"] = None
    except psycopg.OperationalError as e:
        out["pool_unchecked_error"] = f"OperationalError sqlstate={e.sqlstate}"
    t0 = time.perf_counter()
    with pool.connection(timeout=5) as pc:
        pc.execute("SELECT 1")
    out["pool_unchecked_recovered_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    pool.close()
    # 4. connect cost (what a reconnect pays) and the check's cost per checkout
    vals = []
    for _ in range(20):
        t0 = time.perf_counter()
        psycopg.connect(url).close()
        vals.append((time.perf_counter() - t0) * 1000)
    out["connect_ms_p50"] = round(pct(vals, 50), 2)
    admin.close()
    return out


def fence_cost(url: str) -> dict[str, Any]:
    """µs per event of a fenced append with and without the fencing trigger (sync off)."""
    out: dict[str, Any] = {}
    for k in (1, 10):
        res: dict[str, list[float]] = {"with_fence_trigger": [], "without_fence_trigger": []}
        for _ in range(3):
            for mode in ("without_fence_trigger", "with_fence_trigger"):
                setup(url)
                a = Node(url, "node-a")
                a.acquire("agt_f", 600)
                if mode == "without_fence_trigger":
                    a.conn.execute("DROP TRIGGER events_fence ON events")
                a.conn.execute("SET synchronous_commit = off")
                types = ["tool.called"] * k
                for _ in range(20):
                    a.append("agt_f", types)
                t0 = time.perf_counter()
                for _ in range(3000 // k):
                    a.append("agt_f", types)
                res[mode].append((time.perf_counter() - t0) / (3000 // k * k) * 1e6)
                a.close()
        out[f"batch{k}"] = {m: round(median(v), 1) for m, v in res.items()}
    return out


def main() -> None:
    result: dict[str, Any] = {}
    with scratch_db("rfc0008_cluster") as url:
        result["fencing"] = fencing(url)
        result["takeover_waits_for_append"] = takeover_waits(url)
        result["timer_once"] = timer_once(url)
        result["node_name"] = node_name(url)
        result["notify"] = notify(url)
        result["heartbeat"] = heartbeat(url)
        result["fence_cost_us_per_event"] = fence_cost(url)
        result["reconnect"] = reconnect(url)
    emit(result)


if __name__ == "__main__":
    main()
