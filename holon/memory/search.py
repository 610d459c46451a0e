"""MemorySearch: ranked retrieval over an agent's own index documents and the scopes shared with it.

Ranking, in two stages (each part measured on LoCoMo with ``holon bench locomo``; RFC 0004):

1. **The engine** (``holon.memory.engine``, tantivy) returns the exact top ``CANDIDATES`` by BM25
   over the document's terms (for a conversation turn, with those of the two turns before it in
   its segment: a short answer such as "Thanks! It was Matt Patterson" is found through the
   question that preceded it) and its metadata (sender, kind, date words; weight ``meta``), among
   the owners' documents that pass the filters; and how many documents match (exact).
2. **Re-ranking** of those candidates in Python:
   * **neighbouring turns**: a turn is lifted by the engine scores of the two turns after it
     (weight ``next``; ``prev`` lifts by the two before it, 0 since they are indexed with it),
     and such a neighbour joins the candidates even if it matched nothing itself;
   * **phrases**: among the best ``PHRASE_OF``, a document whose own text holds the query's
     adjacent word pairs adjacent is lifted (weight ``phrase``; the engine keeps no positions);
   * **segment relevance**: the conversation segment a turn belongs to is scored as a whole (the
     sum of its candidate turns' scores) and lifts its turns, so a question about one evening's
     talk prefers that evening;
   * **sender**: a turn spoken by someone the query names is lifted a little;
   * **dates**: a query naming a calendar date or month lifts documents from that day or month;
   * **priors**: turns too short to carry information, and bare questions, are lowered; kinds have
     small weights (curated files and episodes above raw tool output); newer documents get a small
     recency lift.

The first stage is exact whatever the index's size (``SearchResult.exhaustive`` is always true;
the field stays for callers); the second re-orders its top ``CANDIDATES`` (and their neighbours).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from holon.clock import format_us, utc
from holon.memory.index import Freshness, SearchIndex
from holon.memory.text import WORDS, QueryPlan, engine_term, index_terms, plan_query, stem
from holon.memory.vectors import Embedder, dense_scores, embed_pending

__all__ = ["KINDS", "Hit", "RankParams", "SearchFilters", "SearchResult", "search"]

#: Document kinds a search can be narrowed to.
KINDS = ("message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file")

#: The engine's exact top-k: the candidates re-ranked in Python (0: every match, what
#: ``holon bench search`` compares against).
CANDIDATES = 200
#: The engine's best matches whose neighbouring turns are lifted (``_Planner._with_context``) ...
CONTEXT_OF = 50
#: ... among the documents this many ids before and after them.
CONTEXT_IDS = 4
#: The engine's best matches whose text is checked for the query's adjacent word pairs.
PHRASE_OF = 50
#: The engine's best matches whose scores make up their segments' (``_segment_scores``).
SEGMENT_OF = 200
_IN_CHUNK = 30_000
SNIPPET_CHARS = 240
#: Documents a search embeds before it runs, at most (the rest wait for later searches or the
#: daemon's background pass): a search never stalls on a large backlog.
EMBED_PER_SEARCH = 256


@dataclass(frozen=True, slots=True)
class RankParams:
    """Ranking weights. Defaults are what LoCoMo measurement chose; see RFC 0004."""

    body: float = 1.0
    """Weight of the query's terms in a document's engine ``body``: its text and, for a turn,
    the two turns before it (``holon.memory.index_writer``)."""
    prev: float = 0.0
    """Lift of a turn by the engine scores of the two turns before it (0: they are indexed with
    it instead, which LoCoMo prefers: RFC 0004, "Engine")."""
    next: float = 0.2
    """Lift of a turn by the engine scores of the two turns after it."""
    meta: float = 0.2
    segment: float = 0.3
    sender: float = 0.2
    date: float = 0.3
    short_turn: float = 0.3
    short_words: int = 30
    question: float = 0.1
    phrase: float = 0.3
    """Lift (times the best engine score) of a document among the best ``PHRASE_OF`` whose own
    text holds the query's adjacent word pairs adjacent (in proportion to the pairs found)."""
    recency: float = 0.05
    dense: float = 0.4
    """Weight of embedding similarity, when an embedder is configured."""
    recency_half_life_days: float = 30.0
    kind_weights: tuple[tuple[str, float], ...] = (
        ("file", 1.15),
        ("episode", 1.1),
        ("decision", 1.1),
        ("work_item", 1.05),
        ("task", 0.9),
        ("tool_result", 0.85),
    )


