"""Projections: fold is a pure function of history, live rows equal a replay, and reducer semantics."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.engines import Intruder, sqlite_only
from helpers.factories import agent_created, as_events, make_event
from helpers.props import examples
from helpers.strategies import payloads
from hypothesis import given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.config import LedgerSettings, Settings, resolve_home
from holon.errors import ConflictError
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import PAYLOAD_TYPES
from holon.projections import KINDS, Store, derive, fold_event, working_memory_view
from holon.projections import projector as projector_module
from holon.projections import store as store_module
from holon.projections.fold import _READS, Key, RangeReader, fold, row_columns, state_json
from holon.projections.state import State, WorkingMemory, WorkItemState

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``), but those
    marked ``sqlite_only``."""
    return engine


# --- random plausible histories ----------------------------------------------------------------

AGENTS = [("agt_0", "a0"), ("agt_1", "a1"), ("agt_2", "a2")]
WORK_ITEMS = ["wi_a", "wi_b", "wi_c"]
TODOS = ["td_1", "td_2"]
WAITS = ["w_1", "w_2"]
TIMERS = ["tm_1", "tm_2"]
TASKS = ["tk_1", "tk_2"]
TURNS = ["turn_1", "turn_2", "turn_3"]
FOLLOW_UPS = ["fu_1", "fu_2"]
FILES = ["a.py", "b.py", "docs/ü.md"]

small_text = st.sampled_from(["x", "y", "zz", "ünï ✓", ""])
opt = st.none().__or__
times = st.integers(1_700_000_000_000_000, 1_700_000_100_000_000)

payload_strategies: list[st.SearchStrategy[ev.PayloadBase]] = [
    st.builds(
        ev.WorkItemOpened,
        work_item_id=st.sampled_from(WORK_ITEMS),
        title=small_text,
        objective=small_text,
        delivery_target=opt(small_text),
        plan=st.lists(small_text, max_size=2),
        constraints=st.lists(small_text, max_size=2),
        activate=st.booleans(),
    ),
    st.builds(
        ev.WorkItemUpdated,
        work_item_id=st.sampled_from(WORK_ITEMS),
        title=opt(small_text),
        objective=opt(small_text),
        plan=opt(st.lists(small_text, max_size=2)),
        status=opt(st.sampled_from(["open", "blocked", "abandoned"])),
    ),
    st.builds(ev.WorkItemPicked, work_item_id=opt(st.sampled_from(WORK_ITEMS))),
    st.builds(ev.WorkItemCompleted, work_item_id=st.sampled_from(WORK_ITEMS), report=small_text),
    st.builds(
        ev.TodoChanged,
        work_item_id=st.sampled_from(WORK_ITEMS),
        op=st.sampled_from(["add", "update", "remove"]),
        todo_id=st.sampled_from(TODOS),
        text=opt(small_text),
        status=opt(st.sampled_from(["pending", "in_progress", "done", "dropped"])),
    ),
    st.builds(ev.ConstraintChanged, op=st.sampled_from(["add", "remove"]), text=small_text),
    st.builds(ev.DecisionRecorded, text=small_text, work_item_id=opt(st.sampled_from(WORK_ITEMS))),
    st.builds(
        ev.FollowUpChanged,
        follow_up_id=st.sampled_from(FOLLOW_UPS),
        op=st.sampled_from(["add", "resolve"]),
        text=opt(small_text),
        due_us=opt(times),
    ),
    st.builds(
        ev.FileTouched, path=st.sampled_from(FILES), action=st.sampled_from(["read", "write", "create", "delete"])
    ),
    st.builds(
        ev.TaskCreated,
        task_id=st.sampled_from(TASKS),
        kind=st.sampled_from(["command", "child_agent", "other"]),
        title=small_text,
        spec=st.dictionaries(st.sampled_from(["cmd", "cwd", "b"]), small_text, max_size=2),
    ),
    st.builds(
        ev.TaskStateChanged,
        task_id=st.sampled_from(TASKS),
        state=st.sampled_from(["pending", "running", "succeeded", "failed", "cancelled", "interrupted"]),
        detail=opt(small_text),
    ),
    st.builds(
        ev.TaskResulted,
        task_id=st.sampled_from(TASKS),
        state=st.sampled_from(["succeeded", "failed", "cancelled", "interrupted"]),
        output=small_text,
        exit_code=opt(st.integers(-1, 2)),
    ),
    st.builds(
        ev.WaitRegistered,
        wait_id=st.sampled_from(WAITS),
        on=st.sampled_from(["task", "timer", "operator", "external", "until"]),
        target=opt(st.sampled_from(TASKS + TIMERS)),
        recheck_at_us=times,
        reason=small_text,
    ),
    st.builds(
        ev.WaitResolved,
        wait_id=st.sampled_from(WAITS),
        resolution=st.sampled_from(["satisfied", "recheck", "cancelled"]),
        by_seq=opt(st.integers(1, 50)),
    ),
    st.builds(
        ev.TimerScheduled,
        timer_id=st.sampled_from(TIMERS),
        kind=st.sampled_from(["once", "interval", "cron"]),
        spec=st.sampled_from(["2026-01-01T00:00:00Z", "60", "*/5 * * * *"]),
        next_fire_us=opt(times),
        prompt=opt(small_text),
    ),
    st.builds(
        ev.TimerFired,
        timer_id=st.sampled_from(TIMERS),
        scheduled_for_us=times,
        missed=st.integers(0, 3),
        next_fire_us=opt(times),
    ),
    st.builds(ev.TimerCancelled, timer_id=st.sampled_from(TIMERS)),
    st.builds(ev.TurnStarted, turn_id=st.sampled_from(TURNS), inputs=st.lists(st.integers(1, 30), max_size=2)),
    st.builds(
        ev.TurnSettled,
        turn_id=st.sampled_from(TURNS),
        outcome=st.sampled_from(["completed", "waiting", "failed", "interrupted"]),
        reason=opt(small_text),
        reply=opt(small_text),
    ),
    st.builds(ev.MessageReceived, text=small_text, sender=st.sampled_from(["operator", "bob"])),
    st.builds(
        ev.AgentConfigured,
        changes=st.dictionaries(st.sampled_from(["model", "temp"]), st.one_of(st.none(), small_text), max_size=2),
    ),
]
# Turn settlements drive derivation; make them common.
payload_strategy = st.one_of(*payload_strategies, payload_strategies[-3], payload_strategies[-3])


