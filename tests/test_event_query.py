"""EventQuery: the ledger's named reads return exactly what the filter says, against real SQLite."""

from __future__ import annotations

from pathlib import Path

from holon.clock import FakeClock
from holon.ledger import Database, EventQuery, Ledger, NewEvent
from holon.ledger.events import MessageReceived


def _ledger(tmp_path: Path) -> Ledger:
    ledger = Ledger(Database(tmp_path / "holon.db", synchronous="OFF"), clock=FakeClock())
    for i in range(6):
        agent = "a" if i % 2 == 0 else "b"
        ledger.append(
            NewEvent(
                agent_id=agent,
                payload=MessageReceived(text=f"m{i}"),
                origin="operator:cli" if i < 3 else "operator:api",
                idempotency_key=f"k{i}",
            )
        )
    return ledger


def test_filters_compose(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    try:
        assert ledger.find_seqs(EventQuery()) == [1, 2, 3, 4, 5, 6]
        assert ledger.find_seqs(EventQuery(agent_id="a")) == [1, 3, 5]
        assert ledger.find_seqs(EventQuery(agent_id="a", after=1, upto=5)) == [3, 5]
        assert ledger.find_seqs(EventQuery(origin="operator:api")) == [4, 5, 6]
        assert ledger.find_seqs(EventQuery(types=("message.received",), limit=2, newest_first=True)) == [6, 5]
        assert ledger.find_seqs(EventQuery(types=())) == []
        assert ledger.find_seqs(EventQuery(seqs=[5, 2, 9])) == [2, 5]
        assert ledger.find_seqs(EventQuery(seqs=[])) == []
        assert ledger.exists(EventQuery(idempotency_key="k3"))
        assert not ledger.exists(EventQuery(idempotency_key="nope"))
        assert ledger.count(EventQuery(agent_id="b", limit=1)) == 3
        [event] = ledger.find(EventQuery(idempotency_key="k2"))
        assert isinstance(event.payload, MessageReceived) and event.payload.text == "m2"
        keys = ledger.find_keys(EventQuery(agent_id="b"))
        assert [(k.seq, k.agent_id, k.type) for k in keys] == [(s, "b", "message.received") for s in (2, 4, 6)]
    finally:
        ledger.close()


def test_hostile_strings_are_parameters_not_sql(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    try:
        hostile = "a' OR '1'='1"
        assert ledger.find_seqs(EventQuery(agent_id=hostile)) == []
        assert ledger.find_seqs(EventQuery(types=[hostile, "x); DROP TABLE events; --"])) == []
        assert ledger.head() == 6
    finally:
        ledger.close()
