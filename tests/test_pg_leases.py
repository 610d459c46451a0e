"""Leases with fencing tokens, checked by PostgreSQL itself (real PostgreSQL, RFC 0008 "Leases with
fencing tokens"): the lease sequence of ``rfcs/0008/cluster.py`` as tests (an expired node refused
before and after a takeover, a takeover waits for the old owner's open append, a heartbeat of
many leases in one UPDATE), a stale fence refused by the database even when the client skips its
own check, self-fencing by the node's own deadline, release, and the unfenced types.

Leases here last a fraction of a second; every wait polls the database clock with a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from helpers.ctx_ledger import Script
from helpers.pg import PgDatabase

from holon.clock import FakeClock
from holon.errors import FencedOut, LedgerError, StorageUnavailable
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import decode_payload
from holon.ledger.events import PAYLOAD_TYPES
from holon.ledger.pg.append import EVENT_INSERT, Head, append, begin_append, insert_and_commit, rollback
from holon.ledger.pg.fence import Fence
from holon.ledger.pg.leases import HEARTBEAT, Leases, fence, self_fence_deadline
from holon.ledger.pg.migrations import UNFENCED_TYPES
from holon.ledger.pg.rows import rows_for
from holon.projections import Store
from holon.projections.episodes import IDLE_GAP_US

Conn = psycopg.Connection[tuple[Any, ...]]
NOW = 1_700_000_000_000_000
X = "agt_x"


def _append(conn: Conn, agent: str, *payloads: ev.PayloadBase, fence: Fence | None = None, by: str = "a") -> Head:
    events = [NewEvent(agent, p, origin=f"node:{by}", authority="runtime") for p in payloads]  # type: ignore[arg-type]
    return append(conn, lambda head: rows_for(head, events, now_us=NOW), fence=fence)


def _wait_expired(conn: Conn, agent: str, *, timeout_s: float = 10.0) -> None:
    """Poll the database clock until ``agent``'s lease has expired."""
    deadline = time.monotonic() + timeout_s
    while conn.execute(
        "SELECT expires_at > clock_timestamp() FROM leases WHERE agent_id = %s", (agent,)
    ).fetchone() != (False,):
        assert time.monotonic() < deadline, f"the lease of {agent} did not expire within {timeout_s} s"
        time.sleep(0.01)


def _order(conn: Conn) -> list[tuple[str, str]]:
    """(type, origin) of every event, in seq order."""
    return [(str(r[0]), str(r[1])) for r in conn.execute("SELECT type, origin FROM events ORDER BY seq")]


def _turn(n: int) -> str:
    return f"trn_{n}"


def test_the_lease_sequence_an_expired_node_is_refused_before_and_after_a_takeover(
    pg_conns: Callable[[], Conn],
) -> None:
    a = Leases(pg_conns(), "a", lease_s=0.6)
    b = Leases(pg_conns(), "b", lease_s=30)
    assert a.acquire(X) == 1
    assert b.acquire(X) is None  # A's lease lives
    _append(a.conn, X, ev.TurnStarted(turn_id=_turn(1)), ev.ModelRequested(turn_id=_turn(1), round=0, model="m", messages=1), fence=a.fence_for(X))  # fmt: skip
    with pytest.raises(FencedOut, match=r"turn.started for agent agt_x needs the agent's lease") as no_fence:
        _append(b.conn, X, ev.TurnStarted(turn_id=_turn(2)), by="b")
    assert no_fence.value.agent_id == X
    _append(b.conn, X, ev.MessageReceived(text="hi"), by="b")  # an input: any node, no lease
    stale = Fence("a", {X: 1})  # what A still believes, used as a client that skips its own check
    _wait_expired(b.conn, X)
    assert a.heartbeat() == frozenset()  # an expired lease is never revived
    assert not a.holds(X)
    with pytest.raises(FencedOut, match=r"node a \(token 1\) no longer holds the lease of agent agt_x"):
        _append(a.conn, X, ev.ModelResponded(turn_id=_turn(1), round=0, model="m"), fence=stale)  # before a takeover
    assert b.acquire(X) == 2  # takeover
    with pytest.raises(FencedOut, match="no longer holds the lease"):
        _append(a.conn, X, ev.TurnSettled(turn_id=_turn(1), outcome="completed"), fence=stale)  # and after it
    _append(b.conn, X, ev.TurnSettled(turn_id=_turn(1), outcome="interrupted"), fence=b.fence_for(X), by="b")
    assert a.acquire(X) is None  # B's lease lives
    assert _order(b.conn) == [
        ("lease.acquired", "node:a"),
        ("turn.started", "node:a"),
        ("model.requested", "node:a"),
        ("message.received", "node:b"),
        ("lease.acquired", "node:b"),
        ("turn.settled", "node:b"),
    ]
    payloads = [
        decode_payload(r[0], r[1], r[2])
        for r in b.conn.execute("SELECT type, version, payload FROM events WHERE type = 'lease.acquired' ORDER BY seq")
    ]
    assert payloads == [
        ev.LeaseAcquired(node="a", token=1, lease_s=0.6),
        ev.LeaseAcquired(node="b", token=2, lease_s=30),
    ]
    owner = b.owner_of(X)
    assert owner is not None and (owner.node, owner.token, owner.live) == ("b", 2, True)


