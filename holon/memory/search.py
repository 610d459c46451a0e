"""MemorySearch: ranked retrieval over an agent's own index documents and the scopes shared with it.

Ranking, in two stages (each part measured on LoCoMo with ``holon bench locomo``; RFC 0004):

1. **The engine** (``holon.memory.engine``, tantivy) returns the exact top ``CANDIDATES`` by its
   score, ``BASE`` + BM25 over the document's terms (for a conversation turn, with those of the
   two turns before it in its segment: a short answer such as "Thanks! It was Matt Patterson" is
   found through the question that preceded it) and its metadata (sender, kind, date words;
   weight ``meta``), among the owners' documents that pass the filters; how many documents match
   (exact); and, from its fast fields, what re-ranking needs of each (prior features, time,
   segment, the two turns before it). SQLite is read only for the lifts below that need a
   document's sender or text, and only for the candidates they could bring into the first
   ``limit``, and last for the hits' text.
2. **Re-ranking** of those candidates in Python:
   * **neighbouring turns**: a turn is lifted by the engine scores of the two turns after it
     among the best ``CONTEXT_OF`` (weight ``next``), and such a neighbour joins the candidates
     even if it matched nothing itself;
   * **phrases**: among the best ``PHRASE_OF``, a document whose own text holds the query's
     adjacent word pairs adjacent is lifted (weight ``phrase``; the engine keeps no positions);
   * **segment relevance**: the sum of the scores of a segment's turns among the best
     ``SEGMENT_OF`` lifts its turns (over the best segment's sum), so a question about one
     evening's talk prefers that evening;
   * **sender**: a turn spoken by someone the query names is lifted a little;
   * **dates**: a query naming a calendar date or month lifts documents from that day or month;
   * **priors** (``holon.memory.prior``): turns too short to carry information, and bare
     questions, are lowered; kinds have small weights; newer documents get a small recency lift.
   Lifts are added in units of the engine's best score, then the sum is multiplied by the prior
   and recency.

Every part is a function of the query, the document and the index ("the best N" are the engine's
best N by score, ties by id), so the ranking applied to every match (``CANDIDATES = 0``) is the
exact reference ``holon bench search`` compares with. The first stage is exact; the second sees
the engine's top ``CANDIDATES`` and their neighbours, and a document beyond them can still win
when the lifts (added in units of the best score) outweigh the scores' spread: a search
**certifies** its first ``limit`` (``SearchResult.exhaustive``) when the ``limit``-th score is
above a bound on any document left out, and a certified result equals the exhaustive ranking
(``tests/test_search_exact.py``). A document's segment lift is known before it is read, so the
bound is split (``_Ranker._widen``): documents in no lifted segment must stay below the
``limit``-th score, and the matching turns of the few segments whose lift could carry one past it
are read from the engine and ranked too. Deepening the whole top-k until every search is
certified was measured and not kept (RFC 0004, "Exact top 10").
"""

from __future__ import annotations

import dataclasses
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
from holon.memory.prior import KIND_CODES, RankParams, prior_of
from holon.memory.text import WORDS, QueryPlan, engine_term, index_terms, plan_query, stem
from holon.memory.vectors import Embedder, dense_scores, embed_pending

__all__ = ["KINDS", "Hit", "RankParams", "SearchFilters", "SearchResult", "search"]

#: Document kinds a search can be narrowed to.
KINDS = ("message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file")

#: The engine's exact top-k re-ranked in Python: its best ``CANDIDATES - 1`` (at least
#: ``SEGMENT_OF`` and the limit) and every match tied with the last of them (``_Ranker._cut``).
#: 0: every match (the exact reference of ``holon bench search``).
CANDIDATES = 201
#: The engine's best matches whose two turns before them are lifted (by ``next``) ...
CONTEXT_OF = 50
#: ... whose text is checked for the query's adjacent word pairs ...
PHRASE_OF = 50
#: ... and whose matches make up their segments' relevance.
SEGMENT_OF = 200
#: The first depth at which a lifted segment's other turns are read (``_Ranker._widen``; x4 after).
WIDEN_FIRST = 64
#: Hits read beyond the candidates to see a tie at their cut end (equal-length turns with one
#: common word score alike: which of them are the best ``SEGMENT_OF`` is decided by id, so the
#: whole tie must be read to certify a search) ...
TIE_SLACK = 64
#: ... and how many times the top-k is deepened (x4) while a tie is longer.
TIE_ROUNDS = 2
_IN_CHUNK = 30_000
#: At most this many other owners are excluded from a search rather than its own intersected.
OTHERS_EXCLUDED = 16
_DEFAULT = RankParams()
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
    """The hits are certified to be the exact first ``limit`` of the ranking applied to every
    match (no document beyond the engine's top-k can outrank them); false when one might."""
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
    """Prior x recency x the engine's best score: what one unit of lift adds."""
    known: float
    """Prior x recency x (score + ``next`` x the scores of the two turns after it among the best
    ``CONTEXT_OF`` + the lifts known from the engine alone: segment, date)."""
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
    top: float
    """The engine's best score (the unit of the lifts)."""


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
    ranked, total, certified = ranker.run(dense)
    hits = ranker.hits(ranked[:limit])
    return SearchResult(query[:200], plan.terms, hits, max(total, len(ranked)), True, certified, freshness)


