"""A search that certifies its hits (``SearchResult.exhaustive``) returns exactly the first
``limit`` of the ranking applied to every match, on a random index (turns in segments, other
kinds, two owners, senders, dates) and random queries, with the candidate sets cut small so that
uncertified results, ties at the cuts and the SQLite-read lifts all happen; and the ranking
applied to every match is always certified.

Real SQLite and a real engine directory; hypothesis draws the queries and the cuts.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.memory import search as memory_search
from holon.memory.engine import Engine, Filters, Hidden, Row
from holon.memory.index import SearchIndex
from holon.memory.index_writer import Doc, _Writer
from holon.memory.prior import max_prior, pack, prior, prior_of
from holon.memory.search import RankParams, SearchFilters, search
from holon.memory.text import engine_term, plan_query
from holon.projections import Store

WORDS = ["heron", "mill", "river", "paint", "garden", "coffee", "train", "ticket", "maria", "jon", "march", "blue",
         "whale", "ferry", "bread", "oven", "lake", "trail", "ridge", "eagle"]  # fmt: skip
RARE = ["ocelot", "quokka", "zither", "yurt", "kumquat", "axolotl"]
SENDERS = ["Maria Lopez", "Jon", "ops bot", ""]
KINDS = ["message", "reply", "tool_result", "episode", "decision", "file"]
OWNERS = ["agent:a", "agent:b"]
DAY_US = 86_400_000_000
T0 = 1_709_251_200_000_000  # 2024-03-01


@contextmanager
def cut(candidates: int, sets: int) -> Iterator[None]:
    saved = (memory_search.CANDIDATES, memory_search.CONTEXT_OF, memory_search.PHRASE_OF, memory_search.SEGMENT_OF)
    memory_search.CANDIDATES = candidates
    memory_search.CONTEXT_OF = memory_search.PHRASE_OF = max(1, sets // 2)
    memory_search.SEGMENT_OF = sets
    try:
        yield
    finally:
        (memory_search.CANDIDATES, memory_search.CONTEXT_OF, memory_search.PHRASE_OF,
         memory_search.SEGMENT_OF) = saved  # fmt: skip


def _docs(rng: random.Random, n: int) -> list[Doc]:
    docs, ts = [], T0
    for i in range(n):
        ts += rng.choice([60, 600, 3 * 3600, 5 * DAY_US // 1_000_000]) * 1_000_000
        kind = rng.choice(KINDS) if rng.random() < 0.3 else rng.choice(["message", "reply"])
        length = rng.choice([1, 2, 4, 8, 20, 40])
        text = " ".join(rng.choice(WORDS) for _ in range(length))
        if rng.random() < 0.1:
            text += " " + rng.choice(RARE)
        if rng.random() < 0.2:
            text += "?"
        docs.append(
            Doc(key=f"d:{i}", ref=f"event:{i}", owner=rng.choice(OWNERS) if rng.random() < 0.2 else OWNERS[0],
                kind=kind, ts_us=ts, title=f"t{i}", text=text, seq=i, sender=rng.choice(SENDERS),
                turn=kind in ("message", "reply"))
        )  # fmt: skip
    return docs


@pytest.fixture
def index(store: Store) -> SearchIndex:
    idx = SearchIndex(store)
    idx.add_documents(_docs(random.Random(5), 400), batch=97)
    return idx


def _ranked(index: SearchIndex, query: str, limit: int, **kw: object) -> tuple[list[tuple[str, float]], bool]:
    result = search(index, ["agent:a"], query, limit=limit, **kw)  # type: ignore[arg-type]
    return [(h.ref, h.score) for h in result.hits], result.exhaustive


queries = st.lists(st.sampled_from([*WORDS, *RARE, *RARE, "maria lopez", "1 march 2024", "march 2024", "blue whale"]),
                   min_size=1, max_size=4).map(" ".join)  # fmt: skip


certified: list[bool] = []
widened: list[bool] = []
"""Per certified search: whether it read the other turns of a lifted segment (``_Ranker._widen``)."""


@contextmanager
def segments_read(index: SearchIndex) -> Iterator[list[tuple[int, ...]]]:
    """The segment sets the engine was asked for while the block runs."""
    seen: list[tuple[int, ...]] = []
    engine = index.engine
    original = engine.matches

    def spy(*args: Any, **kw: Any) -> Any:
        f = kw.get("filters")
        if f is not None and f.segments:
            seen.append(f.segments)
        return original(*args, **kw)

    setattr(engine, "matches", spy)  # noqa: B010  # an instance attribute: the class keeps its method
    try:
        yield seen
    finally:
        delattr(engine, "matches")


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=queries, limit=st.sampled_from([1, 3, 10]), candidates=st.integers(1, 60), sets=st.integers(1, 12))
def test_a_certified_ranking_equals_the_exhaustive_one(
    index: SearchIndex, query: str, limit: int, candidates: int, sets: int
) -> None:
    with cut(0, sets):
        exact, always = _ranked(index, query, limit)
    with cut(candidates, sets), segments_read(index) as seen:
        bounded, sure = _ranked(index, query, limit)
    assert always, "every match ranked is exact by definition"
    certified.append(sure)
    if sure:
        widened.append(bool(seen))
    if sure:
        assert [r for r, _ in bounded] == [r for r, _ in exact]
        assert [s for _, s in bounded] == pytest.approx([s for _, s in exact], rel=1e-9)


def test_some_of_those_rankings_were_certified_and_some_not() -> None:
    assert any(certified) and not all(certified), certified


def test_some_certificates_read_the_other_turns_of_a_lifted_segment() -> None:
    """A document beyond the engine's top-k can be lifted by its segment: the turns of the
    segments whose lift could bring one into the first ``limit`` are read, so such searches are
    certified too (and equal the exhaustive ranking, above)."""
    assert any(widened) and not all(widened), widened


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=queries, kinds=st.lists(st.sampled_from(KINDS), max_size=2, unique=True), days=st.integers(0, 400))
def test_filters_and_other_weights_keep_a_certificate_true(
    index: SearchIndex, query: str, kinds: list[str], days: int
) -> None:
    f = SearchFilters(kinds=tuple(kinds), since_us=T0 + days * DAY_US)
    p = RankParams(short_turn=0.6, question=0.3, segment=0.5, sender=0.4)
    with cut(0, 6):
        exact, _ = _ranked(index, query, 5, filters=f, params=p)
    with cut(40, 6):
        bounded, sure = _ranked(index, query, 5, filters=f, params=p)
    if sure:
        assert [r for r, _ in bounded] == [r for r, _ in exact]


def test_a_rare_word_is_certified(index: SearchIndex) -> None:
    """Its every match is among the candidates."""
    with cut(40, 1):
        hits, sure = _ranked(index, "yurt", 3)
    assert sure and hits


def test_the_engine_scores_a_document_the_same_through_both_queries(index: SearchIndex) -> None:
    engine = index.engine
    terms = engine.analyze(["heron", "mill"])
    top, _ = engine.matches(terms, owners=["agent:a"], limit=50)
    again = engine.score(top.ids, terms, owners=["agent:a"])
    assert dict(zip(again.ids, again.scores, strict=True)) == dict(zip(top.ids, top.scores, strict=True))
    assert len(engine.score(top.ids[:1], terms, owners=["agent:b"])) == 0
    excluded, n = engine.matches(terms, owners=["agent:a"], limit=50, others=["agent:b"])
    assert excluded.ids == top.ids and excluded.scores == top.scores, "excluding the others: the same ranking"
    assert n == engine.matches(terms, owners=["agent:a"], limit=1)[1]


@settings(max_examples=examples(100), deadline=None)
@given(kind=st.sampled_from([*KINDS, "brief", "work_item", "task", "unknown"]), words=st.integers(0, 400),
       question=st.booleans())  # fmt: skip
def test_the_engine_keeps_what_a_prior_is_computed_from(kind: str, words: int, question: bool) -> None:
    p = RankParams(short_words=40, short_turn=0.5)
    assert prior_of(pack(kind, words, question), p) == prior(kind, words, question, p)
    assert prior(kind, words, question, p) <= max_prior(p)


# --- superseded versions (RFC 0008, "Identical ranking on every node") ----------------------------


@pytest.fixture
def versioned(store: Store) -> SearchIndex:
    """The random index with a third of its documents rewritten once or twice, the ledger's way:
    the earlier versions stay in the engine, superseded (often scoring above the live ones: a rare
    word repeated), so that the cuts see hidden hits above, at and below them."""
    idx = SearchIndex(store)
    idx.ensure()
    rng = random.Random(9)
    docs = _docs(random.Random(5), 400)
    with idx._tx() as conn:
        writer = _Writer(conn)
        for doc in docs:
            if rng.random() < 0.33:
                for _ in range(rng.choice([1, 2])):
                    loud = " ".join([rng.choice(RARE)] * 3 + [rng.choice(WORDS)] * rng.choice([1, 4]))
                    writer.upsert(dataclasses.replace(doc, text=loud, turn=False), version=True)
                writer.upsert(dataclasses.replace(doc, turn=False), version=True)
            else:
                writer.upsert(doc, version=True)
        writer.finish()
    assert len(idx.superseded()) > 100
    return idx


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=queries, limit=st.sampled_from([1, 3, 10]), candidates=st.integers(1, 60), sets=st.integers(1, 12))
def test_superseded_versions_are_never_hits_and_certificates_hold(
    versioned: SearchIndex, query: str, limit: int, candidates: int, sets: int
) -> None:
    with cut(0, sets):
        exact, always = _ranked(versioned, query, limit)
    with cut(candidates, sets):
        bounded, sure = _ranked(versioned, query, limit)
    assert always
    live = dict(versioned.db.query("SELECT ref, title FROM search_docs WHERE superseded = 0"))
    for ranked in (exact, bounded):
        refs = [r for r, _ in ranked]
        assert len(refs) == len(set(refs)) and all(r in live for r in refs)
    if sure:
        assert [r for r, _ in bounded] == [r for r, _ in exact]
        assert [s for _, s in bounded] == pytest.approx([s for _, s in exact], rel=1e-9)
    # The hidden versions a total leaves out are those the engine's own query finds among them.
    engine, owners = versioned.engine, ["agent:a"]
    hidden = versioned.hidden(owners)
    terms = engine.analyze(engine_term(t) for t in plan_query(query).terms)
    for f in (Filters(), Filters(kinds=("message", "decision")), Filters(since_us=T0 + 30 * DAY_US)):
        found = engine.score(sorted(hidden.ids), terms, owners=owners, filters=f)
        assert hidden.matching(terms, f, (1.0, 0.2)) == sum(1 for x in found.scores if x > 0)


def test_the_engine_cuts_and_counts_around_hidden_documents(tmp_path: Path) -> None:
    """Hidden ids (superseded versions) leave a tie cut by id among the others, and the count."""
    rows = [Row(i, "agent:a", "message", i, "", "alpha beta", "") for i in range(1, 301)]  # one long tie
    engine = Engine(tmp_path / "e")
    for at in range(0, 300, 40):
        engine.write(rows[at : at + 40])
    hidden_ids = frozenset(range(1, 200, 2)) | frozenset(range(200, 260))
    hidden = Hidden.of(engine.hidden_docs(r for r in rows if r.id in hidden_ids))
    visible = [i for i in range(1, 301) if i not in hidden_ids]
    for limit in (1, 7, 50, 99, 100, 140, 300):
        found, n = engine.top(["alpha"], owners=["agent:a"], limit=limit, hidden=hidden)
        assert [i for i, _s in found] == visible[:limit] and n == len(visible)
        assert engine.top(["alpha"], owners=["agent:a"], limit=limit)[1] == 300
    m, n, _below, _cut = engine.matches_cut(["alpha"], owners=["agent:a"], limit=30, keep=10, count=True,
                                            hidden=hidden)  # fmt: skip
    assert n == len(visible) and not set(m.ids) & hidden_ids and len(m.ids) == 30
    assert engine.top(["beta"], owners=["agent:a"], kinds=["reply"], limit=5, hidden=hidden) == ([], 0)
    assert engine.top(["beta"], owners=["agent:a"], since_us=250, limit=5, hidden=hidden)[1] == 41
