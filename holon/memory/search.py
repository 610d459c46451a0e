"""MemorySearch: ranked retrieval over an agent's own index documents and the scopes shared with it.

The ranking is one function of the query and the index (RFC 0004, "Ranking", "Exact top 10"),
each part measured on LoCoMo with ``holon bench locomo``. For a document d matching the query:

* **match**: ``BASE`` + BM25 over d's terms (for a conversation turn, with those of the two turns
  before it in its segment: a short answer such as "Thanks! It was Matt Patterson" is found
  through the question that preceded it) and its metadata (sender, kind, date words; weight
  ``meta``), among the owners' documents that pass the filters (``holon.memory.engine``);
* **neighbouring turns**: plus ``next`` times the matches of the two turns after d, when they are
  among the best ``CONTEXT_OF`` (by the engine's score below); such a turn is a candidate even if
  it matched nothing itself;
* **prior** (``holon.memory.prior``): times d's kind weight, and for a turn its short-turn and
  bare-question factors; and times its **recency** (+5 % halving every 30 days from the index's
  newest document);
* **lifts**, times ``1 +`` their sum: **segment** (the sum of the matches of d's segment's turns
  among the best ``SEGMENT_OF``, over the best segment's), **date** (the query names d's day or
  month), **sender** (the query names d's sender), **phrase** (among the best ``PHRASE_OF``, the
  share of the query's adjacent word pairs adjacent in d's own text).

"The best N" are the best N by the engine's score, match times prior (ties by id), which is what
the engine ranks by (the prior is stored per document: ``weight_by_field``). So every part is a
function of the document, the query and the index, and the first ``limit`` are exact: the
engine's top ``CANDIDATES`` are ranked, and since a document the engine did not return scores at
most its k-th score times the largest prior ratio, recency and lifts (``_Ranker._bound``), the
top-k is deepened (x4) until the ``limit``-th score is above that bound. Sender and phrase lifts
need SQLite and are read only for the candidates they could bring into the first ``limit``; the
hits' text is read last, for the ``limit`` shown. ``CANDIDATES = 0`` ranks every match the same
way: ``holon bench search``'s exact reference, equal by construction
(``tests/test_search_exact.py`` checks it on random indexes).
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from holon.clock import format_us, utc
from holon.memory.engine import Filters, Matches
from holon.memory.index import Freshness, SearchIndex
from holon.memory.prior import RankParams, max_prior_ratio, prior_of
from holon.memory.text import WORDS, QueryPlan, engine_term, index_terms, plan_query, stem
from holon.memory.vectors import Embedder, dense_scores, embed_pending

__all__ = ["KINDS", "Hit", "RankParams", "SearchFilters", "SearchResult", "search"]

#: Document kinds a search can be narrowed to.
KINDS = ("message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file")

#: The engine's top-k a search starts from (deepened x4 while the bound is not met; at least one
#: more than ``SEGMENT_OF`` and ``limit``). 0: every match (what ``holon bench search`` compares against).
CANDIDATES = 256
#: The engine's best matches whose two turns before them are lifted (by ``next``) ...
CONTEXT_OF = 50
#: ... whose text is checked for the query's adjacent word pairs ...
PHRASE_OF = 50
#: ... and whose matches make up their segments' relevance.
SEGMENT_OF = 200
_IN_CHUNK = 30_000
_DEFAULT = RankParams()
_EXP = __import__('os').environ.get('HOLON_EXP', '')
SNIPPET_CHARS = 240
#: Documents a search embeds before it runs, at most (the rest wait for later searches or the
#: daemon's background pass): a search never stalls on a large backlog.
EMBED_PER_SEARCH = 256


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
    """A candidate that can reach the first ``limit``."""

    id: int
    base: float
    """Prior x recency x (match + ``next`` x the matches of the two turns after it among the best
    ``CONTEXT_OF``), where match is ``BASE`` + BM25 (``holon.memory.engine``): the score before
    the query's lifts."""
    known: float
    """With the lifts known from the engine alone (segment, date)."""
    unknown: float
    """The most the lifts read from SQLite (sender, phrase) can add."""
    phrase: bool
    """Among the best ``PHRASE_OF``: its text is checked for the query's adjacent word pairs."""
    final: float = 0.0