@st.composite
def histories(draw: st.DrawFn, max_events: int = 40) -> list[NewEvent]:
    """agent.created for 1-3 agents, then a random mix of events about them."""
    n_agents = draw(st.integers(1, 3))
    out = [agent_created(agent_id, name) for agent_id, name in AGENTS[:n_agents]]
    body = draw(
        st.lists(st.tuples(st.integers(0, n_agents - 1), payload_strategy), max_size=max_events),
        label="events",
    )
    for i, payload in body:
        turn = getattr(payload, "turn_id", None)
        out.append(make_event(AGENTS[i][0], payload, turn_id=turn))
    return out


def _json(states: MutableMapping[Key, State | None]) -> dict[Key, str]:
    return {k: state_json(v) for k, v in states.items() if v is not None}


# --- (a) fold is a pure function of the event list ------------------------------------------


@settings(max_examples=examples(50))
@given(history=histories(), data=st.data())
def test_fold_splits_anywhere(history: list[NewEvent], data: st.DataObject) -> None:
    events = as_events(history)
    whole = fold({}, events)
    splits = data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=6, unique=True), label="splits")
    for cut in [*splits, 0, len(events)]:
        first = fold({}, events[:cut])
        snapshot = _json(first)
        resumed = fold(first, events[cut:])
        assert resumed == whole
        assert _json(resumed) == _json(whole)
        # Folding the suffix into a copy-reloaded state (as the live projector's row loading does) agrees.
        reloaded = {k: KINDS[k[0]].model.model_validate_json(v) for k, v in snapshot.items()}
        assert _json(fold(reloaded, events[cut:])) == _json(whole)
    # Folding never mutates a state object in place: states held before the last event keep their value.
    if events:
        before = fold({}, events[:-1])
        held = dict(before)
        frozen = _json(before)
        fold_event(before, events[-1])
        assert _json(held) == frozen


# --- (b), (c) the live store equals replay and a pure fold --------------------------------------


def _fast_settings() -> Settings:
    return Settings(ledger=LedgerSettings(synchronous="NORMAL"))


def _live_rows(store: Store) -> dict[Key, tuple[object, ...]]:
    store.write_projections()  # the projector writes its rows every few commits: write them now
    conn = Intruder(store)
    rows = conn.execute("SELECT kind, key, agent_id, status, label, seq, state FROM projection_rows").fetchall()
    conn.close()
    return {(r[0], r[1]): tuple(r[2:]) for r in rows}


def _expected_rows(events: list[Event]) -> dict[Key, tuple[object, ...]]:
    states: dict[Key, State | None] = {}
    seqs: dict[Key, int] = {}
    for e in events:
        for key in fold_event(states, e):
            seqs[key] = e.seq
    out = {}
    for key, state in states.items():
        assert state is not None
        agent_id, status, label = row_columns(key[0], state)
        out[key] = (agent_id, status, label, seqs[key], state_json(state))
    return out


def _reader(known: list[Event]) -> RangeReader:
    return lambda agent, a, b: [e for e in known if e.agent_id == agent and a <= e.seq <= b]


