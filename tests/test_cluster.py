"""A node of several, in this process (RFC 0008 steps 9-11; the subprocess tests are
``test_cluster_nodes.py``): the spreading policy (pure), ``turn.started`` v2, and on real PostgreSQL
the fence every append of a node carries (``PgEngine.fencer``), its notification, and the node's
session (name claim, heartbeat, reconnect)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.pg import PgDatabase

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings
from holon.daemon.cluster import GRACE_S, plan, preferred
from holon.errors import ConfigError, FencedOut, NodeNameTaken, StorageUnavailable
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import decode_payload, encode_payload
from holon.ledger.pg.node import NodeSession
from holon.ledger.pg.notify import Advance, Listener
from holon.projections import Store

# --- the policy (pure) ------------------------------------------------------------------------------


def test_rendezvous_moves_only_the_leaving_nodes_agents_and_about_a_share_to_a_new_one() -> None:
    agents = [f"agt_{i:03d}" for i in range(300)]
    three = {a: preferred(a, ["a", "b", "c"]) for a in agents}
    assert set(three.values()) == {"a", "b", "c"}
    two = {a: preferred(a, ["a", "b"]) for a in agents}
    assert all(two[a] == three[a] for a in agents if three[a] != "c")  # only c's agents move
    four = {a: preferred(a, ["a", "b", "c", "d"]) for a in agents}
    moved = [a for a in agents if four[a] != three[a]]
    assert all(four[a] == "d" for a in moved) and 40 < len(moved) < 110  # about 1/4, all to d
    assert preferred("agt_x", []) is None
    assert preferred("agt_x", ["b", "a"]) == preferred("agt_x", ["a", "b"])  # order does not matter


def test_the_plan_takes_what_this_node_is_preferred_for_and_gives_back_between_turns() -> None:
    agents = [f"agt_{i:02d}" for i in range(40)]
    mine = [a for a in agents if preferred(a, ["a", "b"]) == "a"]
    theirs = [a for a in agents if preferred(a, ["a", "b"]) == "b"]
    assert mine and theirs
    # Nothing leased yet, both live: each takes its own share only.
    p = plan("a", agents, live={"a", "b"}, owners={})
    assert set(p.acquire) == set(mine) and not p.release
    # b is not live: a takes everything.
    assert set(plan("a", agents, live={"a"}, owners={}).acquire) == set(agents)
    # a holds everything and b comes up: a gives b's share back, except an agent mid-turn.
    held = {x: ("a", True, 10.0) for x in agents}
    p = plan("a", agents, live={"a", "b"}, owners=held, busy={theirs[0]})
    assert set(p.release) == set(theirs[1:]) and not p.acquire
    # b's lease on one of a's agents expired: b is no candidate for it, so a takes it at once ...
    x = theirs[0]
    expired = {x: ("b", False, -0.5)}
    assert plan("a", [x], live={"a", "b"}, owners=expired).acquire == (x,)
    # ... and a lease held by a third, silent node waits for its preferred node for GRACE_S
    # (here a is not preferred among {a, b}), then anyone takes it.
    y = next(a for a in agents if preferred(a, ["a", "b"]) == "b")
    assert plan("a", [y], live={"a", "b"}, owners={y: ("c", False, -0.5)}).acquire == ()
    assert plan("a", [y], live={"a", "b"}, owners={y: ("c", False, -GRACE_S - 0.1)}).acquire == (y,)
    # Another node's live lease is never touched; an agent with a turn still running here is not re-taken.
    assert plan("a", [y], live={"a"}, owners={y: ("b", True, 1.0)}) == plan("a", [], live=(), owners={})
    assert plan("a", [x], live={"a"}, owners={x: ("a", False, -1.0)}, busy={x}).acquire == ()
    # A live lease of a's own that a no longer acts for (self-fencing dropped it during an outage
    # while the heartbeat, back in time, kept the row alive): a takes it again, unless mid-turn.
    mine_live = {x: ("a", True, 2.0)}
    assert plan("a", [x], live={"a"}, owners=mine_live, held=[]).acquire == (x,)
    assert plan("a", [x], live={"a"}, owners=mine_live, held=[x]).acquire == ()
    assert plan("a", [x], live={"a"}, owners=mine_live, held=[], busy={x}).acquire == ()


# --- turn.started v2 --------------------------------------------------------------------------------


def test_turn_started_v1_rows_upcast_with_no_node_and_v2_records_it() -> None:
    old = decode_payload("turn.started", 1, '{"inputs":[3],"turn_id":"turn_1"}')
    assert isinstance(old, ev.TurnStarted) and old.node is None and old.inputs == [3]
    assert ev.TurnStarted.VERSION == 2
    new = encode_payload(
        ev.TurnStarted(turn_id="turn_2", inputs=[4], node="n1"), blob_threshold=16_384, preview_chars=0
    )
    assert new.text == '{"inputs":[4],"node":"n1","turn_id":"turn_2"}'
    assert decode_payload("turn.started", 2, new.text) == ev.TurnStarted(turn_id="turn_2", inputs=[4], node="n1")


# --- on PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture
def pg_home(home: HomePaths, pg_db: PgDatabase, monkeypatch: pytest.MonkeyPatch) -> HomePaths:
    monkeypatch.setenv("HOLON_STORAGE_URL", pg_db.url)
    return home


@pytest.fixture
def node_store(pg_home: HomePaths) -> Callable[[], Store]:
    made: list[Store] = []

    def make() -> Store:
        made.append(Store.open(pg_home, load_settings(pg_home), clock=FakeClock()))
        return made[-1]

    yield make  # type: ignore[misc]
    for s in made:
        s.close()


@pytest.fixture
def sessions(pg_db: PgDatabase) -> Iterator[Callable[..., NodeSession]]:
    made: list[NodeSession] = []

    def make(name: str, **kw: Any) -> NodeSession:
        made.append(NodeSession(pg_db.url, name, lease_s=kw.pop("lease_s", 30.0), **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _agent(store: Store, name: str) -> str:
    from holon.runtime.agents import create_agent

    return create_agent(store, name, settings={"model": "openai/fake"}).agent_id


def _turn(agent_id: str, n: int, node: str) -> NewEvent:
    tid = f"turn_{node}_{n}"
    return NewEvent(agent_id, ev.TurnStarted(turn_id=tid, node=node), origin="runtime:turn", turn_id=tid)


def _input(agent_id: str, text: str) -> NewEvent:
    return NewEvent(agent_id, ev.MessageReceived(text=text, sender="operator", channel="test"), origin="operator:t")


def test_a_nodes_appends_carry_its_fence_and_the_database_refuses_the_other_nodes(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    store_a, store_b = node_store(), node_store()  # two processes' ledgers on one database
    x = _agent(store_a, "x")
    a, b = sessions("a"), sessions("b")
    a.claim(), b.claim()
    store_a.ledger.engine.fencer = a.fence_of  # type: ignore[attr-defined]  # PgEngine's
    store_b.ledger.engine.fencer = b.fence_of  # type: ignore[attr-defined]
    assert a.acquire(x) == 1 and b.acquire(x) is None
    store_a.append(_turn(x, 1, "a"))  # the owner: its fence names token 1
    with pytest.raises(FencedOut) as refused:
        store_b.append(_turn(x, 1, "b"))  # b holds nothing: no token for x, the database says no
    assert refused.value.agent_id == x and "lease" in refused.value.message
    store_b.append(_input(x, "any node may take input"))  # unfenced
    # The owner's own deadline: past it, its appends stop before anything is sent.
    a.leases.deadlines[x] = 0.0
    with pytest.raises(FencedOut, match="deadline"):
        store_a.append(_turn(x, 2, "a"))
    types = [e.type for e in store_a.ledger.read() if e.agent_id == x]
    assert types.count("turn.started") == 1 and types[-1] == "message.received"


def test_every_append_notifies_the_listeners_with_its_agents(
    node_store: Callable[[], Store], pg_db: PgDatabase
) -> None:
    from holon.ledger.pg.connect import connect

    store = node_store()
    x = _agent(store, "x")
    got: list[Advance] = []
    seen = threading.Event()

    def on(advance: Advance) -> None:
        got.append(advance)
        if advance.agents:
            seen.set()

    with Listener(lambda: connect(pg_db.url), on) as listener:
        assert listener.wait_listening(10)
        stored = store.append(_input(x, "wake up"))[-1]
        assert seen.wait(10), got
    notified = [g for g in got if g.via == "notify"]
    assert notified[-1].seq >= stored.seq and notified[-1].agents == frozenset({x})


def test_the_node_session_claims_its_name_beats_and_claims_it_again_after_a_lost_connection(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession], pg_db: PgDatabase
) -> None:
    from holon.ledger.pg.connect import connect

    store = node_store()
    x = _agent(store, "x")
    a = sessions("a", lease_s=30.0)
    assert a.claim().name == "a"
    with pytest.raises(NodeNameTaken, match="node a is already running"):
        sessions("a").claim()
    assert a.acquire(x) == 1 and a.beat() == frozenset()
    view = a.view()
    assert [n.name for n in view.nodes] == ["a"] and [(o.agent_id, o.node, o.live) for o in view.owners] == [
        (x, "a", True)
    ]
    conn = a._conn
    assert conn is not None
    with connect(pg_db.url) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(StorageUnavailable):
        a.beat()
    a.claim()  # a new connection, the name won again; the lease row (and its token) outlived the old one
    assert a.beat() == frozenset() and a.token(x) == 1 and a.holds(x)
    assert a.close() == [x]
    assert sessions("a").claim().name == "a"  # free after a clean stop


def test_a_node_name_needs_postgresql_and_a_valid_name(home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    from holon.daemon.wiring import build_daemon

    monkeypatch.setenv("HOLON_NODE_NAME", "n1")
    monkeypatch.setenv("HOLON_NODE_LEASE_S", "4.5")
    settings = load_settings(home)
    assert (settings.node.name, settings.node.lease_s) == ("n1", 4.5)
    store = Store.open(home, settings)
    try:
        with pytest.raises(ConfigError, match="node n1: several nodes share a PostgreSQL ledger"):
            build_daemon(store, resolver=lambda agent: None)  # type: ignore[arg-type,return-value]
    finally:
        store.close()
    monkeypatch.setenv("HOLON_NODE_NAME", "no spaces")
    with pytest.raises(ConfigError, match="node"):
        load_settings(home)


def test_a_daemon_without_a_node_name_is_refused_once_nodes_leased_the_agents(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    from holon.daemon.wiring import build_daemon

    store = node_store()
    x = _agent(store, "x")
    build_daemon(store, resolver=lambda agent: None)  # type: ignore[arg-type,return-value]  # no lease yet: fine
    a = sessions("a")
    a.claim()
    assert a.acquire(x) == 1
    with pytest.raises(ConfigError, match="run this daemon as a node too: holon serve --node NAME"):
        build_daemon(store, resolver=lambda agent: None)  # type: ignore[arg-type,return-value]


def test_a_turn_fenced_out_by_the_nodes_own_deadline_gives_the_agent_up_for_a_new_token(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    """Regression (found by the chaos test): a turn stopped on ``FencedOut`` by the node's own
    deadline (its heartbeat late on a loaded machine) was left open for "the next owner", but the
    late heartbeat then renewed the same lease, so no next owner ever came: the turn stayed
    unsettled and its inputs unanswered. ``Cluster.fenced_out`` (``AgentHost.on_fenced``) forgets
    the agent: its lease is not renewed, expires, and is taken with a new token (whose taker runs
    the recovery that settles the turn)."""
    from types import SimpleNamespace

    from holon.daemon.cluster import Cluster

    store = node_store()
    x = _agent(store, "x")
    a = sessions("a", lease_s=0.6)
    a.claim()
    store.ledger.engine.fencer = a.fence_of  # type: ignore[attr-defined]  # PgEngine's
    assert a.acquire(x) == 1
    a.leases.deadlines[x] = 0.0  # the heartbeat came late: past the node's own deadline
    with pytest.raises(FencedOut, match="deadline"):
        store.append(_turn(x, 1, "a"))
    stub = SimpleNamespace(
        active_run=lambda agent_id: None,
        running=False,
        tasks=SimpleNamespace(drop_agent=lambda a: []),
        drop_agent=lambda a: 0,
    )
    node = Cluster(a, store, host=stub, wakes=stub, timers=stub, firing=stub, phase=stub)  # type: ignore[arg-type]
    node.fenced_out(x)
    assert x not in a.held()
    deadline = time.monotonic() + 10
    while x not in a.leases.expired():
        assert a.beat() == frozenset()  # the late heartbeats do not renew it any more
        assert time.monotonic() < deadline, "the lease of a fenced-out turn's agent was kept alive"
        time.sleep(0.02)
    assert a.acquire(x) == 2  # a new token: the taker's recovery settles the open turn


def test_an_agent_being_taken_is_not_run_until_its_recovery_is_done(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    """Regression (found by the chaos test): the lease was held (``owns`` true) while ``acquire``
    returned in its thread, so the watcher started a turn before ``_took``'s recovery, which then
    settled that running turn ``interrupted`` and re-queued its inputs: answered twice."""
    import asyncio
    from types import SimpleNamespace

    from holon.daemon.cluster import Cluster

    store = node_store()
    x = _agent(store, "x")
    a = sessions("a")
    a.claim()
    store.ledger.engine.fencer = a.fence_of  # type: ignore[attr-defined]  # PgEngine's
    seen: dict[str, bool] = {}
    woken: list[str] = []
    stub = SimpleNamespace(
        active_run=lambda agent_id: None, is_running=lambda agent_id: False, running=False, draining=False,
        accepting=True, wake=woken.append, clock=FakeClock(),
    )  # fmt: skip
    node = Cluster(a, store, host=stub, wakes=stub, timers=stub, firing=stub, phase=stub)  # type: ignore[arg-type]
    acquire = a.acquire

    def acquire_and_look(agent_id: str) -> int | None:
        token = acquire(agent_id)
        seen["owns_before_recovery"] = node.owns(agent_id)  # what the watcher would see now
        return token

    a.acquire = acquire_and_look  # type: ignore[method-assign]
    todo = asyncio.run(node.scan_once())
    assert todo.acquire == (x,) and seen == {"owns_before_recovery": False}
    assert node.owns(x) and woken == [x]  # recovered, then woken: now it runs


def test_a_take_planned_before_the_agents_turn_started_does_not_re_take_it(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    """Regression (the five-minute chaos run, RFC 0008): a take is planned for an agent this node
    does not act for at that moment (its deadline passed while the scan read the view) and is not
    busy; while an earlier take of the same scan waits on the database, the heartbeat renews the
    agent's lease and its turn starts. Executed as planned, the take re-acquired the node's own
    live lease (same token) and its "takeover" recovery settled the running turn ``interrupted``,
    re-queueing inputs that turn then answered too: answered twice. The take is re-checked when it
    runs: no second ``lease.acquired``, no recovery, the turn still running and settled once."""
    import asyncio
    from types import SimpleNamespace

    from holon.daemon.cluster import Cluster

    store = node_store()
    w, x = _agent(store, "w"), _agent(store, "x")  # taken in this order (by name)
    now = [0.0]
    a = sessions("a", clock=lambda: now[0])
    a.claim()
    store.ledger.engine.fencer = a.fence_of  # type: ignore[attr-defined]  # PgEngine's
    assert a.acquire(x) == 1  # deadline at 24 s (80% of lease_s 30)
    running: set[str] = set()
    stub = SimpleNamespace(
        active_run=lambda agent_id: None, is_running=running.__contains__, running=False, draining=False,
        accepting=True, wake=lambda agent_id: None, clock=FakeClock(), drop_agent=lambda agent_id: [],
    )  # fmt: skip
    stub.tasks = stub
    node = Cluster(a, store, host=stub, wakes=stub, timers=stub, firing=stub, phase=stub)  # type: ignore[arg-type]
    view, acquire = a.view, a.acquire

    def late_view() -> Any:
        seen = view()
        now[0] = 25.0  # x's deadline passes while the scan waits for the view: not in ``held``
        return seen

    turn = "turn_x_running"

    def acquire_while_x_starts(agent_id: str) -> int | None:
        if agent_id == w:  # meanwhile: the heartbeat renews x's lease, and x's turn starts here
            assert a.beat() == frozenset() and a.holds(x)  # renewed: nothing lost
            [got] = store.append(_input(x, "hello"))
            store.append(NewEvent(x, ev.TurnStarted(turn_id=turn, inputs=[got.seq], node="a"), origin="runtime:turn", turn_id=turn))  # fmt: skip
            running.add(x)
        return acquire(agent_id)

    a.view = late_view  # type: ignore[method-assign]
    a.acquire = acquire_while_x_starts  # type: ignore[method-assign]
    todo = asyncio.run(node.scan_once())
    assert todo.acquire == (w, x)  # planned: x was neither held nor busy then
    acquired = [e for e in store.ledger.read(0, agent_id=x) if isinstance(e.payload, ev.LeaseAcquired)]
    assert len(acquired) == 1  # x was not taken again
    assert not [e for e in store.ledger.read(0, agent_id=x) if isinstance(e.payload, ev.TurnSettled)]
    assert store.agent(x).current_turn_id == turn and node.owns(x)  # its turn still runs here
    assert node.owns(w) and a.token(x) == 1
    # The last line, ``_took`` itself: a lease acquired while a turn of the agent runs here is
    # given back (taken again once the run ended) and nothing of the turn is settled.
    asyncio.run(node._took(x, 1))
    assert not [e for e in store.ledger.read(0, agent_id=x) if isinstance(e.payload, ev.TurnSettled)]
    assert a.token(x) is None and store.agent(x).current_turn_id == turn


def test_self_fencing_stops_an_agent_at_its_deadline_without_the_database(
    node_store: Callable[[], Store], sessions: Callable[..., NodeSession]
) -> None:
    """``Cluster.fence_once`` (the self-fencing loop's step) drops an agent past this node's
    deadline: its turn cancelled, its background tasks killed, its timer jobs dropped, all without
    a database call (the connection is closed first: it may be what was lost)."""
    from types import SimpleNamespace

    from holon.daemon.cluster import Cluster

    store = node_store()
    x, y = _agent(store, "x"), _agent(store, "y")
    a = sessions("a", lease_s=30)
    a.claim()
    assert a.acquire(x) == 1 and a.acquire(y) == 1
    left = a.next_deadline_in()
    assert left is not None and 0 < left <= 30
    calls: list[tuple[str, str]] = []
    run = SimpleNamespace(cancel=lambda: calls.append(("cancel", x)))
    stub = SimpleNamespace(
        active_run=lambda agent_id: run if agent_id == x else None,
        tasks=SimpleNamespace(drop_agent=lambda agent_id: calls.append(("tasks", agent_id)) or ["task_1"]),
        drop_agent=lambda agent_id: calls.append(("timers", agent_id)) or 1,
    )
    node = Cluster(a, store, host=stub, wakes=stub, timers=stub, firing=stub, phase=stub)  # type: ignore[arg-type]
    a._conn.close()  # type: ignore[union-attr]  # the database is gone for this node
    a.leases.deadlines[x] = 0.0  # x's deadline passed; y's has not
    node.fence_once()
    assert calls == [("cancel", x), ("tasks", x), ("timers", x)]
    assert a.held() == [y] and not a.holds(x) and a.holds(y)
    assert a.next_deadline_in() == pytest.approx(left, abs=1.0)
