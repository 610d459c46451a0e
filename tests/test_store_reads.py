"""``Store`` reads served from the synchronous projector's memory (issue 18): the same states as the
database's rows, and never a stale one when another process appended meanwhile."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.factories import make_event

from holon.clock import FakeClock
from holon.config import HomePaths, Settings
from holon.errors import ConflictError
from holon.ledger import events as ev
from holon.projections import KINDS, Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``), but those
    marked ``sqlite_only``."""
    return engine


def _db_state(store: Store, kind: str, key: str) -> object:
    store.write_projections()  # the projector writes its rows every few commits: write them now
    rows = store.ledger.query("SELECT state FROM projection_rows WHERE kind = ? AND key = ?", (kind, key))
    return KINDS[kind].model.model_validate_json(rows[0][0]) if rows else None


def _open_item(agent_id: str, work_item_id: str, title: str = "t") -> object:
    payload = ev.WorkItemOpened(work_item_id=work_item_id, title=title, objective="o")
    return make_event(agent_id, payload, work_item_id=work_item_id)


def test_reads_equal_the_rows_and_come_from_memory(store: Store, alice: AgentState) -> None:
    store.append(_open_item(alice.agent_id, "wi_1"))  # type: ignore[arg-type]
    first = store.agent_state(alice.agent_id)
    assert first == _db_state(store, "agent", alice.agent_id)
    assert store.agent_state(alice.agent_id) is first  # held: no query, no validation
    item = store.work_item("wi_1")
    assert item is not None and item == _db_state(store, "work_item", "wi_1")
    assert store.work_items(agent_id=alice.agent_id, status=("open", "blocked")) == [item]
    assert store.work_items(agent_id=alice.agent_id, status=("open", "blocked"))[0] is item
    assert store.working_memory_state(alice.agent_id) == _db_state(store, "working_memory", alice.agent_id)
    assert store.work_item("wi_missing") is None


def test_another_process_appending_is_seen(
    store: Store, alice: AgentState, home: HomePaths, settings: Settings
) -> None:
    store.append(_open_item(alice.agent_id, "wi_1", "before"))  # type: ignore[arg-type]
    assert store.work_item("wi_1").title == "before"  # type: ignore[union-attr]
    other = Store.open(home, settings, clock=FakeClock())  # a second connection: another writer
    try:
        other.append(
            make_event(alice.agent_id, ev.WorkItemUpdated(work_item_id="wi_1", title="after"), work_item_id="wi_1"),
            _open_item(alice.agent_id, "wi_2"),  # type: ignore[arg-type]
        )
    finally:
        other.close()
    # The head moved under this process: its held rows are not the database's any more.
    assert store.work_item("wi_1").title == "after"  # type: ignore[union-attr]
    assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)] == ["wi_1", "wi_2"]
    assert store.agent_state(alice.agent_id) == _db_state(store, "agent", alice.agent_id)
    # The next append of this process folds what the other one appended, and reads agree again.
    store.append(_open_item(alice.agent_id, "wi_3"))  # type: ignore[arg-type]
    assert store.work_item("wi_1") == _db_state(store, "work_item", "wi_1")
    assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)] == ["wi_1", "wi_2", "wi_3"]


def test_inside_a_transaction_reads_see_what_it_appended(store: Store, alice: AgentState) -> None:
    with store.ledger.transaction() as tx:
        tx.append(_open_item(alice.agent_id, "wi_1"))  # type: ignore[arg-type]
        tx.flush_hooks()
        held = store.work_item("wi_1")
        assert held is not None and held == _db_state(store, "work_item", "wi_1")
        tx.append(_open_item(alice.agent_id, "wi_2"))  # type: ignore[arg-type]
        # Folded but not written yet: served from the projector's rows (read-your-writes).
        assert store.work_item("wi_2") is not None
        assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)] == ["wi_1", "wi_2"]
        tx.flush_hooks()
        assert store.work_item("wi_2") == _db_state(store, "work_item", "wi_2")


def test_a_rollback_leaves_nothing_held(store: Store, alice: AgentState) -> None:
    with pytest.raises(RuntimeError), store.ledger.transaction() as tx:
        tx.append(_open_item(alice.agent_id, "wi_1"))  # type: ignore[arg-type]
        tx.flush_hooks()
        assert store.work_item("wi_1") is not None
        raise RuntimeError("abort")
    assert store.work_item("wi_1") is None
    assert store.agent_state(alice.agent_id) == _db_state(store, "agent", alice.agent_id)


def test_agent_by_name_still_works(store: Store) -> None:
    made = create_agent(store, "carol")
    assert store.agent("carol") == made == store.agent(made.agent_id)