class _Ranker:
    """One search's ranking: the engine's top-k re-ranked, certified exact when nothing it left
    out can reach the first ``limit``."""

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
        # Superseded versions (RFC 0008, "Identical ranking on every node"), read before the searcher
        # opens: SQLite commits after the engine, so the searcher holds every version they name.
        self.hidden = index.hidden(owners)
        self.searcher = self.engine.searcher()  # one per search: every engine query sees one commit
        self.terms = self.engine.analyze(engine_term(t) for t in plan.terms)
        self.pairs = self._pairs() if params.phrase > 0 else {}
        self.named = params.sender > 0 and self._may_name_a_sender()
        self.others: list[str] | None = None
        self.others_read = False
        self.newest: int | None = None
        self.scale = 1.0
        self.seg_lift: dict[int, float] = {}

    def _q(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self.index.db.query(sql, list(params))

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
        """Whether a query word is among some document's sender words (the engine's ``sender``
        field, stemmed: a superset of the exact words the lift compares): if not, no sender can be
        named and the sender lift is known to be 0 everywhere (a weekday in a query, which every
        document's ``meta`` may hold, no longer counts)."""
        return any(self.engine.doc_freq(t, field="sender", searcher=self.searcher) > 0 for t in self.terms)

    def _fetch(self, limit: int, *, count: bool) -> tuple[Matches, int]:
        p = self.params
        return self.engine.matches(
            self.terms,
            owners=self.owners,
            filters=self.filters,
            weights=(p.body, p.meta),
            limit=limit,
            count=count,
            searcher=self.searcher,
            others=self._others(),
            hidden=self.hidden,
        )

    def _others(self) -> list[str] | None:
        """The other owners with documents, when the searcher's own hold most of the index and
        they are few: the engine then excludes them rather than intersecting with its own (the
        same documents; the hits are checked against SQLite's owners again)."""
        if not self.others_read:
            self.others_read = True
            counts = self.index.owner_docs()
            mine = sum(n for o, n in counts.items() if o in self.owners and n > 0)
            others = [o for o, n in counts.items() if o not in self.owners and n > 0]
            if len(others) <= OTHERS_EXCLUDED and sum(counts[o] for o in others) <= mine:
                self.others = others
        return self.others

    def run(self, dense: dict[int, float]) -> tuple[list[_Cand], int, bool]:
        """The candidates that can reach the first ``limit``, best first; how many documents match
        (plus the neighbours that joined without matching); and whether the first ``limit`` are
        certified exact."""
        sets = max(SEGMENT_OF, CONTEXT_OF, PHRASE_OF)
        left: float | None = None  # the best score of a match left out (None: every match is here)
        if CANDIDATES <= 0:  # every match (the bench's exact reference)
            _, total = self._fetch(1, count=True)
            k = max(total, 1)
            matches, _ = self._fetch(k, count=False)
        else:
            k = max(CANDIDATES, sets + 1, self.limit + 1)
            matches, total, left = self._cut(k, dense)
        scores = matches.scores
        scored = self._rank(matches, dense)
        floor = self._floor(scored)
        # Certified: nothing was left out, or the best SEGMENT_OF/CONTEXT_OF/PHRASE_OF are settled
        # (no tie across the cut) and no document left out can reach the limit-th score (the turns
        # of lifted segments that could are read: ``_widen``).
        certified = left is None or (
            not dense
            and (len(scores) <= sets or left < sorted(scores, reverse=True)[sets - 1])
            and self._widen(left, scored, floor)
        )
        floor = self._floor(scored)
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
        return cands, total + scored.joined, certified

    def _cut(self, k: int, dense: dict[int, float]) -> tuple[Matches, int, float | None]:
        """The engine's best ``k - 1`` and every match tied with the last of them (which of a tie
        are "the best N" is decided by id, so a tie across a cut must be read whole to certify a
        search), how many match, and the best score left out (None: every match is here).

        One query for ``k + TIE_SLACK`` hits settles most ties (only the fast fields of those kept
        are read); a longer tie deepens the top-k (x4, ``TIE_ROUNDS`` times), and one longer still
        is cut at ``k`` hits by id (the engine reads the tie whole to cut it: ``Engine.matches``),
        the search then not certified."""
        p = self.params
        q = {"owners": self.owners, "filters": self.filters, "weights": (p.body, p.meta), "searcher": self.searcher,
             "others": self._others(), "hidden": self.hidden}  # fmt: skip
        limit = k + (0 if dense else TIE_SLACK)
        m, total, left, cut = self.engine.matches_cut(self.terms, limit=limit, keep=k - 1, count=True, **q)
        if len(m) < limit or left is not None:
            return m, total, left
        for _ in range(TIE_ROUNDS):
            limit *= 4
            m, _, left, _ = self.engine.matches_cut(self.terms, limit=limit, at_least=cut, **q)
            if len(m) < limit or left is not None:
                return m, total, left
        m, total = self._fetch(k, count=True)
        return m, total, min(m.scores)

    def _floor(self, scored: _Scored) -> float:
        """The ``limit``-th score known so far: a lower bound of the ``limit``-th final score."""
        best = heapq.nlargest(self.limit, scored.known)
        return best[-1] if len(best) == self.limit else -1.0

    def _widen(self, kth: float, scored: _Scored, floor: float) -> bool:
        """Whether no document the engine left out can reach ``floor``, after reading those that could.

        A document left out scored at most ``kth`` (the engine's k-th); it is no neighbour of the
        best ``CONTEXT_OF`` (they were all read) nor among the best ``PHRASE_OF``; a date and a
        sender can lift it by their weights in units of the best score, and its segment by exactly
        that segment's lift (known for every segment: the best ``SEGMENT_OF`` decide it, and a
        segment none of them is in gets none); its prior and recency multiply that by at most
        theirs. For a document of a kind weighted at most 1 (turns, tool output) outside the lifted
        segments that bound must stay below ``floor`` (else: not certified). The matches of the
        kinds weighted above 1 that are in the index (files, episodes, decisions: few), and the
        turns of each lifted segment whose bound reaches ``floor`` (every document in a segment is
        a turn), are read from the engine (best first, deeper until the rest cannot reach it) and
        scored like the others."""
        p = self.params
        top, rec, slack = self.scale, 1 + p.recency, 1 + 1e-9
        extra = (p.date if self.plan.dates else 0.0) + (p.sender if self.named else 0.0)
        weights = dict(p.kind_weights)
        allowed = self.filters.kinds or KIND_CODES
        light = max((weights.get(k, 1.0) for k in allowed if weights.get(k, 1.0) <= 1.0), default=0.0)
        if floor <= rec * light * (kth + top * extra) * slack:
            return False
        present = set(scored.ids)
        heavy = tuple(k for k in allowed if weights.get(k, 1.0) > 1.0
                      and self.engine.doc_freq(k, field="kind", searcher=self.searcher) > 0)  # fmt: skip
        if heavy:  # files, episodes, decisions: few; their matches that could reach floor are read
            turns = any(k in ("message", "reply") for k in heavy)
            lift = extra + (max(self.seg_lift.values(), default=0.0) if turns else 0.0)
            most = rec * max(weights[k] for k in heavy) * slack
            if most * (kth + top * lift) >= floor:
                self._read_more(dataclasses.replace(self.filters, kinds=heavy), most, lift, scored, present, floor)
        turn = rec * max(weights.get(k, 1.0) for k in ("message", "reply")) * slack
        need = {g: v for g, v in self.seg_lift.items() if turn * (kth + top * (v + extra)) >= floor}
        if need:
            filters = dataclasses.replace(self.filters, segments=tuple(sorted(need)))
            self._read_more(filters, turn, max(need.values()) + extra, scored, present, floor)
        return True

    def _read_more(
        self, filters: Filters, most: float, lift: float, scored: _Scored, present: set[int], floor: float
    ) -> None:  # fmt: skip
        """Read the matches passing ``filters`` best first, deeper (x4) until one scoring at most
        ``most`` x (its score + ``lift`` x the best score) cannot reach ``floor``, and score those not
        ``present`` into ``scored``."""
        n = WIDEN_FIRST
        while True:
            m, _ = self.engine.matches(
                self.terms, owners=self.owners, filters=filters, weights=(self.params.body, self.params.meta),
                limit=n, count=False, searcher=self.searcher, others=self._others(), hidden=self.hidden,
            )  # fmt: skip
            new = [i for i, doc_id in enumerate(m.ids) if doc_id not in present]
            present.update(m.ids[i] for i in new)
            self._score_into(scored, [m.ids[i] for i in new], [m.scores[i] for i in new],
                             [m.features[i] for i in new], [m.ts_us[i] for i in new],
                             [m.segments[i] for i in new], {}, set())  # fmt: skip
            if len(m) < n or most * (m.scores[-1] + self.scale * lift) < floor:
                return
            n *= 4

    def _rank(self, m: Matches, dense: dict[int, float]) -> _Scored:
        p = self.params
        n = len(m)
        ids, match = list(m.ids), list(m.scores)
        order = sorted(range(n), key=lambda i: (-match[i], ids[i]))
        top = match[order[0]] if n else 0.0
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
                                     weights=(p.body, p.meta), searcher=self.searcher, hidden=self.hidden)  # fmt: skip
            ids += more.ids
            match += more.scores
            features += more.features
            ts += more.ts_us
            segs += more.segments
            joined = sum(1 for s in more.scores if s == 0)
        self.scale = top or max(match, default=0.0) or 1.0
        seg_top = max(segments.values(), default=0.0) or 1.0
        self.seg_lift = {g: p.segment * v / seg_top for g, v in segments.items()}
        scored = _Scored([], [], [], [], phrase, joined, top)
        self._score_into(scored, ids, match, features, ts, segs, lift, phrase)
        return scored

    def _score_into(
        self, scored: _Scored, ids: list[int], match: list[float], features: list[int], ts: list[int],
        segs: list[int], lift: dict[int, float], phrase: set[int],
    ) -> None:  # fmt: skip
        """Append these documents' columns (``_Cand``'s ``base``, ``known`` and ``unknown``) to ``scored``:
        ``lift`` holds the scores of the turns after a turn (``next``), ``phrase`` the ids checked for
        phrases."""
        p = self.params
        if self.newest is None:
            self.newest = self._newest()
        newest, scale, seg_lift = self.newest, self.scale, self.seg_lift
        recency, decay = p.recency, -math.log(2) / (p.recency_half_life_days * 86_400e6)
        priors = _prior_table(p)
        dates, date_lift, nxt = self.plan.dates, p.date, p.next
        unknown_lift = p.sender if self.named else 0.0
        with_phrase = unknown_lift + p.phrase
        base, known, unknown = scored.base, scored.known, scored.unknown
        exp, lifted = math.exp, lift.get
        for doc_id, mt, feat, t, g in zip(ids, match, features, ts, segs, strict=True):
            pr = priors.get(feat)
            if pr is None:
                pr = priors[feat] = prior_of(feat, p)
            pr *= 1 + recency * exp((newest - t) * decay)  # halves every half-life
            lifts = seg_lift.get(g, 0.0)
            if dates and _on_date(t, dates):
                lifts += date_lift
            unit = pr * scale
            base.append(unit)
            known.append(pr * (mt + nxt * lifted(doc_id, 0.0) + scale * lifts))
            unknown.append(unit * (with_phrase if doc_id in phrase else unknown_lift))
        scored.ids += ids

    def _resolve(self, cands: list[_Cand], floor: float) -> None:
        """Read the sender and phrase lifts (SQLite) of the candidates that could reach the first
        ``limit`` with them: the others stay below ``floor`` whatever they are. Senders first
        (cheap), then phrases best-first, stopping when no text left can change the first
        ``limit`` (analysing a text is the costly part)."""
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
            sender = rows.get(c.id, ("", ""))[0]
            if self.named and sender and named & _name_words(sender):
                c.final = c.known + c.base * p.sender
        if not phrases:
            return
        texts = [c for c in need if c.phrase]
        texts.sort(key=lambda c: (-(c.final + c.base * p.phrase), c.id))  # ties by id, never by engine order
        finals = heapq.nlargest(self.limit, (c.final for c in cands))
        for c in texts:
            if len(finals) == self.limit and c.final + c.base * p.phrase < finals[-1]:
                break  # neither this text nor any after it can reach the first limit
            share = self._phrase_share(rows.get(c.id, ("", ""))[1])
            if share:
                c.final += c.base * p.phrase * share
                finals = heapq.nlargest(self.limit, (x.final for x in cands))

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
