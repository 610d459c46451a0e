"""MemorySearch: ranked retrieval over an agent's own index documents and the scopes shared with it.

Ranking (each part measured on LoCoMo with ``holon bench locomo``; see RFC 0004 for the numbers):

1. **BM25F over columns**: the document's own text, the two turns before it, the two after it, and
   its metadata (sender, kind, date words), with different weights. A short answer ("Thanks! It
   was Matt Patterson") is found through the question that preceded it.
2. **Phrases**: adjacent query words that also appear adjacent in a document add to its score.
3. **Segment relevance**: the conversation segment a turn belongs to is scored as a whole and
   lifts its turns, so a question about one evening's talk prefers that evening.
4. **Sender**: a turn spoken by someone the query names is lifted a little.
5. **Dates**: a query naming a calendar date or month lifts documents from that day or month.
6. **Priors**: turns too short to carry information, and bare questions, are lowered; kinds have
   small weights (curated files and episodes above raw tool output); newer documents get a small
   recency lift.

Large indexes. FTS5 scores every document that matches any term, about 3 µs each, so one common
word in a million documents costs hundreds of milliseconds. The planner (``_candidates``)
therefore probes how many documents each term matches (stopping at ``RARE_DOCS``). When every term
is rare, or the index is small, one exact query ranks all matches. Otherwise it ranks (a) every
document matching the rare terms, across all history, and (b) the newest ``BOUNDED_DOCS``
documents matching any term. Old documents that match only common words are the ones left out;
they are also the weakest matches. ``SearchResult.exhaustive`` says which mode ran.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from holon.clock import format_us, utc
from holon.memory.index import Freshness, SearchIndex, kind_token, owner_token
from holon.memory.text import WORDS, QueryPlan, plan_query, stem
from holon.memory.text import quote as _quote
from holon.memory.vectors import Embedder, dense_scores, embed_pending

__all__ = ["KINDS", "Hit", "RankParams", "SearchFilters", "SearchResult", "search"]

#: Document kinds a search can be narrowed to.
KINDS = ("message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file")

#: A term matching at most this many documents is rare: all its matches are ranked.
RARE_DOCS = 3_000
#: An index with at most this many documents is always ranked exactly.
SMALL_INDEX = 10_000
#: In bounded mode, how many of the newest documents matching any term are ranked.
BOUNDED_DOCS = 2_000
#: Candidates re-ranked in Python.
CANDIDATES = 300
#: Matches are counted exactly up to this many; beyond, the count is a lower bound.
COUNT_CAP = 1_000
SNIPPET_CHARS = 240
#: Documents a search embeds before it runs, at most (the rest wait for later searches or the
#: daemon's background pass): a search never stalls on a large backlog.
EMBED_PER_SEARCH = 256


@dataclass(frozen=True, slots=True)
class RankParams:
    """Ranking weights. Defaults are what LoCoMo measurement chose; see RFC 0004."""

    body: float = 1.0
    prev: float = 0.5
    next: float = 0.2
    meta: float = 0.3
    segment: float = 0.3
    sender: float = 0.2
    date: float = 0.3
    short_turn: float = 0.3
    short_words: int = 30
    question: float = 0.2
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
    """Documents matching at least one query term (within scope and filters)."""
    total_exact: bool
    """False when ``total`` reached ``COUNT_CAP`` and is a lower bound."""
    exhaustive: bool
    """True when every matching document was ranked (see the module docstring)."""
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
    cands, exhaustive = planner.candidates(plan, extra=dense)
    ranked = _rerank(planner, plan, cands, params, exhaustive, dense)
    hits = planner.hits(ranked[:limit], plan)
    total, exact = planner.count(plan)
    total = max(total, len(ranked)) if exact else total
    return SearchResult(query[:200], plan.terms, hits, total, exact, exhaustive, freshness)


class _Planner:
    def __init__(self, index: SearchIndex, owners: list[str], filters: SearchFilters, params: RankParams) -> None:
        self.index = index
        self.owners = owners
        self.filters = filters
        self.params = params
        counts = self.counts = index.owner_docs()
        self.total_docs = sum(max(0, n) for n in counts.values())
        mine = sum(max(0, counts.get(o, 0)) for o in owners)
        # Filter owners inside FTS only when they are a minority of the index: AND-ing a token
        # that most documents carry costs more than dropping the few foreign candidates later.
        self.scope_in_fts = mine * 2 < self.total_docs
        self.bounds = self._rowid_bounds()

    def _q(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self.index.store.ledger.query(sql, list(params))

    def _rowid_bounds(self) -> tuple[int, int] | None:
        f = self.filters
        if f.since_us is None and f.until_us is None:
            return None
        lo = f.since_us if f.since_us is not None else -(2**62)
        hi = f.until_us if f.until_us is not None else 2**62
        row = self._q("SELECT min(id), max(id) FROM search_docs WHERE ts_us BETWEEN ? AND ?", (lo, hi))
        if not row or row[0][0] is None:
            return (1, 0)  # nothing in range
        return (int(row[0][0]), int(row[0][1]))

    def _scoped(self, expr: str) -> str:
        return self._scoped_raw(_text_only(expr))

    def _scoped_raw(self, column_expr: str) -> str:
        """``column_expr`` AND-ed with the owner (when selective) and kind filters."""
        clauses = []
        if self.scope_in_fts:
            clauses.append("scope : (" + " OR ".join(owner_token(o) for o in self.owners) + ")")
        if self.filters.kinds:
            clauses.append("scope : (" + " OR ".join(kind_token(k) for k in self.filters.kinds) + ")")
        return " AND ".join([*clauses, column_expr])

    def _range_sql(self, extra_lo: int | None = None) -> tuple[str, list[object]]:
        sql = ""
        args: list[object] = []
        if self.bounds is not None:
            sql += " AND rowid BETWEEN ? AND ?"
            args += list(self.bounds)
        if extra_lo is not None:
            sql += " AND rowid >= ?"
            args.append(extra_lo)
        return sql, args

    def _ranked(self, expr: str, *, lo: int | None = None) -> dict[int, float]:
        p = self.params
        where, args = self._range_sql(lo)
        rows = self._q(
            f"SELECT rowid, bm25(search_fts, {p.body}, {p.prev}, {p.next}, {p.meta}, 0.0) AS s FROM search_fts "
            f"WHERE search_fts MATCH ?{where} ORDER BY s LIMIT {CANDIDATES * 2}",
            [self._scoped(expr), *args],
        )
        return {int(r[0]): -float(r[1]) for r in rows}

    def _df(self, term: str) -> int:
        rows = self._q(
            f"SELECT count(*) FROM (SELECT 1 FROM search_fts WHERE search_fts MATCH ? LIMIT {RARE_DOCS + 1})",
            [_text_only(_quote(term))],
        )
        return int(rows[0][0])

    def candidates(self, plan: QueryPlan, *, extra: dict[int, float]) -> tuple[list[_Cand], bool]:
        """Documents worth re-ranking: the lexical best, plus ``extra`` (dense) ones."""
        expr = plan.expression()
        exhaustive = True
        if self.total_docs <= SMALL_INDEX:
            scores = self._ranked(expr)
        else:
            rare = [t for t in plan.terms if self._df(t) <= RARE_DOCS]
            if len(rare) == len(plan.terms):
                scores = self._ranked(expr)
            else:
                exhaustive = False
                rare_set = set(rare)
                rare_expr = " OR ".join(
                    [_quote(t) for t in rare] + [_quote(ph) for ph in plan.phrases if set(ph.split()) <= rare_set]
                )
                scores = self._ranked(rare_expr) if rare else {}
                where, args = self._range_sql()
                terms_only = " OR ".join(_quote(t) for t in plan.terms)  # phrases cost position checks
                newest = self._q(
                    f"SELECT rowid FROM search_fts WHERE search_fts MATCH ?{where} ORDER BY rowid DESC "
                    f"LIMIT {BOUNDED_DOCS}",
                    [self._scoped(terms_only), *args],
                )
                if newest:
                    for doc_id, score in self._window_scores(plan, int(newest[-1][0])).items():
                        scores[doc_id] = max(score, scores.get(doc_id, 0.0))
        return self._load(scores, extra), exhaustive

    def _window_scores(self, plan: QueryPlan, lo: int) -> dict[int, float]:
        """BM25-like scores of the documents from rowid ``lo`` on, without FTS5's ``bm25()``.

        ``bm25()`` computes each term's IDF by scanning the term's whole doclist, whatever the rowid
        bound: for common words in a million documents that is most of a search. Here each term
        costs one bounded match (which rows of the window hold it in the body), one more match finds
        the rows whose context columns hold any term, and each IDF comes from the term's density in
        the window. Term frequency and length normalisation are left out: the window holds the
        newest matches, and the re-ranker applies its own length prior.
        """
        p = self.params
        where, args = self._range_sql(lo)
        in_window = self._q("SELECT count(*) FROM search_docs WHERE id >= ?", [lo])[0][0] or 1
        n_docs = max(self.total_docs, 1)

        def rows(column_expr: str) -> set[int]:
            found = self._q(
                f"SELECT rowid FROM search_fts WHERE search_fts MATCH ?{where}", [self._scoped_raw(column_expr), *args]
            )
            return {int(r[0]) for r in found}

        scores: dict[int, float] = {}
        idfs = []
        for term in plan.terms:
            body = rows(f"body : ({_quote(term)})")
            if not body:
                continue
            df = min(n_docs, max(len(body), round(len(body) * n_docs / in_window)))
            idf = max(1e-6, math.log((n_docs - df + 0.5) / (df + 0.5)))
            idfs.append(idf)
            for doc_id in body:
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * p.body
        # One match for the context columns of all terms together (per term would double the
        # cost): a document whose neighbours mention the query gets the mean term weight.
        if idfs:
            context = rows("{prev next meta} : (" + " OR ".join(_quote(t) for t in plan.terms) + ")")
            lift = max(p.prev, p.next, p.meta) * sum(idfs) / len(idfs)
            for doc_id in context:
                scores[doc_id] = scores.get(doc_id, 0.0) + lift
        return scores

    def _load(self, scores: dict[int, float], extra: dict[int, float]) -> list[_Cand]:
        ids = sorted(scores, key=lambda i: -scores[i])[: CANDIDATES * 2]
        ids += [i for i in extra if i not in scores]
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._q(
            "SELECT id, owner, kind, ts_us, sender, segment, seq, ref, title, work_item_id, words, question "
            f"FROM search_docs WHERE id IN ({marks})",
            ids,
        )
        owners = set(self.owners)
        f = self.filters
        out = []
        for r in rows:
            c = _Cand(int(r[0]), scores.get(int(r[0]), 0.0), *r[1:])
            if c.owner not in owners or (f.kinds and c.kind not in f.kinds):
                continue
            if (f.since_us is not None and c.ts_us < f.since_us) or (f.until_us is not None and c.ts_us > f.until_us):
                continue
            if f.work_item_id is not None and c.work_item_id != f.work_item_id:
                continue
            out.append(c)
        out.sort(key=lambda c: -c.score)
        lexical = [c for c in out if c.id in scores][:CANDIDATES]
        return lexical + [c for c in out if c.id not in scores]

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

    def segment_scores(self, plan: QueryPlan, segments: set[int], exhaustive: bool) -> dict[int, float]:
        """BM25 of whole conversation segments, for the segments among the candidates."""
        if not segments:
            return {}
        expr = plan.expression()
        if not exhaustive:  # only rare terms: the segment index is as large as the turn index
            rare = [t for t in plan.terms if self._df(t) <= RARE_DOCS]
            if not rare:
                return {}
            expr = " OR ".join(_quote(t) for t in rare)
        rows = self._q(
            "SELECT rowid, bm25(search_segments, 1.0, 0.0) AS s FROM search_segments WHERE search_segments MATCH ? "
            "ORDER BY s LIMIT 200",
            [f"body : ({expr})"],
        )
        return {int(r[0]): -float(r[1]) for r in rows if int(r[0]) in segments}

    def count(self, plan: QueryPlan) -> tuple[int, bool]:
        """Documents matching any term, within scope and filters; exact below ``COUNT_CAP``.

        Phrases are left out of the expression: a document matching a phrase matches its words.
        Foreign owners are filtered by a join on the few rows counted, not by AND-ing owner tokens
        that most documents carry (that walks their whole doclists). ``CROSS JOIN`` keeps FTS5 the
        outer loop: SQLite would otherwise walk the owner index and probe FTS5 per row (seconds).
        """
        where, args = self._range_sql()
        # Any other owner with documents must be filtered out, however many owners we search
        # (an agent searches three owners; a home with two agents and no workspace file has three).
        foreign = any(n > 0 and o not in self.owners for o, n in self.counts.items())
        by_owner = not self.scope_in_fts and foreign
        f = self.filters
        sql_args: list[object] = [self._scoped(" OR ".join(_quote(t) for t in plan.terms)), *args]
        if not by_owner and f.work_item_id is None and f.since_us is None and f.until_us is None:
            sql = f"SELECT 1 FROM search_fts WHERE search_fts MATCH ?{where}"
        else:
            sql = (
                "SELECT 1 FROM search_fts CROSS JOIN search_docs d ON d.id = search_fts.rowid "
                f"WHERE search_fts MATCH ?{where.replace('rowid', 'search_fts.rowid')}"
            )
            if by_owner:
                sql += f" AND d.owner IN ({','.join('?' * len(self.owners))})"
                sql_args += self.owners
            if f.work_item_id is not None:
                sql += " AND d.work_item_id = ?"
                sql_args.append(f.work_item_id)
            if f.since_us is not None:
                sql += " AND d.ts_us >= ?"
                sql_args.append(f.since_us)
            if f.until_us is not None:
                sql += " AND d.ts_us <= ?"
                sql_args.append(f.until_us)
        rows = self._q(f"SELECT count(*) FROM ({sql} LIMIT {COUNT_CAP})", sql_args)
        n = int(rows[0][0])
        return n, n < COUNT_CAP


def _text_only(expr: str) -> str:
    """``expr`` limited to the text columns: query words never match the hidden ``scope`` tokens."""
    return f"{{body prev next meta}} : ({expr})"


def _rerank(
    planner: _Planner, plan: QueryPlan, cands: list[_Cand], p: RankParams, exhaustive: bool, dense: dict[int, float]
) -> list[_Cand]:
    if not cands:
        return []
    top = max(c.score for c in cands) or 1.0
    segs = planner.segment_scores(plan, {c.segment for c in cands if c.segment is not None}, exhaustive)
    seg_top = max(segs.values(), default=0.0) or 1.0
    named = set(plan.terms)
    newest = max(c.ts_us for c in cands)
    kinds = dict(p.kind_weights)
    for c in cands:
        s = c.score
        if c.segment is not None and c.segment in segs:
            s += p.segment * top * segs[c.segment] / seg_top
        if c.sender and named & _name_words(c.sender):
            s += p.sender * top
        if plan.dates and _on_date(c.ts_us, plan.dates):
            s += p.date * top
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