@dataclass(slots=True)
class _Scored:
    """Every candidate of one round, column by column."""

    ids: list[int]
    base: list[float]
    known: list[float]
    unknown: list[float]
    phrase: set[int]
    joined: int


def search(
    index: SearchIndex,
    owners: Sequence[str],
    query: str,
    *,
    filters: SearchFilters = SearchFilters(),
    limit: int = 10,
    params: RankParams = _DEFAULT,
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
    if params.prev != 0:
        raise ValueError("RankParams.prev: only 0 is supported (the turns before a turn are indexed with it)")
    ranker = _Ranker(index, list(dict.fromkeys(owners)), filters, params, plan, limit)
    dense: dict[int, float] = {}
    if embedder is not None:
        embed_pending(index, embedder, limit=EMBED_PER_SEARCH)
        dense = dense_scores(index, embedder, ranker.owners, query)
    ranked, total = ranker.run(dense)
    hits = ranker.hits(ranked[:limit])
    return SearchResult(query[:200], plan.terms, hits, max(total, len(ranked)), True, True, freshness)


class _Ranker:
    """One search's ranking: the engine's top-k, deepened until nothing it left out can win."""

    def __init__(
        self, index: SearchIndex, owners: list[str], filters: SearchFilters, params: RankParams, plan: QueryPlan,
        limit: int,
    ) -> None:  # fmt: skip
        self.index = index
        self.engine = index.engine
        self.owners = owners
        self.filters = Filters(filters.kinds, filters.since_us, filters.until_us, filters.work_item_id)
        self.params = params
        self.plan = plan
        self.limit = limit
        self.searcher = self.engine.searcher()  # one reload per search (about 0.1 ms each)
        self.terms = self.engine.analyze(engine_term(t) for t in plan.terms)
        self.pairs = self._pairs() if params.phrase > 0 else {}
        self.named = params.sender > 0 and self._may_name_a_sender()
        self.rounds = 0

    def _q(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self.index.store.ledger.query(sql, list(params))

    def _q_in(self, sql: str, ids: Sequence[int]) -> list[tuple[Any, ...]]:
        """``sql`` with its ``{}`` filled by ``ids`` as parameters, in chunks SQLite accepts."""
        out: list[tuple[Any, ...]] = []
        for at in range(0, len(ids), _IN_CHUNK):
            chunk = ids[at : at + _IN_CHUNK]
            out += self._q(sql.format(",".join("?" * len(chunk))), chunk)
        return out

    def _pairs(self) -> dict[tuple[str, str], tuple[str, str]]:
        """The query's adjacent word pairs: as the engine analyses them, and as written."""
        pairs: dict[tuple[str, str], tuple[str, str]] = {}
        for ph in self.plan.phrases:
            words = ph.split()
            pair = self.engine.analyze(engine_term(w) for w in words)
            if len(words) == 2 and len(pair) == 2:
                pairs[(pair[0], pair[1])] = (words[0].casefold(), words[1].casefold())
        return pairs

    def _may_name_a_sender(self) -> bool:
        """Whether a query word is in some document's ``meta`` (sender, kind and date words): if not,
        no sender can be named and the sender lift is known to be 0 everywhere."""
        return any(self.engine.doc_freq(t, field="meta", searcher=self.searcher) > 0 for t in self.terms)

    def _fetch(self, limit: int, *, count: bool) -> tuple[Matches, int]:
        p = self.params
        return self.engine.matches(
            self.terms, owners=self.owners, filters=self.filters, weights=(p.body, p.meta), limit=limit, count=count,
            searcher=self.searcher,
        )

    def run(self, dense: dict[int, float]) -> tuple[list[_Cand], int]:
        """The candidates that can reach the first ``limit``, best first (the first ``limit`` exact),
        and how many documents match (plus the neighbours that joined without matching)."""
        sets = max(SEGMENT_OF, CONTEXT_OF, PHRASE_OF)
        if CANDIDATES <= 0:  # every match (the bench's exact reference)
            _, total = self._fetch(1, count=True)
            k = max(total, 1)
            matches, _ = self._fetch(k, count=False)
        else:
            k = max(CANDIDATES, sets + 1, self.limit + 1)
            matches, total = self._fetch(k, count=True)
        while True:
            self.rounds += 1
            complete = len(matches) < k
            scores = matches.scores
            # The best SEGMENT_OF/CONTEXT_OF/PHRASE_OF must be settled: no tie across the cut.
            if complete or len(scores) <= sets or min(scores) < sorted(scores, reverse=True)[sets - 1]:
                scored = self._rank(matches, dense)
                best = heapq.nlargest(self.limit, scored.known)
                floor = best[-1] if len(best) == self.limit else -1.0
                if complete or dense or floor > self._bound(min(scores)):
                    break
            k *= 4
            matches, _ = self._fetch(k, count=False)
        cands = [
            _Cand(i, base, known, unknown, i in scored.phrase, known)
            for i, base, known, unknown in zip(scored.ids, scored.base, scored.known, scored.unknown, strict=True)
            if dense or known + unknown >= floor
        ]
        self._resolve(cands, floor)
        if dense:
            lex_top = max((c.final for c in cands), default=0.0) or 1.0
            dense_top = max(dense.values()) or 1.0
            for c in cands:
                c.final = c.final / lex_top + self.params.dense * max(0.0, dense.get(c.id, 0.0)) / dense_top
        cands.sort(key=lambda c: (-c.final, -c.id))
        return cands, total + scored.joined

    def _bound(self, kth: float) -> float:
        """The most a document the engine did not return can score: its match times its prior is at
        most ``kth`` (the engine's k-th score) times ``max_prior_ratio``; it is no neighbour of the
        best ``CONTEXT_OF`` (they were all read) nor among the best ``PHRASE_OF``; recency, its
        segment, a date and a sender lift it at most by their weights. (The margin covers tantivy
        multiplying by its weight in single precision.)"""
        p = self.params
        lifts = p.segment + (p.date if self.plan.dates else 0.0) + (p.sender if self.named else 0.0)
        return (1 + p.recency) * max_prior_ratio(p) * kth * (1 + lifts) * (1 + 1e-5)

    def _rank(self, m: Matches, dense: dict[int, float]) -> _Scored:
        p = self.params
        n = len(m)
        ids, scores, weights = list(m.ids), m.scores, m.weights
        match = [s / w for s, w in zip(scores, weights, strict=True)]
        order = sorted(range(n), key=lambda i: (-scores[i], ids[i]))
        if "order_e" in _EXP:
            order = sorted(range(n), key=lambda i: (-match[i], ids[i]))
        top = max(match, default=1.0) or 1.0
        lift: dict[int, float] = {}
        if p.next > 0:
            for i in order[:CONTEXT_OF]:
                for before in (m.before[i], m.before2[i]):
                    if before:
                        lift[before] = lift.get(before, 0.0) + match[i]
        segments: dict[int, float] = {}
        for i in order[:SEGMENT_OF]:
            if m.segments[i]:
                segments[m.segments[i]] = segments.get(m.segments[i], 0.0) + match[i]
        phrase = {ids[i] for i in order[:PHRASE_OF]} if self.pairs else set()
        features, ts, segs = list(m.features), list(m.ts_us), list(m.segments)
        present = set(ids)
        missing = [i for i in lift if i not in present] + [i for i in dense if i not in present and i not in lift]
        joined = 0
        if missing:  # neighbours and dense candidates the top-k did not hold: filtered and scored alike
            more = self.engine.score(missing, self.terms, owners=self.owners, filters=self.filters,
                                     weights=(p.body, p.meta), searcher=self.searcher)  # fmt: skip
            ids += more.ids
            match += [s / w for s, w in zip(more.scores, more.weights, strict=True)]
            features += more.features
            ts += more.ts_us
            segs += more.segments
            joined = sum(1 for s in more.scores if s == 0)
        seg_top = max(segments.values(), default=0.0) or 1.0
        seg_lift = {g: p.segment * v / seg_top for g, v in segments.items()}
        newest = self._newest()
        recency, half_life = p.recency, p.recency_half_life_days * 86_400e6
        priors = _prior_table(p)
        dates, date_lift, nxt = self.plan.dates, p.date, p.next
        sender = p.sender if self.named else 0.0
        base, known, unknown = [], [], []
        for doc_id, mt, feat, t, g in zip(ids, match, features, ts, segs, strict=True):
            pr = priors.get(feat)
            if pr is None:
                pr = priors[feat] = prior_of(feat, p)
            b = pr * (1 + recency * math.pow(0.5, (newest - t) / half_life)) * (mt + nxt * lift.get(doc_id, 0.0))
            lifts = seg_lift.get(g, 0.0) if g else 0.0
            if dates and _on_date(t, dates):
                lifts += date_lift
            if "add" in _EXP:
                pr_r = pr * (1 + recency * math.pow(0.5, (newest - t) / half_life)) * top
                base.append(pr_r)
                known.append(b + pr_r * lifts)
                unknown.append(pr_r * (sender + (p.phrase if doc_id in phrase else 0.0)))
                continue
            base.append(b)
            known.append(b * (1 + lifts))
            unknown.append(b * (sender + (p.phrase if doc_id in phrase else 0.0)))
        return _Scored(ids, base, known, unknown, phrase, joined)

    def _resolve(self, cands: list[_Cand], floor: float) -> None:
        """Read the sender and phrase lifts (SQLite) of the candidates that could reach the first
        ``limit`` with them: the others stay below ``floor`` whatever they are."""
        need = [c for c in cands if c.unknown > 0 and c.known + c.unknown >= floor]
        if not need:
            return
        p = self.params
        phrases = p.phrase > 0 and bool(self.pairs)
        cols = "id, sender, text" if phrases else "id, sender, ''"
        rows = {int(r[0]): (str(r[1]), str(r[2])) for r in self._q_in(f"SELECT {cols} FROM search_docs WHERE id IN ({{}})",
                                                                     [c.id for c in need])}  # fmt: skip
        named = set(self.plan.terms)
        for c in need:
            sender, text = rows.get(c.id, ("", ""))
            extra = 0.0
            if self.named and sender and named & _name_words(sender):
                extra += p.sender
            if phrases and text and c.phrase:
                extra += p.phrase * self._phrase_share(text)
            c.final = c.known + c.base * extra

    def _phrase_share(self, text: str) -> float:
        """The share of the query's adjacent word pairs found adjacent in ``text`` (the engine keeps
        no positions: RFC 0004, "Engine"). Only a text holding both words of a pair as written (any
        case) is analysed."""
        folded = text.casefold()
        if not any(a in folded and b in folded for a, b in self.pairs.values()):
            return 0.0
        tokens = self.engine.tokens(index_terms(text))
        return len(self.pairs.keys() & set(itertools.pairwise(tokens))) / len(self.pairs)

    def _newest(self) -> int:
        """The time of the index's newest document (recency counts from it)."""
        row = self._q("SELECT max(ts_us) FROM search_docs", ())
        return int(row[0][0]) if row and row[0][0] is not None else 0

    def hits(self, ranked: list[_Cand]) -> tuple[Hit, ...]:
        if not ranked:
            return ()
        rows = {
            int(r[0]): r
            for r in self._q_in(
                "SELECT id, owner, ref, kind, title, text, ts_us, sender, seq FROM search_docs WHERE id IN ({})",
                [c.id for c in ranked],
            )
        }
        owners = set(self.owners)
        out = []
        for c in ranked:
            r = rows.get(c.id)
            if r is None or r[1] not in owners:  # the engine filtered already; an agent never sees another's
                continue
            out.append(Hit(r[2], r[3], r[4], snippet(r[5], self.plan), c.final, int(r[6]), r[7], r[8]))
        return tuple(out)


@functools.lru_cache(maxsize=64)
def _prior_table(p: RankParams) -> dict[int, float]:
    """Priors by packed features under ``p``, filled as met (a few hundred distinct values)."""
    return {}


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
