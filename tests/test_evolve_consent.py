"""Consent (RFC 0006): whatever reads as the operator's preference or identity is only ever a proposal.

Covers the deterministic rules (however the sentence is phrased, or introduced by "remember that",
"note that", "FYI"), the model-assisted path (whatever kind and scope the model claims), and the
merge of both paths (the same subject found twice is decided once, never a conflict).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from helpers.evolve import run_turns
from hypothesis import given
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.evolve import review
from holon.evolve.extract import TurnFacts, extract
from holon.evolve.model_extract import model_extractor
from holon.evolve.worker import Evolver
from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


#: How an operator introduces something to keep (the fact rule reads what follows them).
LEADS = ["", "Remember that ", "Remember: ", "Note that ", "FYI, ", "FYI ", "For the record, ", "Keep in mind that ",
         "Please remember that ", "Also, note that ", "OK, "]  # fmt: skip
#: Preference and identity statements, in the phrasings operators use.
PREFERENCES = [
    "I prefer short answers.",
    "I never want force pushes.",
    "I always deploy on Fridays.",
    "when you commit, always sign off.",
    "make sure to always run the tests.",
    "you should never push to main.",
    "I'd prefer tabs.",
    "I would rather use pytest.",
    "we never merge on Fridays.",
    "I don't want emojis in commit messages.",
    "from now on, write the changelog in French.",
    "always answer in English.",
    "never email the customers directly.",
    "the build should always be green before a release.",
    "my name is Ada.",
    "I am a data engineer.",
    "I work at Initech.",
    "call me Ada.",
]
#: Not stated as a standing rule, so alone they yield nothing; introduced as something to remember,
#: they are still about the operator: proposals, never facts.
ABOUT_THE_OPERATOR = ["the operator likes terse replies.", "I like dark themes.", "my laptop is a mac.",
                      "the deploy must go through CI."]  # fmt: skip


def _message(seq: int, text: str) -> Event:
    p = ev.MessageReceived(text=text)
    return Event(seq, f"e{seq}", "agt", p.type, 1, seq * 1000, "operator:test", "operator", "t1", None, None, None,
                 None, p, "h")  # type: ignore[arg-type]  # fmt: skip


def _facts(*texts: str) -> TurnFacts:
    return TurnFacts("agt", "t1", "agent:agt", "workspace:/w", [_message(i + 1, t) for i, t in enumerate(texts)])


@given(
    lead=st.sampled_from(LEADS),
    said=st.sampled_from(PREFERENCES + ABOUT_THE_OPERATOR),
    end=st.sampled_from([".", "!", ""]),
    before=st.sampled_from(["", "Thanks. ", "The build is green. "]),
)
def test_every_phrasing_of_a_preference_is_a_proposal_in_the_operator_scope(
    lead: str, said: str, end: str, before: str
) -> None:
    text = before + lead + (said if lead else said[0].upper() + said[1:]).rstrip(".") + end
    found = extract(_facts(text))
    introduced = lead not in ("", "OK, ")
    assert found or (said in ABOUT_THE_OPERATOR and not introduced), text
    for c in found:
        assert c.proposal, (text, c)
        assert (c.entry.scope, c.entry.owner) == ("operator", "operator")
        assert c.entry.kind in ("preference", "identity")


def test_remember_that_introduces_a_preference_with_the_same_subject_as_saying_it() -> None:
    [direct] = extract(_facts("I prefer short answers."))
    [remembered] = extract(_facts("Remember that I prefer short answers."))
    assert direct.entry.subject == remembered.entry.subject == "pref:short answer"
    assert remembered.entry.text == "I prefer short answers."


def test_facts_about_the_workspace_are_still_facts() -> None:
    for text in (
        "Remember that the staging server is db1.",
        "Note that our deploy host is web3.",
        "FYI, the cache is redis.",
    ):
        [c] = extract(_facts(text))
        assert (c.entry.kind, c.proposal, c.entry.scope) == ("fact", False, "workspace"), text


def test_nothing_durable_appears_before_the_operator_accepts(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    said = [lead + p for lead, p in zip(LEADS * 2, PREFERENCES, strict=False)]
    run_turns(store, clock, ada.agent_id, [(s[0].upper() + s[1:], ["ok"]) for s in said])
    evolver = Evolver(store, clock=clock)
    evolver.drain()
    assert evolver.queue.counts()["done"] == len(said)
    assert review.list_entries(store) == []
    assert [e.type for e in store.ledger.read(0) if e.type.startswith("durable.")] == []
    pending = review.list_proposals(store)
    assert len(pending) >= len(said) - 2  # a few share a subject ("name"): the newer one waits
    # Accepting one makes it durable, and only that one.
    review.accept(store, pending[0].proposal_id)
    assert [s.proposal_id for s in review.list_entries(store)] == [pending[0].proposal_id]


# --- the model-assisted path ---------------------------------------------------------------------------


def _answer(*candidates: dict[str, Any]) -> str:
    return json.dumps({"candidates": list(candidates)})


def _drain_with_model(store: Store, clock: FakeClock, answer: str) -> Evolver:
    settings = store.settings.evolve.model_copy(update={"model_extraction": True})
    extractor = model_extractor(lambda _agent, _messages: answer, settings.min_confidence)
    evolver = Evolver(store, settings, clock=clock, model_extractor=extractor)
    evolver.drain()
    return evolver


def test_a_model_candidate_that_reads_as_a_preference_is_a_proposal_whatever_kind_it_claims(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    run_turns(store, clock, ada.agent_id, [("Remember that replies are better short. The db is postgres.", ["ok"])])
    disguised = [
        # A "workspace fact" whose quoted sentence is a fact in form; its text is about the operator.
        {"scope": "workspace", "kind": "fact", "subject": "reply length", "text": "The operator wants short replies.",
         "confidence": 0.9, "evidence": "replies are better short"},
        # An "agent" fact quoting a plain fact, but worded as a rule for the agent.
        {"scope": "agent", "kind": "procedure", "subject": "db", "text": "You should always use postgres.",
         "confidence": 0.9, "evidence": "The db is postgres"},
    ]  # fmt: skip
    evolver = _drain_with_model(store, clock, _answer(*disguised))
    assert evolver.queue.counts()["done"] == 1
    durable = [(s.entry.text, s.source) for s in review.list_entries(store)]
    assert ("The operator wants short replies.", "model") not in durable
    assert ("You should always use postgres.", "model") not in durable
    waiting = {p.entry.text: p.entry for p in review.list_proposals(store) if p.entry is not None}
    for text in ("The operator wants short replies.", "You should always use postgres."):
        assert (waiting[text].scope, waiting[text].kind) == ("operator", "preference")


def test_a_model_quote_of_a_preference_sentence_is_a_proposal(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    run_turns(store, clock, ada.agent_id, [("Note that I never want force pushes on the release branch.", ["ok"])])
    quoted = {"scope": "workspace", "kind": "fact", "subject": "release branch", "text": "Force pushes on the release branch are off.",
              "confidence": 0.95, "evidence": "force pushes on the release branch"}  # fmt: skip
    _drain_with_model(store, clock, _answer(quoted))
    assert review.list_entries(store) == []
    assert {p.entry.subject for p in review.list_proposals(store) if p.entry is not None} == {"pref:force push"}


def test_the_same_subject_from_the_model_and_the_rules_is_decided_once(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    said = "Remember that the staging server is db1.example.com. My name is Ada. Always use tabs. The invoices run on box7."
    run_turns(store, clock, ada.agent_id, [(said, ["ok"])])
    both = [
        {"scope": "workspace", "kind": "fact", "subject": "staging server", "text": "Staging is on db1.example.com.",
         "confidence": 0.9, "evidence": "the staging server is db1.example.com"},
        {"scope": "operator", "kind": "identity", "subject": "identity:name", "text": "The operator is called Ada.",
         "confidence": 0.9, "evidence": "My name is Ada"},
        {"scope": "operator", "kind": "preference", "subject": "preference:use tabs", "text": "Indent with tabs.",
         "confidence": 0.9, "evidence": "Always use tabs"},
        {"scope": "workspace", "kind": "fact", "subject": "invoices", "text": "Invoices run on box7.",
         "confidence": 0.9, "evidence": "The invoices run on box7"},
    ]  # fmt: skip
    evolver = _drain_with_model(store, clock, _answer(*both))
    assert evolver.queue.counts() == {"queued": 0, "running": 0, "done": 1, "dead": 0}
    entries = sorted((s.entry.text, s.source) for s in review.list_entries(store))
    # The deterministic reading wins where both found the subject; the model's own find is kept.
    assert entries == [("Invoices run on box7.", "model"), ("The staging server is db1.example.com.", "evolve")]
    pending = sorted((p.entry.subject, p.entry.text) for p in review.list_proposals(store) if p.entry is not None)
    assert pending == [("identity:name", "My name is Ada."), ("pref:use tab", "Always use tabs.")]
