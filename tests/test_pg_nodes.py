"""Node names and timers across nodes (real PostgreSQL, RFC 0008): a second node with the same name
is refused while the first lives, the name is free again once the holder's backend dies (or its
process is killed); a timer's firing claimed by three nodes at once is recorded once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.pg import PgDatabase

from holon.errors import LedgerError, NodeNameTaken
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.pg.append import append
from holon.ledger.pg.leases import Leases
from holon.ledger.pg.migrations import latest_version
from holon.ledger.pg.nodes import claim, list_nodes, unclaim
from holon.ledger.pg.rows import rows_for
from holon.ledger.pg.timers import claim_fire, fire_key

Conn = psycopg.Connection[tuple[Any, ...]]
NOW = 1_700_000_000_000_000
REPO = Path(__file__).resolve().parents[1]


def _claim_when_free(conn: Conn, name: str, *, timeout_s: float = 10.0) -> float:
    """Claim ``name`` as soon as it is free (polling); returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            claim(conn, name, schema_version=latest_version(), host="h2", pid=2)
            return time.monotonic() - t0
        except NodeNameTaken:
            assert time.monotonic() - t0 < timeout_s, f"node name {name} still taken after {timeout_s} s"
            time.sleep(0.005)


def test_a_second_node_with_the_same_name_is_refused_until_the_first_dies(pg_conns: Callable[[], Conn]) -> None:
    first, second, admin = pg_conns(), pg_conns(), pg_conns()
    info = claim(first, "n1", schema_version=latest_version(), url="http://h1:8080", host="h1", pid=111)
    assert (info.name, info.host, info.pid, info.url, info.schema_version) == (
        "n1", "h1", 111, "http://h1:8080", latest_version()
    )  # fmt: skip
    with pytest.raises(NodeNameTaken, match=r"node n1 is already running \(host h1, pid 111, seen \d+\.\d s ago\)"):
        claim(second, "n1", schema_version=latest_version())
    assert NodeNameTaken("x").exit_code == 2
    claim(second, "n2", schema_version=latest_version(), host="h2", pid=222)  # another name: fine
    assert [n.name for n in list_nodes(admin)] == ["n1", "n2"]
    admin.execute("SELECT pg_terminate_backend(%s)", (first.info.backend_pid,))  # the holder dies
    _claim_when_free(second, "n1")
    assert next(n for n in list_nodes(admin) if n.name == "n1").host == "h2"


def test_a_clean_stop_frees_the_name(pg_conns: Callable[[], Conn]) -> None:
    first, second = pg_conns(), pg_conns()
    claim(first, "n1", schema_version=latest_version())
    assert unclaim(first, "n1") is True
    assert unclaim(first, "n1") is False
    claim(second, "n1", schema_version=latest_version())


_HOLDER = """
import sys, time
from holon.ledger.pg.connect import connect
from holon.ledger.pg.nodes import claim
conn = connect(sys.argv[1], timeout_s=10)
claim(conn, "n1", schema_version=int(sys.argv[2]))
print("claimed", flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # starts a process
def test_the_name_is_free_once_the_holders_process_is_killed(pg_conns: Callable[[], Conn], pg_db: PgDatabase) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, pg_db.url, str(latest_version())],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
        other = pg_conns()
        with pytest.raises(NodeNameTaken, match=f"pid {proc.pid}"):
            claim(other, "n1", schema_version=latest_version())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        _claim_when_free(other, "n1")  # the server notices the closed socket and ends the session
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_timer_firing_is_claimed_once_by_three_concurrent_nodes(pg_conns: Callable[[], Conn]) -> None:
    nodes = [pg_conns() for _ in range(3)]
    fired = ev.TimerFired(timer_id="tmr_1", scheduled_for_us=NOW)
    barrier = threading.Barrier(3)
    results: list[int | None] = []
    errors: list[BaseException] = []

    def fire(conn: Conn) -> None:
        try:
            barrier.wait(timeout=30)
            results.append(claim_fire(conn, "agt_t", fired, now_us=NOW))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=fire, args=(c,)) for c in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(results, key=lambda r: r is None) == [1, None, None]
    rows = nodes[0].execute("SELECT type, idempotency_key, authority FROM events").fetchall()
    assert rows == [("timer.fired", fire_key("tmr_1", NOW), "timer")]
    # the next due time is another firing; and the same one again is still a no-op
    assert claim_fire(nodes[1], "agt_t", ev.TimerFired(timer_id="tmr_1", scheduled_for_us=NOW + 1), now_us=NOW) == 2
    assert claim_fire(nodes[2], "agt_t", fired, now_us=NOW) is None


def test_a_client_that_skips_the_claim_hits_the_unique_key(pg_conns: Callable[[], Conn]) -> None:
    conn = pg_conns()
    fired = ev.TimerFired(timer_id="tmr_1", scheduled_for_us=NOW)
    assert claim_fire(conn, "agt_t", fired, now_us=NOW) == 1
    again = NewEvent("agt_t", fired, origin="timer:tmr_1", authority="timer", idempotency_key=fire_key("tmr_1", NOW))
    with pytest.raises(LedgerError, match="events_idempotency"):
        append(conn, lambda head: rows_for(head, [again], now_us=NOW))


_OWNER = """
import sys, time
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.pg.append import EVENT_INSERT, begin_append
from holon.ledger.pg.connect import connect
from holon.ledger.pg.leases import Leases
from holon.ledger.pg.nodes import claim
from holon.ledger.pg.rows import rows_for
conn = connect(sys.argv[1], timeout_s=10)
claim(conn, "a", schema_version=int(sys.argv[2]))
node = Leases(conn, "a", lease_s=float(sys.argv[3]))
node.acquire("agt_k")
head = begin_append(conn, fence=node.fence_for("agt_k"))  # a turn's append, left open
rows, _ = rows_for(head, [NewEvent("agt_k", ev.TurnStarted(turn_id="trn_k"), origin="node:a")], now_us=1)
conn.cursor().executemany(EVENT_INSERT, rows)
print("open", flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # starts a process and waits out a real lease
def test_a_killed_owner_loses_its_open_append_its_name_and_then_its_agent(
    pg_conns: Callable[[], Conn], pg_db: PgDatabase
) -> None:
    """SIGKILL of a node in the middle of an append: the server rolls its transaction back (and
    frees the ledger lock and the node's name at once); the lease runs out on the database's clock
    and another node takes the agent over with the next token."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, pg_db.url, str(latest_version()), "1.0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        b = Leases(pg_conns(), "b", lease_s=30)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        _claim_when_free(pg_conns(), "a")  # the killed node's session is gone
        deadline = time.monotonic() + 10
        while (token := b.acquire("agt_k")) is None:  # refused while the dead node's lease lives
            assert time.monotonic() < deadline, "the dead node's lease did not run out"
            time.sleep(0.02)
        assert token == 2
        types = [r[0] for r in b.conn.execute("SELECT type FROM events ORDER BY seq")]
        assert types == ["lease.acquired", "lease.acquired"]  # the open turn.started never committed
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