def test_a_takeover_waits_for_the_old_owners_open_append(pg_conns: Callable[[], Conn]) -> None:
    a = Leases(pg_conns(), "a", lease_s=0.5)
    b = Leases(pg_conns(), "b", lease_s=30)
    watcher = pg_conns()
    assert a.acquire(X) == 1
    # A opens an append while its lease lives, inserts, and keeps the transaction open past expiry
    head = begin_append(a.conn, fence=a.fence_for(X))
    rows, _ = rows_for(
        head, [NewEvent(X, ev.ToolCalled(call_id="c1", tool="t", arguments="{}"), origin="node:a")], now_us=NOW
    )
    a.conn.cursor().executemany(EVENT_INSERT, rows)
    _wait_expired(watcher, X)
    result: dict[str, int | None] = {}
    taker = threading.Thread(target=lambda: result.setdefault("token", b.acquire(X)))
    taker.start()
    try:
        # B waits on the ledger lock A holds (seen in pg_stat_activity, not guessed from time)
        deadline = time.monotonic() + 10
        pid = b.conn.info.backend_pid
        while watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() != (
            "Lock",
        ):
            assert time.monotonic() < deadline and taker.is_alive(), "B's takeover did not wait for A's append"
            time.sleep(0.01)
        assert "token" not in result
        a.conn.execute("COMMIT")  # inserted while the lease lived: the fence checked it then
    finally:
        taker.join(timeout=30)
    assert result == {"token": 2}
    assert _order(watcher) == [("lease.acquired", "node:a"), ("tool.called", "node:a"), ("lease.acquired", "node:b")]


def test_a_stale_token_is_refused_by_the_database_whatever_the_client_checks(pg_conns: Callable[[], Conn]) -> None:
    """Raw SQL with ``fence()`` (no holon_begin_append, no local deadline): the trigger alone refuses.
    A node that lost the agent and won it back (token 1 -> 2 -> 3) must not let token 1 append."""
    a = Leases(pg_conns(), "a", lease_s=0.3)
    b = Leases(pg_conns(), "b", lease_s=0.3)
    raw = pg_conns()
    assert a.acquire(X) == 1
    _wait_expired(raw, X)
    assert b.acquire(X) == 2
    _wait_expired(raw, X)
    a.lease_s = 30
    assert a.acquire(X) == 3

    def raw_insert(tokens: dict[str, int], agent: str = X) -> None:
        head = Head(*raw.execute("SELECT * FROM holon_begin_append()").fetchone())  # type: ignore[misc]
        rollback(raw)
        rows, _ = rows_for(head, [NewEvent(agent, ev.DecisionRecorded(text="raw"), origin="node:a")], now_us=NOW)
        with raw.transaction(), fence(raw, "a", tokens):
            raw.cursor().executemany(EVENT_INSERT, rows)

    for tokens in ({X: 1}, {X: 2}, {"agt_other": 3}):
        with pytest.raises(psycopg.Error) as refused:
            raw_insert(tokens)
        assert refused.value.sqlstate == "HLF01", tokens
    raw_insert({X: 3})
    assert _order(raw)[-1] == ("decision.recorded", "node:a")


