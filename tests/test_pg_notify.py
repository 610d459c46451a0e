"""Wakes across nodes (real PostgreSQL, RFC 0008 "Wakes"): an append's ``pg_notify`` reaches a
``Listener`` with the new head and its agents; an append whose notification was lost is found by
the periodic catch-up; a listener whose backend is terminated reconnects with backoff and finds
what was appended meanwhile; a rolled-back append notifies no one; an input on one node wakes its
agent's owner on another."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers.pg import PgDatabase

from holon.errors import FencedOut
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.pg.append import Head, append, begin_append, rollback
from holon.ledger.pg.connect import connect
from holon.ledger.pg.leases import Leases
from holon.ledger.pg.notify import Advance, Listener, notification, parse_notification
from holon.ledger.pg.rows import rows_for

Conn = psycopg.Connection[tuple[Any, ...]]
NOW = 1_700_000_000_000_000


def _input(conn: Conn, *agents: str, notify: bool = True) -> Head:
    events = [NewEvent(a, ev.MessageReceived(text="hi"), origin="api") for a in agents]
    return append(conn, lambda head: rows_for(head, events, now_us=NOW), notify=notify)


def _next(q: queue.Queue[Advance], *, timeout_s: float = 10.0) -> Advance:
    try:
        return q.get(timeout=timeout_s)
    except queue.Empty:
        raise AssertionError(f"no advance within {timeout_s} s") from None


def _listener(pg_db: PgDatabase, q: queue.Queue[Advance], **kwargs: Any) -> Listener:
    connect_ = kwargs.pop("connect", lambda: connect(pg_db.url, timeout_s=10))
    listener = Listener(connect_, q.put, **kwargs).start()
    assert listener.wait_listening(10)
    return listener


def test_payload_names_the_head_and_the_agents() -> None:
    rows = [(7, "e", "agt_b"), (8, "e", "agt_a"), (9, "e", "agt_b")]
    assert notification(rows) == '{"seq":9,"agents":["agt_a","agt_b"]}'
    assert parse_notification(notification(rows)) == Advance(9, frozenset({"agt_a", "agt_b"}), "notify")
    many = [(i, "e", f"agt_{i:08d}") for i in range(1, 1000)]
    assert parse_notification(notification(many)) == Advance(999, None, "notify")  # over NOTIFY's 8000 bytes
    assert parse_notification("not json") is None and parse_notification('{"x":1}') is None


def test_an_append_wakes_a_listener_with_its_agents(pg_db: PgDatabase, pg_conns: Callable[[], Conn]) -> None:
    q: queue.Queue[Advance] = queue.Queue()
    writer = pg_conns()
    with _listener(pg_db, q, catch_up_s=60) as listener:
        head = _input(writer, "agt_1", "agt_2")
        assert _next(q) == Advance(head.seq, frozenset({"agt_1", "agt_2"}), "notify")
        head = _input(writer, "agt_3")
        assert _next(q) == Advance(head.seq, frozenset({"agt_3"}), "notify")
        # a rolled-back transaction notifies no one; the next commit's notification comes next
        begin_append(writer)
        writer.execute("SELECT pg_notify('holon_events', '{\"seq\":999,\"agents\":[]}')")
        rollback(writer)
        head = _input(writer, "agt_4")
        assert _next(q) == Advance(head.seq, frozenset({"agt_4"}), "notify")
        assert listener.seen == head.seq


def test_a_lost_notification_is_found_by_the_catch_up(pg_db: PgDatabase, pg_conns: Callable[[], Conn]) -> None:
    q: queue.Queue[Advance] = queue.Queue()
    writer = pg_conns()
    with _listener(pg_db, q, catch_up_s=0.2):
        head = _input(writer, "agt_1", notify=False)  # as if the notification never arrived
        assert _next(q) == Advance(head.seq, None, "catch_up")


def test_a_listener_starting_behind_reports_what_it_missed(pg_db: PgDatabase, pg_conns: Callable[[], Conn]) -> None:
    writer = pg_conns()
    head = _input(writer, "agt_1", notify=False)
    q: queue.Queue[Advance] = queue.Queue()
    with _listener(pg_db, q, after=0, catch_up_s=60):
        assert _next(q) == Advance(head.seq, None, "catch_up")


def test_the_listener_reconnects_and_finds_what_was_appended_while_it_was_away(
    pg_db: PgDatabase, pg_conns: Callable[[], Conn]
) -> None:
    """The listener's backend is terminated; while it is away (its reconnect held at a gate) an
    append's notification is sent to no one; once back it finds the event at once (the catch-up
    after every reconnect), and notifications flow again."""
    q: queue.Queue[Advance] = queue.Queue()
    writer, admin = pg_conns(), pg_conns()
    gate, waiting = threading.Event(), threading.Event()
    attempts = [0]

    def gated_connect() -> Conn:
        attempts[0] += 1
        if attempts[0] > 1:
            waiting.set()
            assert gate.wait(30)
        return connect(pg_db.url, timeout_s=10)

    listener = _listener(pg_db, q, connect=gated_connect, catch_up_s=60, backoff_s=(0.01, 0.05))
    try:
        pid = listener.backend_pid
        assert pid is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert waiting.wait(10), "the listener did not notice its lost connection"
        assert listener.losses == 1 and listener.last_error
        head = _input(writer, "agt_1")  # notified while no one listens: lost
        gate.set()
        assert _next(q) == Advance(head.seq, None, "catch_up")
        assert listener.connects == 2 and listener.backend_pid not in (None, pid)
        head = _input(writer, "agt_2")
        assert _next(q) == Advance(head.seq, frozenset({"agt_2"}), "notify")
    finally:
        gate.set()
        listener.stop()
    assert q.empty()


def test_a_failing_callback_does_not_stop_the_wakes(pg_db: PgDatabase, pg_conns: Callable[[], Conn]) -> None:
    got: queue.Queue[Advance] = queue.Queue()
    calls = [0]

    def on_advance(a: Advance) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug in the caller")
        got.put(a)

    writer = pg_conns()
    listener = Listener(lambda: connect(pg_db.url, timeout_s=10), on_advance, catch_up_s=60).start()
    try:
        assert listener.wait_listening(10)
        _input(writer, "agt_1")
        head = _input(writer, "agt_2")
        assert _next(got) == Advance(head.seq, frozenset({"agt_2"}), "notify")
        assert listener.connects == 1 and listener.losses == 0
    finally:
        listener.stop()


def test_stop_is_prompt(pg_db: PgDatabase) -> None:
    listener = Listener(lambda: connect(pg_db.url, timeout_s=10), lambda a: None, catch_up_s=60).start()
    assert listener.wait_listening(10)
    t0 = time.monotonic()
    listener.stop(timeout_s=10)
    assert not listener._thread.is_alive()
    assert time.monotonic() - t0 < 5  # bounded by poll_s (0.25 s), generously


def test_an_input_on_one_node_wakes_the_owner_on_another(pg_db: PgDatabase, pg_conns: Callable[[], Conn]) -> None:
    """Steps 9 and 10 together, as the daemon will use them: node A owns the agent; node B's API
    appends the input (unfenced) and notifies; A's listener wakes with the agent's id and A runs
    the turn under its fence; B cannot."""
    a, b = Leases(pg_conns(), "a", lease_s=30), Leases(pg_conns(), "b", lease_s=30)
    assert a.acquire("agt_1") == 1
    woken: queue.Queue[Advance] = queue.Queue()
    with _listener(pg_db, woken, catch_up_s=60):
        head = _input(b.conn, "agt_1")  # B's API
        wake = _next(woken)
        assert wake == Advance(head.seq, frozenset({"agt_1"}), "notify")
        assert wake.agents is not None and all(a.holds(agent) for agent in wake.agents)
        turn = [NewEvent("agt_1", ev.TurnStarted(turn_id="trn_1", inputs=[head.seq]), origin="node:a")]
        started = append(a.conn, lambda h: rows_for(h, turn, now_us=NOW), fence=a.fence_for("agt_1"), notify=True)
        assert _next(woken) == Advance(started.seq, frozenset({"agt_1"}), "notify")
        with pytest.raises(FencedOut):
            b.fence_for("agt_1")