@sqlite_only("counts head reads through sqlite3's trace callback")
def test_one_head_read_for_many_reads_and_appends_inside_are_seen(store: Store, alice: AgentState) -> None:
    store.append(_open_item(alice.agent_id, "wi_1", "first"))  # type: ignore[arg-type]
    heads: list[str] = []
    store.ledger.db.connection().set_trace_callback(
        lambda sql: heads.append(sql) if "ORDER BY seq DESC" in sql else None
    )
    try:
        with store.ledger.reading() as head:
            for _ in range(3):
                assert store.work_item("wi_1").title == "first"  # type: ignore[union-attr]
                with store.ledger.reading() as inner:
                    assert inner == head
            assert len(heads) == 1
            # An append of this thread inside the block moves past the block's head: the read
            # after it is not served from the rows held at that head.
            store.append(
                make_event(alice.agent_id, ev.WorkItemUpdated(work_item_id="wi_1", title="second"), work_item_id="wi_1")
            )
            assert store.work_item("wi_1").title == "second"  # type: ignore[union-attr]
    finally:
        store.ledger.db.connection().set_trace_callback(None)


# --- rows written every few commits (``Projector.settle``) -----------------------------------------


def _stored_cursor(store: Store) -> int:
    return int(store.ledger.query("SELECT seq FROM projection_cursors WHERE name = 'projections'")[0][0])


def test_rows_are_written_every_few_commits_and_reads_never_lag(store: Store, alice: AgentState) -> None:
    """The appends commit their events at once and their rows a few commits later; every read in
    this process in between sees them (served from the projector), and the stored rows equal a replay
    once written."""
    for i in range(5):
        store.append(_open_item(alice.agent_id, f"wi_{i}", f"t{i}"))  # type: ignore[arg-type]
        assert store.work_item(f"wi_{i}").title == f"t{i}"  # type: ignore[union-attr]
        assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)][-1] == f"wi_{i}"
    assert _stored_cursor(store) < store.ledger.head()  # not written yet
    assert store.agent(alice.name).agent_id == alice.agent_id
    store.write_projections()
    assert _stored_cursor(store) == store.ledger.head()
    assert store.work_item("wi_4") == _db_state(store, "work_item", "wi_4")
    assert store.replay().ok


def test_another_process_reads_rows_not_written_yet(
    store: Store, alice: AgentState, home: HomePaths, settings: Settings
) -> None:
    """A process whose rows are not written yet leaves the cursor behind; another process reading
    catches up from the cursor (and writes the rows) before it answers."""
    other = Store.open(home, settings, clock=FakeClock())  # opened first: it holds nothing yet
    try:
        assert other.work_items(agent_id=alice.agent_id) == []
        store.append(_open_item(alice.agent_id, "wi_1", "mine"))  # type: ignore[arg-type]
        store.append(
            make_event(alice.agent_id, ev.WorkItemUpdated(work_item_id="wi_1", title="renamed"), work_item_id="wi_1")
        )
        assert _stored_cursor(store) < store.ledger.head()
        assert other.work_item("wi_1").title == "renamed"  # type: ignore[union-attr]
        assert [w.title for w in other.work_items(agent_id=alice.agent_id)] == ["renamed"]
        assert _stored_cursor(other) == other.ledger.head()
        # The first process goes on (its next append sees nothing new: the head is its own).
        store.append(_open_item(alice.agent_id, "wi_2"))  # type: ignore[arg-type]
        assert [w.work_item_id for w in other.work_items(agent_id=alice.agent_id)] == ["wi_1", "wi_2"]
        assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)] == ["wi_1", "wi_2"]
    finally:
        other.close()
    assert store.replay().ok


def test_a_transaction_reads_rows_another_process_has_not_written(
    store: Store, alice: AgentState, home: HomePaths, settings: Settings
) -> None:
    other = Store.open(home, settings, clock=FakeClock())
    try:
        other.append(_open_item(alice.agent_id, "wi_1", "theirs"))  # type: ignore[arg-type]
        with store.ledger.transaction():  # the head moved: this process folds from the cursor here
            assert store.work_item("wi_1").title == "theirs"  # type: ignore[union-attr]
            assert [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)] == ["wi_1"]
    finally:
        other.close()


def test_a_taken_name_is_refused_while_rows_wait(store: Store, alice: AgentState) -> None:
    """An agent's new row is written at the append that creates it: the name index refuses a taken
    name at that append, whatever other rows are still waiting to be written."""
    store.append(_open_item(alice.agent_id, "wi_1"))  # type: ignore[arg-type]
    assert store.projector.pending
    with pytest.raises(ConflictError, match="already taken"):
        create_agent(store, alice.name)
    assert store.work_item("wi_1") is not None  # the rollback dropped what was held: caught up again
    assert [a.name for a in store.agents()] == [alice.name]
    assert store.replay().ok