def test_one_transaction_fences_several_agents(pg_conns: Callable[[], Conn]) -> None:
    """A group commit carries the tokens of every agent it appends for; one missing is refused."""
    node = Leases(pg_conns(), "a", lease_s=30)
    assert node.acquire("agt_1") == 1 and node.acquire("agt_2") == 1
    events = [NewEvent(a, ev.DecisionRecorded(text=a), origin="node:a") for a in ("agt_1", "agt_2")]
    append(node.conn, lambda head: rows_for(head, events, now_us=NOW), fence=node.fence_for("agt_1", "agt_2"))
    with pytest.raises(FencedOut) as refused:
        append(node.conn, lambda head: rows_for(head, events, now_us=NOW), fence=node.fence_for("agt_1"))
    assert refused.value.agent_id == "agt_2"
    assert [t for t, _ in _order(node.conn)].count("decision.recorded") == 2


def test_heartbeat_renews_every_lease_of_the_node_in_one_update(
    pg_conns: Callable[[], Conn], pg_db: PgDatabase
) -> None:
    node = Leases(pg_conns(), "a", lease_s=30)
    other = pg_conns()
    agents = [f"agt_{i:03d}" for i in range(300)]
    other.execute(
        "INSERT INTO leases SELECT 'agt_' || lpad(g::text, 3, '0'), 'a', 1, clock_timestamp() + interval '2 s' "
        "FROM generate_series(0, 299) g"
    )
    other.execute("UPDATE leases SET expires_at = clock_timestamp() - interval '1 s' WHERE agent_id = 'agt_007'")
    other.execute("INSERT INTO leases VALUES ('agt_b', 'b', 1, clock_timestamp() + interval '2 s')")
    node.tokens.update(dict.fromkeys(agents, 1))
    assert HEARTBEAT.count("UPDATE leases") == 1  # one statement for the node, whatever its count of leases
    renewed = node.heartbeat()
    assert renewed == frozenset(agents) - {"agt_007"}
    assert "agt_007" not in node.tokens and not node.holds("agt_007")  # expired: given up, not revived
    left = other.execute(
        "SELECT node, min(extract(epoch FROM expires_at - clock_timestamp())) FROM leases GROUP BY node ORDER BY node"
    ).fetchall()
    assert left[0][0] == "a" and left[0][1] < 0  # agt_007 stayed expired
    live = other.execute(
        "SELECT count(*) FROM leases WHERE node = 'a' AND expires_at > clock_timestamp() + interval '20 s'"
    ).fetchone()
    assert live == (299,)
    assert left[1][0] == "b" and left[1][1] < 2.5  # another node's lease untouched
    assert [o.agent_id for o in node.owners(live_only=True) if o.node == "a"] == sorted(set(agents) - {"agt_007"})
    assert node.expired() == ["agt_007"]


def test_a_node_restarted_under_its_name_does_not_renew_the_dead_processs_leases(
    pg_conns: Callable[[], Conn],
) -> None:
    """Regression (found by the chaos test): the heartbeat renewed every live lease under the node's
    name, so a node SIGKILLed and restarted within ``lease_s`` kept its dead process's leases alive
    for ever without acting for those agents; their inputs were never answered. The restarted
    process renews only what it holds; the old lease expires and is taken with a new token."""
    dead = Leases(pg_conns(), "a", lease_s=0.6)
    assert dead.acquire(X) == 1
    again = Leases(pg_conns(), "a", lease_s=0.6)  # the same name in a new process: it holds nothing yet
    observer = pg_conns()
    deadline = time.monotonic() + 10
    while observer.execute(
        "SELECT expires_at > clock_timestamp() FROM leases WHERE agent_id = %s", (X,)
    ).fetchone() != (False,):
        assert again.heartbeat() == frozenset()  # beats as often as it likes: the dead lease is not renewed
        assert time.monotonic() < deadline, "the dead process's lease was kept alive"
        time.sleep(0.02)
    assert again.expired() == [X]
    assert again.acquire(X) == 2  # a new token: anything of the dead process's is fenced out
    assert again.heartbeat() == frozenset({X}) and again.holds(X)