@dataclass(frozen=True, slots=True)
class SearchFilters:
    kinds: tuple[str, ...] = ()
    since_us: int | None = None
    until_us: int | None = None
    work_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    ref: str
    kind: str
    title: str
    snippet: str
    score: float
    ts_us: int
    sender: str
    seq: int | None

    def as_dict(self) -> dict[str, object]:
        return {
            "source_ref": self.ref,
            "kind": self.kind,
            "title": self.title,
            "snippet": self.snippet,
            "score": round(self.score, 4),
            "time": format_us(self.ts_us)[:19] + "Z",
            "sender": self.sender or None,
        }


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    terms: tuple[str, ...]
    hits: tuple[Hit, ...]
    total: int
    """Documents matching at least one query term (within scope and filters), plus the turns
    found through a matching neighbour (see the module docstring)."""
    total_exact: bool
    """Always true since the engine counts exactly (kept for callers)."""
    exhaustive: bool
    """Always true: the engine's first stage is exact (see the module docstring)."""
    freshness: Freshness
    notes: tuple[str, ...] = field(default=())

    @property
    def more(self) -> bool:
        return self.total > len(self.hits)

    def as_dict(self) -> dict[str, object]:
        return {
            "query": self.query,
            "terms": list(self.terms),
            "hits": [h.as_dict() for h in self.hits],
            "total": self.total,
            "total_exact": self.total_exact,
            "more": self.more,
            "exhaustive": self.exhaustive,
            "freshness": self.freshness.as_dict(),
            "notes": list(self.notes),
        }


@dataclass(slots=True)
class _Cand:
    id: int
    score: float
    owner: str = ""
    kind: str = ""
    ts_us: int = 0
    sender: str = ""
    segment: int | None = None
    seq: int | None = None
    ref: str = ""
    title: str = ""
    work_item_id: str | None = None
    words: int = 0
    question: int = 0
    text: str = ""
    first: float = 0.0
    """The engine's score (0 for a neighbour or dense candidate that was not among its top)."""
    phrases: float = 0.0
    """The share of the query's adjacent word pairs found adjacent in its text."""


def search(
    index: SearchIndex,
    owners: Sequence[str],
    query: str,
    *,
    filters: SearchFilters = SearchFilters(),
    limit: int = 10,
    params: RankParams = RankParams(),
    embedder: Embedder | None = None,
) -> SearchResult:
    """Search the documents of ``owners`` (the caller decides which scopes an agent may see).

    Catches the index up first, so results are current (curated files are re-read by the caller:
    ``holon.memory.access.search_memory`` knows which files an agent sees).
    """
    freshness = index.catch_up()
    plan = plan_query(query)
    limit = max(1, min(int(limit), 100))
    if plan.empty or not owners:
        return SearchResult(query[:200], plan.terms, (), 0, True, True, freshness, ("no searchable words",))
    planner = _Planner(index, list(dict.fromkeys(owners)), filters, params)
    dense: dict[int, float] = {}
    if embedder is not None:
        embed_pending(index, embedder, limit=EMBED_PER_SEARCH)
        dense = dense_scores(index, embedder, planner.owners, query)
    cands, total = planner.candidates(plan, extra=dense)
    ranked = _rerank(plan, cands, params, dense, planner.newest())
    hits = planner.hits(ranked[:limit], plan)
    return SearchResult(query[:200], plan.terms, hits, max(total, len(ranked)), True, True, freshness)


