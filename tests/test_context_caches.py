"""What context assembly keeps between turns gives what a fresh computation gives (issue 18):
``view._recent_index`` (the agent's recent index, extended with what came since) and
``sections._document_frequencies`` (the candidate past's term counts, updated by what changed)."""

from __future__ import annotations

import random

from holon.context.sections import _document_frequencies, _terms
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


def test_kept_document_frequencies_equal_a_fresh_count() -> None:
    rng = random.Random(3)
    words = ["deploy ledger", "invoice budget", "schema parser", "cache retry queue", "index token", "deploy"]
    past: list[str] = []
    for step in range(200):
        # One turn in and one out, several, none, or a whole new past (another agent's prompt).
        change = rng.choice([0, 1, 1, 2, 5, 40])
        past = past[change:] + [f"{rng.choice(words)} {rng.choice(words)} {rng.randint(0, 30)}" for _ in range(change)]
        if rng.random() < 0.1:
            past = past + past[:3]  # the same text twice
        expected: dict[str, int] = {}
        for text in past:
            for w in _terms(text):
                expected[w] = expected.get(w, 0) + 1
        assert _document_frequencies(list(past), "agt_test_df") == expected, step