def _check_derivations(ledger_events: list[Event], batches: list[list[NewEvent]]) -> None:
    """The ledger holds each batch as appended, followed by exactly what a pure ``derive`` gives."""
    model: dict[Key, State | None] = {}
    pos = 0
    for batch in batches:
        originals = ledger_events[pos : pos + len(batch)]
        assert [(e.agent_id, e.payload, e.turn_id) for e in originals] == [
            (n.agent_id, n.payload, n.turn_id) for n in batch
        ]
        fold(model, originals)
        expected = derive(model, originals, read=_reader(ledger_events[: pos + len(batch)]))
        actual = ledger_events[pos + len(batch) : pos + len(batch) + len(expected)]
        assert [(n.agent_id, n.payload, n.turn_id, n.origin) for n in expected] == [
            (e.agent_id, e.payload, e.turn_id, e.origin) for e in actual
        ]
        fold(model, actual)
        pos += len(batch) + len(expected)
    assert pos == len(ledger_events), "the ledger holds events nobody appended or derived"


@sqlite_only(
    "opens a fresh home per hypothesis example (one worker database on PostgreSQL is reset per test, not per example); test_replay_across_engines is its PostgreSQL half"
)
@settings(max_examples=examples(50))
@given(history=histories(), data=st.data())
def test_live_projections_equal_replay_and_pure_fold(history: list[NewEvent], data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(history) - 1)), max_size=8), label="cuts"))
    bounds = [0, *[c for c in cuts if c < len(history)], len(history)]
    batches = [history[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    # Each batch goes through one of two stores on the same home (both with warm caches), and
    # sometimes a store is closed and reopened, so cache resets and catch-up are exercised too.
    who = data.draw(st.lists(st.sampled_from(["a", "b", "reopen-a"]), min_size=len(batches), max_size=len(batches)))
    with tempfile.TemporaryDirectory() as tmp:
        paths = resolve_home(Path(tmp))
        clock = FakeClock()
        stores = {
            "a": Store.open(paths, _fast_settings(), clock=clock),
            "b": Store.open(paths, _fast_settings(), clock=clock),
        }
        try:
            for batch, w in zip(batches, who, strict=True):
                if w == "reopen-a":
                    stores["a"].close()
                    stores["a"] = Store.open(paths, _fast_settings(), clock=clock)
                out = stores[w[-1]].append(*batch)
                assert len(out) == len(batch)
            store = stores["a"]
            result = store.replay()
            assert result.ok, result.examples
            assert result.mismatches == 0 and result.cursor_ok
            assert store.ledger.verify().ok
            events = list(store.ledger.read())
            assert result.events == len(events)
            assert _live_rows(store) == _expected_rows(events)
            _check_derivations(events, batches)
            pure = fold({}, events)
            for agent_id, _name in AGENTS:
                wm = pure.get(("working_memory", agent_id))
                assert wm is None or isinstance(wm, WorkingMemory)
                item = pure.get(("work_item", wm.active_work_item)) if wm and wm.active_work_item else None
                assert item is None or isinstance(item, WorkItemState)
                assert store.working_memory(agent_id) == working_memory_view(wm, item)
        finally:
            for s in stores.values():
                s.close()


# --- reducer semantics ----------------------------------------------------------------------

A = "agt_alice"


def wm(store: Store) -> dict:
    return store.working_memory(A)


def put(store: Store, *payloads: ev.PayloadBase, turn_id: str | None = None) -> list[Event]:
    return store.append(*(make_event(A, p, turn_id=turn_id) for p in payloads))


@pytest.fixture
def alice(store: Store) -> Store:
    store.append(agent_created(A, "alice", settings={"model": "m1"}))
    return store


def test_agent_created_projection(alice: Store) -> None:
    agent = alice.agent("alice")
    assert alice.agent(A) == agent
    assert (agent.agent_id, agent.name, agent.status, agent.turns, agent.settings) == (
        A,
        "alice",
        "idle",
        0,
        {"model": "m1"},
    )
    assert alice.agents() == [agent]
    put(alice, ev.AgentConfigured(changes={"temperature": 0.5, "model": None}))
    assert alice.agent("alice").settings == {"temperature": 0.5}


@sqlite_only("watches the statements through sqlite3's trace callback")
def test_rows_whose_indexed_columns_stay_are_updated_in_place(alice: Store) -> None:
    """A row whose agent_id and label are stored as they are gets only its status, seq and state
    written (no index pages touched); one deleted behind the projector's back is written again."""
    conn = alice.ledger._conn
    put(alice, ev.TurnStarted(turn_id="turn_1"), turn_id="turn_1")
    put(alice, ev.TurnSettled(turn_id="turn_1", outcome="completed", reply="done"), turn_id="turn_1")
    assert alice.projector._rows.stored[("agent", A)] == (A, "alice")
    alice.write_projections()  # the first turn's new rows
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:  # every row of the second turn exists already, and the agent goes running -> idle again
        put(alice, ev.TurnStarted(turn_id="turn_2"), turn_id="turn_2")
        put(alice, ev.TurnSettled(turn_id="turn_2", outcome="completed", reply="done"), turn_id="turn_2")
        alice.write_projections()  # rows are written every few commits: now
    finally:
        conn.set_trace_callback(None)
    assert not any(s.startswith("INSERT INTO projection_rows") for s in statements)
    assert any(s.startswith("UPDATE projection_rows SET status") for s in statements)
    agent = alice.agent_state(A)
    assert agent is not None and agent.status == "idle"
    conn.execute("DELETE FROM projection_rows WHERE kind = 'working_memory'")  # behind its back
    put(alice, ev.DecisionRecorded(text="and test it"))
    assert alice.working_memory_state(A) is not None
    assert alice.replay().ok


def test_a_taken_name_is_refused_at_the_append_that_takes_it(alice: Store) -> None:
    with pytest.raises(ConflictError, match="already taken"):
        alice.append(agent_created("agt_other", "alice"))
    put(alice, ev.DecisionRecorded(text="still writable"))
    assert [a.name for a in alice.agents()] == ["alice"]
    assert alice.replay().ok


def test_work_item_switch_and_return(alice: Store) -> None:
    put(alice, ev.WorkItemOpened(work_item_id="A", title="first", objective="do A", plan=["a1"]))
    assert wm(alice)["active_work_item"] == "A"
    put(alice, ev.WorkItemOpened(work_item_id="B", title="second", objective="do B"))
    view = wm(alice)
    assert (view["active_work_item"], view["work_stack"]) == ("B", ["A"])
    assert (view["work_item_title"], view["objective"]) == ("second", "do B")
    put(alice, ev.WorkItemPicked())  # back to the previous one
    view = wm(alice)
    assert (view["active_work_item"], view["work_stack"]) == ("A", ["B"])
    assert (view["objective"], view["plan"]) == ("do A", ["a1"])
    put(alice, ev.WorkItemCompleted(work_item_id="A", report="done"))
    view = wm(alice)
    assert (view["active_work_item"], view["work_stack"]) == ("B", [])
    item = alice.state("work_item", "A")
    assert isinstance(item, WorkItemState)
    assert (item.status, item.report) == ("completed", "done")
    put(alice, ev.WorkItemUpdated(work_item_id="B", status="abandoned"))
    view = wm(alice)
    assert (view["active_work_item"], view["work_stack"], view["objective"]) == (None, [], "")
    put(alice, ev.WorkItemPicked())  # nothing to return to: unchanged
    assert wm(alice)["active_work_item"] is None
    # Opening without activating leaves the active item alone; picking by id switches.
    put(
        alice,
        ev.WorkItemOpened(work_item_id="C", title="c"),
        ev.WorkItemOpened(work_item_id="D", title="d", activate=False),
    )
    assert (wm(alice)["active_work_item"], wm(alice)["work_stack"]) == ("C", [])
    put(alice, ev.WorkItemPicked(work_item_id="D"))
    assert (wm(alice)["active_work_item"], wm(alice)["work_stack"]) == ("D", ["C"])
    assert [w.work_item_id for w in alice.rows("work_item", agent_id=A, status="open")] == ["C", "D"]
    assert alice.replay().ok


def test_todos(alice: Store) -> None:
    put(alice, ev.WorkItemOpened(work_item_id="W", title="w"))
    put(
        alice,
        ev.TodoChanged(work_item_id="W", op="add", todo_id="t1", text="write tests"),
        ev.TodoChanged(work_item_id="W", op="add", todo_id="t2", text="fix bug", status="in_progress"),
    )
    todos = wm(alice)["todos"]
    assert todos == [
        {"id": "t1", "text": "write tests", "status": "pending"},
        {"id": "t2", "text": "fix bug", "status": "in_progress"},
    ]
    put(alice, ev.TodoChanged(work_item_id="W", op="update", todo_id="t1", status="done"))
    put(alice, ev.TodoChanged(work_item_id="W", op="update", todo_id="t2", text="fix the bug"))
    assert wm(alice)["todos"] == [
        {"id": "t1", "text": "write tests", "status": "done"},
        {"id": "t2", "text": "fix the bug", "status": "in_progress"},
    ]
    before = alice.state("work_item", "W")
    # Adding an existing id, updating or removing a missing one, and todos of unknown items change nothing.
    put(
        alice,
        ev.TodoChanged(work_item_id="W", op="add", todo_id="t1", text="again"),
        ev.TodoChanged(work_item_id="W", op="update", todo_id="nope", text="x"),
        ev.TodoChanged(work_item_id="W", op="remove", todo_id="nope"),
        ev.TodoChanged(work_item_id="ghost", op="add", todo_id="t1", text="x"),
    )
    assert alice.state("work_item", "W") == before
    assert alice.state("work_item", "ghost") is None
    put(alice, ev.TodoChanged(work_item_id="W", op="remove", todo_id="t1"))
    assert [t["id"] for t in wm(alice)["todos"]] == ["t2"]
    assert alice.replay().ok


def test_waits_in_working_memory(alice: Store) -> None:
    put(
        alice,
        ev.WaitRegistered(wait_id="w1", on="task", target="tk_1", recheck_at_us=1_000, reason="build"),
        ev.WaitRegistered(wait_id="w2", on="operator", recheck_at_us=2_000),
    )
    assert [w["wait_id"] for w in wm(alice)["waiting_on"]] == ["w1", "w2"]
    assert wm(alice)["waiting_on"][0] == {"wait_id": "w1", "on": "task", "target": "tk_1", "recheck_at_us": 1_000}
    assert [w.wait_id for w in alice.rows("wait", agent_id=A, status="pending")] == ["w1", "w2"]
    [resolved] = put(alice, ev.WaitResolved(wait_id="w1", resolution="satisfied", by_seq=2))
    assert [w["wait_id"] for w in wm(alice)["waiting_on"]] == ["w2"]
    wait = alice.state("wait", "w1")
    assert wait is not None
    assert (wait.status, wait.by_seq, wait.resolved_us) == ("satisfied", 2, resolved.ts_us)  # type: ignore[attr-defined]
    put(alice, ev.WaitResolved(wait_id="w2", resolution="cancelled"))
    assert wm(alice)["waiting_on"] == []
    assert alice.rows("wait", status="pending") == []
    assert alice.replay().ok


def test_timers(alice: Store) -> None:
    put(
        alice,
        ev.TimerScheduled(timer_id="once", kind="once", spec="2026-01-02T00:00:00Z", next_fire_us=5),
        ev.TimerScheduled(timer_id="every", kind="interval", spec="60", next_fire_us=10),
    )
    put(alice, ev.TimerFired(timer_id="once", scheduled_for_us=5, next_fire_us=99))
    once = alice.timer("once")
    assert once is not None
    assert (once.status, once.next_fire_us, once.fired) == ("done", None, 1)
    put(alice, ev.TimerFired(timer_id="every", scheduled_for_us=10, missed=2, next_fire_us=70))
    every = alice.timer("every")
    assert every is not None
    assert (every.status, every.next_fire_us, every.fired, every.missed) == ("scheduled", 70, 1, 2)
    put(alice, ev.TimerCancelled(timer_id="every"), ev.TimerFired(timer_id="ghost", scheduled_for_us=1))
    every = alice.timer("every")
    assert every is not None
    assert (every.status, every.next_fire_us) == ("cancelled", None)
    assert alice.timer("ghost") is None
    assert [t.timer_id for t in alice.timers(agent_id=A, status="scheduled")] == []
    assert alice.timers(agent_id=A) == alice.rows("timer", agent_id=A)  # the untyped fallback agrees
    assert alice.replay().ok


def test_tasks(alice: Store) -> None:
    put(alice, ev.TaskCreated(task_id="tk", title="build", spec={"cmd": "make"}))
    put(alice, ev.TaskStateChanged(task_id="tk", state="running", detail="pid 42"))
    assert [t.task_id for t in alice.tasks(status="running")] == ["tk"]
    put(alice, ev.TaskResulted(task_id="tk", state="failed", output="boom", exit_code=2))
    task = alice.task("tk")
    assert task is not None
    assert (task.state, task.output, task.exit_code) == ("failed", "boom", 2)
    assert task == alice.state("task", "tk")
    assert alice.counts(A) == {"work_item": 0, "task": 1, "wait": 0, "timer": 0}
    assert alice.keys_starting("task", "t", limit=2) == ["tk"] and alice.keys_starting("task", "x", limit=2) == []
    assert alice.replay().ok


@pytest.mark.parametrize(
    ("outcome", "status"),
    [("completed", "idle"), ("waiting", "waiting"), ("failed", "failed"), ("interrupted", "interrupted")],
)
def test_agent_status_follows_turns(alice: Store, outcome: str, status: str) -> None:
    put(alice, ev.TurnStarted(turn_id="t1"), turn_id="t1")
    agent = alice.agent("alice")
    assert (agent.status, agent.last_turn_id, agent.turns) == ("running", "t1", 0)
    put(alice, ev.TurnSettled(turn_id="t1", outcome=outcome, reason="why"), turn_id="t1")  # type: ignore[arg-type]
    agent = alice.agent("alice")
    assert (agent.status, agent.turns, agent.last_outcome) == (status, 1, outcome)
    assert agent.last_error == ("why" if outcome in ("failed", "interrupted") else None)
    put(alice, ev.TurnStarted(turn_id="t2"), ev.TurnSettled(turn_id="t2", outcome="completed"))
    agent = alice.agent("alice")
    assert (agent.status, agent.turns, agent.last_error) == ("idle", 2, None)
    assert wm(alice)["last_outcome"] == "completed"


def _deltas(store: Store) -> list[Event]:
    return [e for e in store.ledger.read() if e.type == "working_memory.delta"]


def test_working_memory_delta_after_settled_turn(alice: Store) -> None:
    put(alice, ev.WorkItemOpened(work_item_id="W", title="w", objective="ship"), ev.FileTouched(path="x.py"))
    [settled, delta] = put(alice, ev.TurnSettled(turn_id="t1", outcome="completed"), turn_id="t1") + _deltas(alice)
    assert alice.ledger.head() == settled.seq + 1  # derived in the same transaction, right after
    assert (delta.seq, delta.agent_id, delta.turn_id, delta.origin) == (settled.seq + 1, A, "t1", "runtime:projector")
    changes = delta.payload.changes  # type: ignore[attr-defined]
    view = wm(alice)
    assert {k: view[k] for k in changes} == changes
    expected_subset = {"active_work_item": "W", "objective": "ship", "recent_files": ["x.py"], "last_turn_id": "t1"}
    assert expected_subset.items() <= changes.items()
    # Next turn: only what changed is listed.
    put(alice, ev.DecisionRecorded(text="use sqlite"))
    put(alice, ev.TurnSettled(turn_id="t2", outcome="completed"), turn_id="t2")
    second = _deltas(alice)[-1]
    assert second.turn_id == "t2"
    assert second.payload.changes == {"recent_decisions": ["use sqlite"], "last_turn_id": "t2"}  # type: ignore[attr-defined]
    # A settlement that changes nothing derives nothing.
    head = alice.ledger.head()
    put(alice, ev.TurnSettled(turn_id="t2", outcome="completed"), turn_id="t2")
    assert alice.ledger.head() == head + 1
    assert len(_deltas(alice)) == 2
    # Events outside working memory (a task) change nothing either.
    put(alice, ev.TaskCreated(task_id="tk", title="t"), ev.TurnSettled(turn_id="t2", outcome="completed"))
    assert len(_deltas(alice)) == 2
    # A change that undoes an earlier one is still a change.
    put(alice, ev.WorkItemCompleted(work_item_id="W", report="r"), ev.TurnSettled(turn_id="t3", outcome="waiting"))
    third = _deltas(alice)[-1].payload.changes  # type: ignore[attr-defined]
    assert third["active_work_item"] is None and third["objective"] == "" and third["last_outcome"] == "waiting"
    assert alice.replay().ok


def test_working_memory_delta_is_per_agent(alice: Store) -> None:
    alice.append(agent_created("agt_bob", "bob"))
    put(alice, ev.TurnSettled(turn_id="t1", outcome="completed"))
    alice.append(make_event("agt_bob", ev.TurnSettled(turn_id="b1", outcome="completed")))
    put(alice, ev.TurnSettled(turn_id="t1", outcome="completed"))  # nothing new for alice
    deltas = _deltas(alice)
    assert [(d.agent_id, d.turn_id) for d in deltas] == [(A, "t1"), ("agt_bob", "b1")]


def test_two_settlements_in_one_batch_match_a_pure_derivation(alice: Store) -> None:
    """Deltas derived live (with the projector's memo) equal those a pure fold + derive gives."""
    batch = [
        make_event(A, ev.TurnSettled(turn_id="t1", outcome="completed"), turn_id="t1"),
        make_event(A, ev.FileTouched(path="f.py")),
        make_event(A, ev.TurnSettled(turn_id="t2", outcome="completed"), turn_id="t2"),
    ]
    alice.append(*batch)
    alice.append(make_event(A, ev.TurnSettled(turn_id="t3", outcome="failed"), turn_id="t3"))
    _check_derivations(
        list(alice.ledger.read()),
        [
            [agent_created(A, "alice", settings={"model": "m1"})],
            batch,
            [make_event(A, ev.TurnSettled(turn_id="t3", outcome="failed"), turn_id="t3")],
        ],
    )


# --- catch-up ---------------------------------------------------------------------------------


def _history(store: Store) -> None:
    store.append(agent_created(A, "alice"))
    for i in range(30):
        put(store, ev.FileTouched(path=f"f{i % 7}.py"), ev.DecisionRecorded(text=f"d{i}"))
        if i % 5 == 0:
            put(store, ev.TurnSettled(turn_id=f"t{i}", outcome="completed"), turn_id=f"t{i}")


def test_projections_rebuilt_when_rows_are_lost(store: Store, clock: FakeClock) -> None:
    _history(store)
    rows = _live_rows(store)
    store.close()
    conn = Intruder(store)
    conn.execute("DELETE FROM projection_rows")
    conn.execute("DELETE FROM projection_cursors")
    conn.close()
    with Store.open(store.paths, store.settings, clock=clock) as again:
        assert _live_rows(again) == rows
        assert again.replay().ok


def test_projections_caught_up_when_cursor_is_behind(store: Store, clock: FakeClock) -> None:
    _history(store)
    rows = _live_rows(store)
    head = store.ledger.head()
    events = list(store.ledger.read())
    store.close()
    # An older holon that only had projections up to seq 10: rows as they were then, cursor at 10.
    old_rows = _expected_rows(events[:10])
    conn = Intruder(store)
    conn.execute("DELETE FROM projection_rows")
    conn.executemany(
        "INSERT INTO projection_rows(kind, key, agent_id, status, label, seq, state) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(k[0], k[1], *v) for k, v in old_rows.items()],
    )
    conn.execute("UPDATE projection_cursors SET seq = 10")
    conn.close()
    with Store.open(store.paths, store.settings, clock=clock) as again:
        assert again.ledger.head() == head
        assert _live_rows(again) == rows
        assert again.replay().ok
        # Appending on top keeps going from the caught-up state.
        put(again, ev.FileTouched(path="new.py"))
        assert wm(again)["recent_files"][0] == "new.py"
        assert again.replay().ok


def test_projector_version_bump_rebuilds(store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    _history(store)
    rows = _live_rows(store)
    store.close()
    conn = Intruder(store)
    conn.execute("UPDATE projection_rows SET state = '{}' WHERE kind = 'working_memory'")  # stale, wrong rows
    conn.execute("INSERT INTO projection_rows VALUES ('task', 'stale', 'x', NULL, NULL, 1, '{}')")
    conn.close()
    bumped = projector_module.PROJECTOR_VERSION + 1
    monkeypatch.setattr(projector_module, "PROJECTOR_VERSION", bumped)
    monkeypatch.setattr(store_module, "PROJECTOR_VERSION", bumped)
    with Store.open(store.paths, store.settings, clock=clock) as again:
        assert _live_rows(again) == rows
        conn = Intruder(store)
        assert conn.execute("SELECT version FROM projection_cursors").fetchone()[0] == bumped
        conn.close()
        assert again.replay().ok


def test_a_version_bump_met_by_an_append_writes_the_rebuilt_rows_in_its_transaction(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are written every few commits, but a transaction that cleared them (a version
    change found by the append's own catch-up) writes them back before it commits."""
    _history(store)
    store.close()
    bumped = projector_module.PROJECTOR_VERSION + 1
    monkeypatch.setattr(projector_module, "PROJECTOR_VERSION", bumped)
    monkeypatch.setattr(store_module, "PROJECTOR_VERSION", bumped)
    with Store.open(store.paths, store.settings, clock=clock, catch_up=False) as again:
        put(again, ev.FileTouched(path="after.py"))
        conn = Intruder(store)  # the table as committed, nothing written for this read
        try:
            assert conn.execute(
                "SELECT seq, version FROM projection_cursors WHERE name = 'projections'"
            ).fetchone() == (
                again.ledger.head(),
                bumped,
            )
            stored = {(r[0], r[1]) for r in conn.execute("SELECT kind, key FROM projection_rows").fetchall()}
        finally:
            conn.close()
        assert stored == set(_expected_rows(list(again.ledger.read())))
        assert again.replay().ok


def test_cursor_ahead_of_ledger_is_refused(store: Store, clock: FakeClock) -> None:
    _history(store)
    store.close()
    conn = Intruder(store)
    conn.execute("UPDATE projection_cursors SET seq = seq + 100")
    conn.close()
    with pytest.raises(ConflictError, match="ahead"):
        Store.open(store.paths, store.settings, clock=clock)


def test_replay_detects_a_wrong_live_row(store: Store) -> None:
    _history(store)
    store.write_projections()
    conn = Intruder(store)
    conn.execute("UPDATE projection_rows SET state = replace(state, 'f1.py', 'zz.py') WHERE kind = 'working_memory'")
    conn.execute("INSERT INTO projection_rows VALUES ('task', 'extra', 'x', NULL, NULL, 1, '{}')")
    conn.close()
    result = store.replay()
    assert not result.ok
    assert result.mismatches == 2
    assert set(result.examples) == {f"working_memory/{A}", "task/extra"}


@sqlite_only("builds its Ledger on the SQLite Database directly and opens a second home beside it")
def test_small_projector_cache_gives_the_same_rows(home, settings: Settings, clock: FakeClock) -> None:
    """Evicting the projector's row cache (and its delta memo) between transactions changes nothing."""
    from holon.ledger import Database, Ledger
    from holon.projections import Projector

    home.root.mkdir(parents=True)
    projector = Projector(cache_limit=2)
    ledger = Ledger(Database(home.db, synchronous="NORMAL"), clock=clock, hooks=[projector])
    small = Store(home, settings, ledger, projector)
    small.catch_up()
    _history(small)
    put(small, ev.TurnSettled(turn_id="x1", outcome="completed"), ev.TurnSettled(turn_id="x2", outcome="failed"))
    events = list(small.ledger.read())
    assert _live_rows(small) == _expected_rows(events)
    assert small.replay().ok
    small.close()
    # The same history through a store with the default cache derives the same events.
    with Store.open(resolve_home(home.root.parent / "other"), settings, clock=FakeClock()) as big:
        _history(big)
        put(big, ev.TurnSettled(turn_id="x1", outcome="completed"), ev.TurnSettled(turn_id="x2", outcome="failed"))
        assert [(e.type, e.payload) for e in big.ledger.read()] == [(e.type, e.payload) for e in events]


def test_inbox_takes_inputs_and_requeues_interrupted_or_failed_turns(alice: Store) -> None:
    m1, m2 = (put(alice, ev.MessageReceived(text=t))[0].seq for t in ("one", "two"))
    assert alice.agent("alice").pending_inputs == [m1, m2]
    started = put(alice, ev.TurnStarted(turn_id="t1", inputs=[m1]), turn_id="t1")[0]
    agent = alice.agent("alice")
    assert (agent.pending_inputs, agent.current_inputs, agent.current_turn_seq) == ([m2], [m1], started.seq)
    m3 = put(alice, ev.MessageReceived(text="three"))[0].seq
    put(alice, ev.TurnSettled(turn_id="t1", outcome="interrupted", reason="crash"), turn_id="t1")
    agent = alice.agent("alice")
    assert agent.pending_inputs == [m1, m2, m3]
    assert agent.resume_from_seq == started.seq and agent.current_turn_id is None
    # A transient failure re-queues too; a completed turn consumes its inputs and clears the resume point.
    put(alice, ev.TurnStarted(turn_id="t2", inputs=[m1, m2, m3]), turn_id="t2")
    put(alice, ev.TurnSettled(turn_id="t2", outcome="failed", reason="429", requeue=True), turn_id="t2")
    assert alice.agent("alice").pending_inputs == [m1, m2, m3]
    put(alice, ev.TurnStarted(turn_id="t3", inputs=[m1, m2, m3]), turn_id="t3")
    put(alice, ev.TurnSettled(turn_id="t3", outcome="completed", usage=ev.Usage(total_tokens=7)), turn_id="t3")
    agent = alice.agent("alice")
    assert (agent.pending_inputs, agent.resume_from_seq, agent.tokens_total) == ([], None, 7)
    assert alice.replay().ok


# --- reducers are total over every event type --------------------------------------------------

_SEED = as_events(
    [
        agent_created(A, "alice"),
        make_event(A, ev.WorkItemOpened(work_item_id="wi", title="t")),
        make_event(A, ev.TaskCreated(task_id="tk", title="build")),
        make_event(A, ev.WaitRegistered(wait_id="w", on="operator", recheck_at_us=5)),
        make_event(A, ev.TimerScheduled(timer_id="tm", kind="once", spec="x", next_fire_us=5)),
    ]
)
_SEEDED = fold({}, _SEED)


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_reducers_are_total_and_ignore_events_they_do_not_read(data: st.DataObject) -> None:
    tag = data.draw(st.sampled_from(sorted(PAYLOAD_TYPES)), label="type")
    payload = data.draw(payloads(PAYLOAD_TYPES[tag]), label="payload")
    [event] = as_events([make_event(A, payload)], start_seq=100)
    for (kind, key), state in [*_SEEDED.items(), *(((k, "x"), None) for k in KINDS)]:
        reducer = KINDS[kind].reducer
        after = reducer(state, event, key) if KINDS[kind].keyed else reducer(state, event)
        if tag not in _READS[kind] and state is not None:
            assert after is state, (kind, tag)


@sqlite_only("opens two homes in one test (one worker database on PostgreSQL)")
def test_seals_read_from_memory_equal_seals_read_from_the_database(tmp_path: Path, settings: Settings) -> None:
    """The projector serves episode ranges from the content events it folded (``_RecentContent``);
    with that store too small to hold them (every range read from the database) the ledger gets the
    same derived events."""
    from holon.bench import workload

    events = list(itertools.islice(workload.stream(3), 1_500))
    ledgers = []
    for name, per_agent, agents in (("held", 256, 64), ("read", 1, 1)):
        with Store.open(resolve_home(tmp_path / name), settings, clock=FakeClock()) as s:
            s.projector._recent = projector_module._RecentContent(per_agent=per_agent, agents=agents)
            s.append(*workload.creation_events(3))
            for i in range(0, len(events), 7):
                s.append(*events[i : i + 7])
            ledgers.append([(e.seq, e.type, e.payload) for e in s.ledger.read()])
            assert s.replay().ok
    assert ledgers[0] == ledgers[1]
    assert sum(t == "episode.sealed" for _, t, _ in ledgers[0]) >= 3