@pytest.mark.slow
@sqlite_only("kills a real process that appended (its SQLite file is reopened here)")
def test_a_process_killed_before_writing_its_rows_loses_nothing(home: HomePaths, settings: Settings) -> None:
    """kill -9 after commits whose rows were not written: the events are there (acknowledged means
    committed), and the next open catches the rows up from the cursor."""
    script = (
        "import os, signal, sys\n"
        "from holon.clock import FakeClock\n"
        "from holon.config import HomePaths\n"
        "from holon.config import Settings\n"
        "from holon.projections import Store\n"
        "from holon.runtime.agents import create_agent\n"
        "from holon.ledger import NewEvent, events as ev\n"
        "home = HomePaths(__import__('pathlib').Path(sys.argv[1]))\n"
        "store = Store.open(home, Settings(), clock=FakeClock())\n"
        "a = create_agent(store, 'kim')\n"
        "for i in range(5):\n"
        "    store.append(NewEvent(a.agent_id, ev.WorkItemOpened(work_item_id=f'wi_{i}', title=f't{i}', objective='o'),"
        " origin='operator:test', authority='operator', work_item_id=f'wi_{i}'))\n"
        "assert store.projector.pending\n"
        "print('HEAD', store.ledger.head(), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script, str(home.root)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == -9, done.stderr
    head = int(done.stdout.split("HEAD ")[1].split()[0])
    with Store.open(home, settings, clock=FakeClock()) as again:
        assert again.ledger.head() == head
        assert _stored_cursor(again) == head  # caught up on open
        kim = again.agent("kim")
        assert [w.title for w in again.work_items(agent_id=kim.agent_id)] == [f"t{i}" for i in range(5)]
        assert again.replay().ok


def test_with_two_writers_each_commit_writes_its_rows(
    store: Store, alice: AgentState, home: HomePaths, settings: Settings
) -> None:
    """Deferring pays off for one writer; once another process's append made this one drop rows it
    had not written, its next commits write their rows at once (the other need not fold them again)."""
    other = Store.open(home, settings, clock=FakeClock())
    try:
        store.append(_open_item(alice.agent_id, "wi_1"))  # type: ignore[arg-type]
        assert _stored_cursor(store) < store.ledger.head()  # one writer so far: deferred
        other.append(_open_item(alice.agent_id, "wi_2"))  # type: ignore[arg-type]
        other.append(_open_item(alice.agent_id, "wi_3"))  # type: ignore[arg-type]
        store.append(_open_item(alice.agent_id, "wi_4"))  # type: ignore[arg-type]
        assert _stored_cursor(store) == store.ledger.head()  # it dropped unwritten rows: writes now
        other.append(_open_item(alice.agent_id, "wi_5"))  # type: ignore[arg-type]
        assert _stored_cursor(other) == other.ledger.head()  # and so does the other one
        for s in (store, other):
            assert [w.work_item_id for w in s.work_items(agent_id=alice.agent_id)] == [f"wi_{i}" for i in range(1, 6)]
    finally:
        other.close()
    assert store.replay().ok


@sqlite_only("counts list queries through sqlite3's trace callback")
def test_list_reads_query_again_only_after_rows_are_written(
    store: Store, alice: AgentState, home: HomePaths, settings: Settings
) -> None:
    """A list read keeps the stored rows it read until this process writes rows or drops its fold
    (issue 18, step 6); whatever changed meanwhile comes from the projector, so every answer is the
    one a query would give."""
    store.append(_open_item(alice.agent_id, "wi_1", "one"))  # type: ignore[arg-type]
    store.write_projections()
    lists: list[str] = []
    store.ledger.db.connection().set_trace_callback(
        lambda sql: lists.append(sql) if "SELECT key, label, state FROM projection_rows" in sql else None
    )

    def ids() -> list[str]:
        return [w.work_item_id for w in store.work_items(agent_id=alice.agent_id)]

    try:
        assert ids() == ["wi_1"] and len(lists) == 1
        store.append(_open_item(alice.agent_id, "wi_2", "two"))  # type: ignore[arg-type]
        store.append(
            make_event(alice.agent_id, ev.WorkItemUpdated(work_item_id="wi_1", title="uno"), work_item_id="wi_1")
        )
        # Not written yet: the stored rows are as they were, the changes come from the projector.
        assert ids() == ["wi_2", "wi_1"] and len(lists) == 1
        assert [w.title for w in store.work_items(agent_id=alice.agent_id)] == ["two", "uno"]
        store.write_projections()  # rows written: the next read queries them
        assert ids() == ["wi_2", "wi_1"] and len(lists) == 2
        assert ids() == ["wi_2", "wi_1"] and len(lists) == 2
        # Another process writes this one's rows (a read catching up) and then appends: the head
        # moves, this process drops its fold and reads the rows again.
        store.append(_open_item(alice.agent_id, "wi_3", "three"))  # type: ignore[arg-type]
        other = Store.open(home, settings, clock=FakeClock())
        try:
            assert [w.work_item_id for w in other.work_items(agent_id=alice.agent_id)] == ["wi_2", "wi_1", "wi_3"]
            assert ids() == ["wi_2", "wi_1", "wi_3"]  # the same answer from what was kept
            other.append(_open_item(alice.agent_id, "wi_4", "four"))  # type: ignore[arg-type]
        finally:
            other.close()
        queried = len(lists)
        assert ids() == ["wi_2", "wi_1", "wi_3", "wi_4"] and len(lists) == queried + 1
    finally:
        store.ledger.db.connection().set_trace_callback(None)
    assert store.replay().ok