class _Planner:
    def __init__(self, index: SearchIndex, owners: list[str], filters: SearchFilters, params: RankParams) -> None:
        self.index = index
        self.owners = owners
        self.filters = filters
        self.params = params

    def _q(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self.index.store.ledger.query(sql, list(params))

    def newest(self) -> int | None:
        """The time of the index's newest document (recency counts from it)."""
        row = self._q("SELECT max(ts_us) FROM search_docs", ())
        return int(row[0][0]) if row and row[0][0] is not None else None

    def _q_in(self, sql: str, ids: Sequence[int]) -> list[tuple[Any, ...]]:
        """``sql`` with its ``{}`` filled by ``ids`` as parameters, in chunks SQLite accepts (only
        the bench's exact reference has that many); rows of the chunks in order."""
        out: list[tuple[Any, ...]] = []
        for at in range(0, len(ids), _IN_CHUNK):
            chunk = ids[at : at + _IN_CHUNK]
            out += self._q(sql.format(",".join("?" * len(chunk))), chunk)
        return out

    def candidates(self, plan: QueryPlan, *, extra: dict[int, float]) -> tuple[list[_Cand], int]:
        """The engine's exact top ``CANDIDATES`` with their neighbouring turns, plus ``extra``
        (dense) ones; and how many documents match."""
        p, f = self.params, self.filters
        engine = self.index.engine
        terms = engine.analyze(engine_term(t) for t in plan.terms)

        def top(limit: int) -> tuple[list[tuple[int, float]], int]:
            return engine.top(
                terms, owners=self.owners, kinds=f.kinds, since_us=f.since_us, until_us=f.until_us,
                work_item_id=f.work_item_id, weights=(p.body, p.meta), limit=limit,
            )  # fmt: skip

        top_k, total = top(CANDIDATES) if CANDIDATES > 0 else top(1)
        if CANDIDATES <= 0 and total > 1:  # every match (the bench's exact reference)
            top_k, total = top(total)
        scores = dict(top_k)
        cands = self._load(self._with_context(scores), scores, extra)
        if p.phrase > 0:
            self._phrases(plan, cands)
        joined = sum(1 for c in cands if c.id not in scores and c.id not in extra)
        return cands, total + joined

    def _phrases(self, plan: QueryPlan, cands: list[_Cand]) -> None:
        """Mark the best ``PHRASE_OF`` candidates whose own text holds the query's adjacent word
        pairs adjacent (the engine keeps no positions: RFC 0004, "Engine"). Only a text holding
        both words of a pair as written (any case) is analysed: analysing all 50 texts cost
        about 1.6 ms per query."""
        engine = self.index.engine
        pairs: dict[tuple[str, str], tuple[str, str]] = {}
        for ph in plan.phrases:
            words = ph.split()
            pair = engine.analyze(engine_term(w) for w in words)
            if len(words) == 2 and len(pair) == 2:
                pairs[(pair[0], pair[1])] = (words[0].casefold(), words[1].casefold())
        best = sorted((c for c in cands if c.first > 0), key=lambda c: (-c.first, c.id))[:PHRASE_OF]
        if not pairs or not best:
            return
        texts = dict(self._q_in("SELECT id, text FROM search_docs WHERE id IN ({})", [c.id for c in best]))
        for c in best:
            text = texts.get(c.id, "")
            folded = text.casefold()
            if not any(a in folded and b in folded for a, b in pairs.values()):
                continue
            tokens = engine.tokens(index_terms(text))
            found = pairs.keys() & set(itertools.pairwise(tokens))
            c.phrases = len(found) / len(pairs)

    def _with_context(self, scores: dict[int, float]) -> dict[int, float]:
        """``scores`` with each turn lifted by its neighbours' scores: a turn by the two before it
        (``prev``: a short answer is found through its question), by the two after it (``next``).

        Neighbours are turns of the same segment within ``CONTEXT_IDS`` ids of a candidate among
        the best ``CONTEXT_OF``; a neighbour that was no candidate joins with its lift alone.
        """
        p = self.params
        best = sorted(scores, key=lambda i: -scores[i])[:CONTEXT_OF]
        if not best or (p.prev <= 0 and p.next <= 0):
            return dict(scores)
        ids = sorted({j for i in best for j in range(i - CONTEXT_IDS, i + CONTEXT_IDS + 1) if j > 0})
        rows = self._q_in(
            "SELECT id, segment FROM search_docs WHERE id IN ({}) AND segment IS NOT NULL "
            "AND kind IN ('message', 'reply') ORDER BY id",
            ids,
        )
        segment_of = {int(r[0]): int(r[1]) for r in rows}
        turns = [int(r[0]) for r in rows]
        at = {doc_id: n for n, doc_id in enumerate(turns)}
        out = dict(scores)
        for i in best:
            n = at.get(i)
            if n is None:
                continue
            s, seg = scores[i], segment_of[i]
            for j in turns[n + 1 : n + 3]:  # i is in the ``prev`` context of the two turns after it
                if segment_of[j] == seg:
                    out[j] = out.get(j, 0.0) + p.prev * s
            for j in turns[max(0, n - 2) : n]:  # and in the ``next`` context of the two before it
                if segment_of[j] == seg:
                    out[j] = out.get(j, 0.0) + p.next * s
        return out

    def _load(self, scores: dict[int, float], first: dict[int, float], extra: dict[int, float]) -> list[_Cand]:
        ids = sorted(scores, key=lambda i: -scores[i])
        ids = ids[:CANDIDATES] if CANDIDATES > 0 else ids
        ids += [i for i in extra if i not in scores]
        if not ids:
            return []
        rows = self._q_in(
            "SELECT id, owner, kind, ts_us, sender, segment, seq, ref, title, work_item_id, words, question "
            "FROM search_docs WHERE id IN ({})",
            ids,
        )
        owners = set(self.owners)
        f = self.filters
        out = []
        for r in rows:
            c = _Cand(int(r[0]), scores.get(int(r[0]), 0.0), *r[1:])
            c.first = first.get(c.id, 0.0)
            # The engine filtered already; checked again here, for neighbours and dense candidates
            # (and because an agent must never see another's memory).
            if c.owner not in owners or (f.kinds and c.kind not in f.kinds):
                continue
            if (f.since_us is not None and c.ts_us < f.since_us) or (f.until_us is not None and c.ts_us > f.until_us):
                continue
            if f.work_item_id is not None and c.work_item_id != f.work_item_id:
                continue
            out.append(c)
        out.sort(key=lambda c: -c.score)
        return out

    def hits(self, ranked: list[_Cand], plan: QueryPlan) -> tuple[Hit, ...]:
        if not ranked:
            return ()
        marks = ",".join("?" * len(ranked))
        texts: dict[int, str] = dict(
            self._q(f"SELECT id, text FROM search_docs WHERE id IN ({marks})", [c.id for c in ranked])
        )
        return tuple(
            Hit(c.ref, c.kind, c.title, snippet(texts.get(c.id, ""), plan), c.score, c.ts_us, c.sender, c.seq)
            for c in ranked
        )


def _segment_scores(cands: list[_Cand]) -> dict[int, float]:
    """Each candidate segment's relevance as a whole: the sum of the engine scores of its turns
    among the engine's best ``SEGMENT_OF`` (a segment whose turns between them match more of the
    query scores higher)."""
    best = sorted((c for c in cands if c.first > 0), key=lambda c: (-c.first, c.id))[:SEGMENT_OF]
    out: dict[int, float] = {}
    for c in best:
        if c.segment is not None:
            out[c.segment] = out.get(c.segment, 0.0) + c.first
    return out


def _rerank(
    plan: QueryPlan, cands: list[_Cand], p: RankParams, dense: dict[int, float], newest: int | None = None
) -> list[_Cand]:
    """Re-rank the candidates. Every part is a function of the document and the query (the
    scale is the engine's best score, ages count from the index's newest document) except the
    segment sums, which see only the candidates' turns."""
    if not cands:
        return []
    top = max(c.first for c in cands) or max(c.score for c in cands) or 1.0
    segs = _segment_scores(cands)
    seg_top = max(segs.values(), default=0.0) or 1.0
    named = set(plan.terms)
    newest = max(c.ts_us for c in cands) if newest is None else newest
    kinds = dict(p.kind_weights)
    for c in cands:
        s = c.score
        if c.segment is not None and c.segment in segs:
            s += p.segment * top * segs[c.segment] / seg_top
        if c.sender and named & _name_words(c.sender):
            s += p.sender * top
        if plan.dates and _on_date(c.ts_us, plan.dates):
            s += p.date * top
        s += p.phrase * top * c.phrases
        if c.kind in ("message", "reply"):
            n = c.words
            s *= (min(n, p.short_words) / p.short_words) ** p.short_turn if n else 0.0
            if c.question:
                s *= 1 - p.question
        s *= kinds.get(c.kind, 1.0)
        age_days = (newest - c.ts_us) / 86_400e6
        s *= 1 + p.recency * math.pow(0.5, age_days / p.recency_half_life_days)
        c.score = s
    if dense:
        lex_top = max(c.score for c in cands) or 1.0
        dense_top = max(dense.values()) or 1.0
        for c in cands:
            c.score = c.score / lex_top + p.dense * max(0.0, dense.get(c.id, 0.0)) / dense_top
    return sorted(cands, key=lambda c: (-c.score, -c.id))


@functools.lru_cache(maxsize=4096)
def _name_words(sender: str) -> frozenset[str]:
    return frozenset(w.lower() for w in WORDS.findall(sender))


def _on_date(ts_us: int, dates: tuple[tuple[int, int, int | None], ...]) -> bool:
    d = utc(ts_us).date()
    for y, m, day in dates:
        if day is None:
            if d.year == y and d.month == m:
                return True
        elif abs((d - dt.date(y, m, day)).days) <= 1:
            return True
    return False


def snippet(text: str, plan: QueryPlan, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around where most query terms occur."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    stems = {stem(t) for t in plan.terms}
    positions = [m.start() for m in WORDS.finditer(text[:50_000]) if stem(m.group(0).lower()) in stems]
    for term in plan.terms:  # unsegmented scripts: match by substring
        if not term.isascii():
            at = text.find(term)
            if at >= 0:
                positions.append(at)
    if not positions:
        return text[: width - 1] + "…"
    positions.sort()
    best, best_n = positions[0], 0
    j = 0
    for i, start in enumerate(positions):
        while positions[j] < start - width // 2:
            j += 1
        if i - j + 1 > best_n:
            best, best_n = positions[j], i - j + 1
    lo = max(0, best - width // 4)
    hi = min(len(text), lo + width)
    lo = max(0, hi - width)
    return ("…" if lo > 0 else "") + text[lo:hi].strip() + ("…" if hi < len(text) else "")
