"""``holon.context.view._recent_index``: the agent's recent index kept between turns and extended
with what came since equals a fresh read, whatever was appended in between (issue 18)."""

from __future__ import annotations

import random

from holon.context.view import _PEEK, _recent_index
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent

TYPES = ("turn.started", "turn.settled")


def test_the_kept_index_equals_a_fresh_read(store: Store) -> None:
    me = create_agent(store, "me", origin="operator:test").agent_id
    other = create_agent(store, "other", origin="operator:test").agent_id
    rng = random.Random(7)
    n = 0
    for step in range(60):
        # Between two reads: nothing, a few of the agent's turns, or more than a peek reaches.
        for _ in range(rng.choice([0, 1, 2, _PEEK + 1, 3 * _PEEK])):
            agent = me if rng.random() < 0.7 else other
            n += 1
            tid = f"turn_{n}"
            store.append(
                NewEvent(agent, ev.TurnStarted(turn_id=tid), turn_id=tid),
                NewEvent(agent, ev.TurnSettled(turn_id=tid, outcome="completed", reply="ok"), turn_id=tid),
            )
        before = store.ledger.head() + 1 - rng.choice([0, 0, 1])
        for types, limit in ((TYPES, 9), (("turn.settled",), 5)):
            expected = store.ledger.recent_index(me, types, limit=limit, before=before)
            assert _recent_index(store, me, types, limit=limit, before=before) == expected, step


def test_an_earlier_bound_reads_again(store: Store) -> None:
    me = create_agent(store, "me", origin="operator:test").agent_id
    for i in range(5):
        store.append(NewEvent(me, ev.TurnStarted(turn_id=f"t{i}"), turn_id=f"t{i}"))
    head = store.ledger.head()
    assert _recent_index(store, me, TYPES, limit=3, before=head + 1) == store.ledger.recent_index(
        me, TYPES, limit=3, before=head + 1
    )
    assert _recent_index(store, me, TYPES, limit=3, before=head - 1) == store.ledger.recent_index(
        me, TYPES, limit=3, before=head - 1
    )
