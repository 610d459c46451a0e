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


def test_fixed_minimum_is_the_pinned_minimum_of_a_full_build_without_the_input() -> None:
    """Admission adds up the pinned sections alone (``fixed_minimum``): the same figure a full
    build gives, with a short reply pinning the turn it answers (its note about a superseded
    decision included), this turn's rounds and a resumed turn's."""
    import dataclasses

    from helpers.ctx_views import history_turn, inp, make_view, round_view

    from holon.context.sections import build_sections, fixed_minimum, pinned_minimum
    from holon.context.tokens import TokenCounter
    from holon.projections.state import KeyPoint

    counter = TokenCounter("gpt-4o")
    asked = history_turn("t_q", 20, (inp(18, "we ship on friday, ok?"),), "Shall I deploy the release branch tonight?")
    other = history_turn("t_o", 30, (inp(28, "the invoice parser is slow"),), "I profiled it.", thread="conv:9")
    superseded = KeyPoint(seq=18, text="ship on friday", thread="conv:1", superseded_by=40)
    views = [
        make_view(),
        make_view(history=(asked, other), inputs=(inp(50, "yes"),), last_turn=other),
        make_view(history=(other, asked), inputs=(inp(50, "yes"),), key_points=(superseded,), last_turn=asked),
        make_view(history=(other, asked), inputs=(inp(50, "a long question about the parser " * 40),)),
        make_view(rounds=(round_view(0, 2), round_view(1, 1, 20_000))),
        make_view(resumed=(round_view(0, 2),), agents_md=""),
    ]
    views.append(dataclasses.replace(views[1], thread="conv:9"))
    assert any(s.pinned and s.key == "turn:t_q" for s in build_sections(views[2], counter))  # a reply pins its turn
    for n, view in enumerate(views):
        expected = pinned_minimum([s for s in build_sections(view, counter) if s.key != "input"])
        assert fixed_minimum(view, counter) == expected, n


def test_the_daemon_warms_tokenizers_and_tools_once_per_process() -> None:
    """``holon.daemon.warm`` loads these in its thread so the first turn does not on the loop: the
    turn must then get the very objects that were warmed, not build its own."""
    from holon.context.tokens import TokenCounter, _encoding, warm_encodings
    from holon.runtime.tools import builtin_registry

    warm_encodings(["openai/some-unknown-model", "local"])  # both counted with o200k_base
    assert TokenCounter("openai/fake")._enc is _encoding("o200k_base")
    assert builtin_registry() is builtin_registry()
    assert builtin_registry(exclude=frozenset({"run_command"})) is not builtin_registry()
    assert "run_command" not in builtin_registry(exclude=frozenset({"run_command"})).tools
