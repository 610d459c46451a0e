"""``Store`` reads served from the synchronous projector's memory (issue 18): the same states as the
database's rows, and never a stale one when another process appended meanwhile."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.factories import make_event

from holon.clock import FakeClock
from holon.config import HomePaths, Settings
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
        # Folded but not written yet: read from the database, as before (not there yet).
        assert store.work_item("wi_2") is None
        tx.flush_hooks()
        assert store.work_item("wi_2") is not None


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