def test_self_fencing_stops_the_node_before_the_database_would() -> None:
    assert self_fence_deadline(100.0, 15.0) == pytest.approx(112.0)  # the RFC's lease_s - 3 s
    assert self_fence_deadline(0.0, 3.0) == pytest.approx(2.4)
    with pytest.raises(ValueError, match="margin"):
        self_fence_deadline(0.0, 15.0, margin=1.0)


def test_self_fencing_refuses_locally_past_the_deadline(pg_conns: Callable[[], Conn]) -> None:
    now = [1000.0]
    node = Leases(pg_conns(), "a", lease_s=30, clock=lambda: now[0])
    assert node.acquire(X) == 1
    node.fence_for(X)
    now[0] += 30 * 0.8 - 0.001
    assert node.holds(X)
    now[0] += 0.002  # the heartbeat did not come back in time: the node stops acting, the lease still lives
    assert not node.holds(X)
    with pytest.raises(FencedOut, match="ran past this node's deadline"):
        node.fence_for(X)
    owner = node.owner_of(X)
    assert owner is not None and owner.live
    assert node.heartbeat() == {X}  # a successful renewal gives the node a new deadline
    assert node.holds(X)
    with pytest.raises(FencedOut, match="no lease"):
        node.fence_for("agt_never")


def test_release_frees_the_agent_and_is_recorded(pg_conns: Callable[[], Conn]) -> None:
    a = Leases(pg_conns(), "a", lease_s=30)
    b = Leases(pg_conns(), "b", lease_s=30)
    assert a.acquire(X) == 1
    assert a.release(X, reason="rebalance") is True
    assert not a.holds(X)
    assert b.acquire(X) == 2  # at once: no expiry to wait for
    assert a.release(X) is False  # no longer A's: nothing appended
    assert [t for t, _ in _order(b.conn)] == ["lease.acquired", "lease.released", "lease.acquired"]
    row = b.conn.execute("SELECT type, version, payload FROM events WHERE type = 'lease.released'").fetchone()
    assert row is not None
    assert decode_payload(row[0], row[1], row[2]) == ev.LeaseReleased(node="a", token=1, reason="rebalance")


def test_reacquiring_keeps_a_live_token_and_renews_an_expired_one(pg_conns: Callable[[], Conn]) -> None:
    node = Leases(pg_conns(), "a", lease_s=30)
    assert node.acquire(X) == 1
    assert node.acquire(X) == 1  # renewed: a turn running under token 1 goes on
    assert node.owner_of("agt_none") is None
    short = Leases(pg_conns(), "a", lease_s=0.3)
    assert short.acquire("agt_y") == 1
    _wait_expired(short.conn, "agt_y")
    assert short.acquire("agt_y") == 2  # its own, but expired: a turn still running under 1 must not append


def test_unfenced_types_are_the_declared_ones_and_every_other_type_needs_the_lease(
    pg_conns: Callable[[], Conn],
) -> None:
    """Each payload type appended from a transaction with no fence: accepted exactly when declared
    unfenced (the list is closed: a new type is fenced unless a migration declares it), once the
    agent has been leased by some node."""
    conn = pg_conns()
    assert Leases(pg_conns(), "b", lease_s=30).acquire(X) == 1
    assert set(UNFENCED_TYPES) <= set(PAYLOAD_TYPES)
    accepted: list[str] = []
    for tag in sorted(PAYLOAD_TYPES):
        row_sql = "SELECT * FROM holon_begin_append()"
        with conn.transaction():
            seq = int(conn.execute(row_sql).fetchone()[0]) + 1  # type: ignore[index]
            try:
                with conn.transaction():  # a savepoint: the refusal rolls back this row only
                    conn.execute(
                        EVENT_INSERT,
                        (seq, f"evt_{seq}", X, tag, 1, NOW, "api", "operator", *[None] * 5, "{}", f"{seq:064x}"),
                    )
                accepted.append(tag)
            except psycopg.Error as e:
                assert e.sqlstate == "HLF01", (tag, e)
    assert accepted == sorted(UNFENCED_TYPES)
    assert "lease.acquired" not in accepted  # its own transaction holds the new lease


def _append_unfenced(conn: Conn, agent: str, tag: str) -> bool:
    """Append one event of type ``tag`` for ``agent`` with no fence; whether the database took it."""
    with conn.transaction():
        seq = int(conn.execute("SELECT * FROM holon_begin_append()").fetchone()[0]) + 1  # type: ignore[index]
        try:
            with conn.transaction():
                conn.execute(
                    EVENT_INSERT,
                    (seq, f"evt_{seq}", agent, tag, 1, NOW, "api", "operator", *[None] * 5, "{}", f"{seq:064x}"),
                )
            return True
        except psycopg.Error as e:
            assert e.sqlstate == "HLF01", (tag, e)
            return False


def test_an_agent_no_node_ever_leased_needs_no_fence_and_a_released_one_does(pg_conns: Callable[[], Conn]) -> None:
    """A single process without nodes (the CLI, one daemon without ``--node``) owns every agent and
    takes no leases: its appends pass. Once a node has leased the agent, the lease row stays (a
    release only expires it), so a stale writer without the live token is refused for good."""
    conn = pg_conns()
    assert _append_unfenced(conn, "agt_solo", "turn.started")
    node = Leases(pg_conns(), "a", lease_s=30)
    assert node.acquire("agt_solo") == 1
    assert not _append_unfenced(conn, "agt_solo", "turn.started")
    assert node.release("agt_solo")
    assert not _append_unfenced(conn, "agt_solo", "turn.started")
    assert _append_unfenced(conn, "agt_solo", "message.received")


def test_a_refusal_other_than_the_fence_stays_a_ledger_error(pg_conns: Callable[[], Conn]) -> None:
    conn = pg_conns()
    head = begin_append(conn, fence=Fence("a", {}))
    rows, _ = rows_for(head, [NewEvent(X, ev.MessageReceived(text="x"))], now_us=NOW)
    bad: Sequence[Any] = (rows[0][0] + 1, *rows[0][1:])  # a gap
    with pytest.raises(LedgerError) as refused:
        insert_and_commit(conn, [bad])
    assert not isinstance(refused.value, FencedOut)


def test_what_the_projector_derives_in_an_inputs_transaction_is_unfenced(store: Store, clock: FakeClock) -> None:
    """An input arriving through any node's API is appended without a fence, and the projector
    derives events in the same transaction (RFC 0008 risk "Unfenced derivations"): an operator
    message after an idle gap seals the episode before it. On SQLite (the same projector); each
    derived type must be unfenced, or the input would be refused on PostgreSQL."""
    s = Script(store)
    s.exchange("what is the capital of France?", "Paris.")
    clock.advance(seconds=IDLE_GAP_US / 1_000_000)
    said = s.say("good morning, anything new?")
    derived = [e.type for e in store.ledger.read(after=said.seq)]
    assert derived == ["episode.sealed"]
    assert set(derived) <= set(UNFENCED_TYPES)


def test_a_lost_connection_is_storage_unavailable(pg_conns: Callable[[], Conn]) -> None:
    """What the daemon's heartbeat loop sees when the server drops its connection: holon's
    retryable error, never a psycopg exception."""
    node, admin = Leases(pg_conns(), "a", lease_s=30), pg_conns()
    assert node.acquire(X) == 1
    admin.execute("SELECT pg_terminate_backend(%s)", (node.conn.info.backend_pid,))
    with pytest.raises(StorageUnavailable, match="during the heartbeat"):
        node.heartbeat()
    with pytest.raises(StorageUnavailable):
        node.owners()


@pytest.mark.slow  # waits most of a real 2.5 s lease
def test_a_node_that_cannot_renew_stops_before_its_lease_expires(pg_conns: Callable[[], Conn]) -> None:
    """Real clocks: the node's own deadline (80% of the lease, from the moment it sent the acquire)
    passes while the database still counts the lease as live, so the old owner has stopped before
    any other node could take over."""
    node = Leases(pg_conns(), "a", lease_s=2.5)
    assert node.acquire(X) == 1
    deadline = time.monotonic() + 10
    while node.holds(X):  # no heartbeat: as if the database were unreachable
        assert time.monotonic() < deadline
        time.sleep(0.005)
    owner = node.owner_of(X)  # asked right after the node stopped acting
    assert owner is not None and owner.live and owner.remaining_s > 0
    with pytest.raises(FencedOut):
        node.fence_for(X)
