"""The search engine behind the index projection: tantivy, the one module of holon that imports it.

Why tantivy (RFC 0004, "Engine"): its BM25 top-k is exact and costs milliseconds where SQLite's
FTS5 must score every match (hundreds of milliseconds for a common word in a million documents),
and its index is a fraction of FTS5's size. holon keeps its own term logic: the text arrives
already analysed (``holon.memory.text.index_terms``: folded irregular forms, CJK
bigrams and single characters), joined by spaces; the engine's analyser only splits it on spaces
and applies the Snowball English stemmer (measured on LoCoMo against holon's light stemmer: RFC
0004), so Chinese works and a query's terms are holon's. Query terms go through the same
analyser (``analyze``) and become term objects, never parsed: no string can be syntax.

Fields: ``id`` (the ``search_docs`` id, indexed and fast), ``owner``, ``kind`` and ``work`` (raw
keywords, for filters), ``ts`` (microseconds, a fast field only: time ranges are read from it),
``body`` (the document's terms and, for a conversation turn, those of the two turns before it:
what a turn is found by, so that a short answer is found through its question), ``meta``
(sender, kind and date words) and ``sender`` (the sender's words alone, not scored: whether a
query can name a sender); and, as fast fields, what re-ranking needs of a candidate
(``features``: kind, bare question and word count, from which the prior is computed; ``seg``:
the turn's segment; ``p1``/``p2``: the two turns before it), so that a search reads SQLite only
for the few candidates whose sender or text can still change its first ``limit``, and for the
hits. Nothing is stored and no positions are kept: what a hit shows comes from SQLite, and
adjacent query words are checked there (``holon.memory.search``).

Queries: the filters are term queries OR-ed (``_any``), never term-set queries: a term set
builds a bitset over every document (about 0.3 ms at 100,000 documents whatever it matches),
where a term query's posting list is walked lazily beside the text's. A document's score is
``BASE`` + BM25 (the engine ranks by BM25, the same order, and ``BASE`` is added on reading).
Ownership is a MustNot over the other owners when the searcher's own hold most of the index
(``matches(others=...)``), a Must over its owners otherwise.

Consistency with SQLite (the index's other half and its cursor): ``write`` commits tantivy
*before* the caller's SQLite transaction commits, so the cursor never runs ahead of what tantivy
holds. A crash between the two leaves tantivy ahead (more documents, or one of an id SQLite never
gave out: ``holds_beyond``), and the caller (``SearchIndex``) rebuilds it from the tables before
the batch is folded again (each row is still written as delete-by-id-then-add, which deletes
nothing then). A missing or unreadable directory opens as an empty index, and the caller rebuilds
the projection when tantivy holds fewer documents than SQLite counts.

Hidden documents (``Hidden``): superseded versions of rewritten work items and tasks stay in the
index, so that its BM25 statistics are a function of the ledger (a deleted document would count
until a background merge, whose schedule is tantivy's: RFC 0008, "Identical ranking on every
node"); the queries drop them by id and leave them out of their counts.

Processes: tantivy allows one writer per directory. A writer is taken only inside a SQLite
write transaction (which already serialises writers across processes) and released before it
ends; readers never lock and see each commit after a ``reload`` (about 35 µs, done per search).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from holon.errors import HolonError

__all__ = [
    "BASE",
    "DIR_NAME",
    "NO_HIDDEN",
    "Engine",
    "EngineError",
    "Filters",
    "Hidden",
    "HiddenDoc",
    "HiddenTerms",
    "Matches",
    "Row",
    "engine_at",
]

#: The engine's directory, beside the database file.
DIR_NAME = "search.tantivy"
#: Writer memory (tantivy needs at least 15 MB for one indexing thread).
HEAP = 64_000_000
_ANALYZER = "holon"
#: What a match scores before its BM25: a document's score is ``BASE + BM25`` (what the owner
#: filter used to add as a side effect, kept explicit since LoCoMo's weights were chosen with it).
#: The engine ranks by BM25 alone (the same order) and ``_read`` adds it.
BASE = 1.0
_FAST = ("id", "features", "ts", "seg", "p1", "p2")


@dataclass(frozen=True, slots=True)
class Filters:
    """What a search is narrowed to besides its owners."""

    kinds: tuple[str, ...] = ()
    since_us: int | None = None
    until_us: int | None = None
    work_item_id: str | None = None
    segments: tuple[int, ...] = ()
    """Only the turns of these conversation segments (the exact-top-k widening of a search)."""


class EngineError(HolonError):
    """The search engine's directory cannot be used (the message names it)."""


@dataclass(frozen=True, slots=True)
class Row:
    id: int
    owner: str
    kind: str
    ts_us: int
    work_item_id: str
    body: str
    """Space-separated terms (``holon.memory.text.index_terms``): the document's, and for a turn
    also the two previous turns' of its segment."""
    meta: str
    features: int = 0
    """Kind, bare question and word count packed in one integer (``holon.memory.prior.pack``)."""
    segment: int = 0
    """The conversation segment of a turn (0: none)."""
    before: tuple[int, int] = (0, 0)
    """The ids of the (up to) two turns before a turn in its segment, nearest first (0: none)."""
    sender: str = ""
    """The sender's words (``holon.memory.text.index_terms``): whether a query can name a sender."""


@dataclass(frozen=True, slots=True)
class Matches:
    """Documents as a search sees them, read from the engine alone, column by column (a search
    reads a few hundred: no object per document)."""

    ids: list[int]
    scores: list[float]
    """``BASE`` + BM25 over ``body`` and ``meta`` (0: no match; BM25 is positive for any match)."""
    features: list[int]
    ts_us: list[int]
    segments: list[int]
    before: list[int]
    """The turn before each (0: none) ..."""
    before2: list[int]
    """... and the one before that."""

    def __len__(self) -> int:
        return len(self.ids)


_NO_MATCHES = Matches([], [], [], [], [], [], [])


@dataclass(frozen=True, slots=True)
class HiddenDoc:
    """What decides whether a hidden document matches a query: its owner, filter fields and the
    terms of its ``body`` and ``meta`` as the engine indexed them."""

    owner: str
    kind: str
    ts_us: int
    work: str
    body: frozenset[str]
    meta: frozenset[str]


class HiddenTerms:
    """Hidden documents by id and by term (``body`` and ``meta`` apart), filled as they come: a
    process keeps one per engine and shares it between the ``Hidden`` views of its searches."""

    def __init__(self) -> None:
        self.docs: dict[int, HiddenDoc] = {}
        self.body: dict[str, list[int]] = {}
        self.meta: dict[str, list[int]] = {}

    def add(self, docs: Mapping[int, HiddenDoc]) -> None:
        for doc_id, d in docs.items():
            if doc_id in self.docs:
                continue
            self.docs[doc_id] = d
            for term in d.body:
                self.body.setdefault(term, []).append(doc_id)
            for term in d.meta:
                self.meta.setdefault(term, []).append(doc_id)


@dataclass(frozen=True, slots=True)
class Hidden:
    """Documents the engine holds that no search returns: superseded versions (RFC 0008,
    "Identical ranking on every node"), which count in BM25's statistics like every document. Hits
    are dropped by id (``ids``); how many of them match a query is counted here, in Python, from
    their terms (a term set over their ids in the engine costs about 1 ms plus 1 ms per 1,000 ids,
    a Python loop over them about as much: the postings of the query's terms are read instead)."""

    ids: frozenset[int]
    """The hidden documents of the owners a search is narrowed to (no other owner's)."""
    terms: HiddenTerms
    """Their terms (it may hold other documents too: only ``ids`` count)."""

    @staticmethod
    def of(docs: Mapping[int, HiddenDoc]) -> Hidden:
        terms = HiddenTerms()
        terms.add(docs)
        return Hidden(frozenset(docs), terms)

    def __bool__(self) -> bool:
        return bool(self.ids)

    def matching(self, terms: Sequence[str], f: Filters, weights: tuple[float, float]) -> int:
        """How many of these documents the scoring query (``Engine._scoring``) would find (``ids``
        are the searched owners' only: ownership is not checked again)."""
        if not self.ids or f.segments:  # hidden documents are never turns: no segment holds one
            return 0
        found: set[int] = set()
        for w, postings in zip(weights, (self.terms.body, self.terms.meta), strict=True):
            if w > 0:
                for term in terms:
                    found.update(postings.get(term, ()))
        found &= self.ids
        if not (f.kinds or f.work_item_id is not None or f.since_us is not None or f.until_us is not None):
            return len(found)
        docs, lo, hi = self.terms.docs, f.since_us, f.until_us
        return sum(
            1
            for d in map(docs.__getitem__, found)
            if (not f.kinds or d.kind in f.kinds)
            and (f.work_item_id is None or d.work == f.work_item_id)
            and (lo is None or d.ts_us >= lo)
            and (hi is None or d.ts_us <= hi)
        )


NO_HIDDEN = Hidden(frozenset(), HiddenTerms())


def _analyzer() -> Any:  # Any: tantivy.TextAnalyzer
    """Split on spaces (the text is holon's terms already), then the Snowball English stemmer."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).filter(tantivy.Filter.stemmer("english")).build()


def _schema() -> Any:  # Any: tantivy.Schema, untyped
    b = tantivy.SchemaBuilder()
    b.add_integer_field("id", indexed=True, fast=True)
    b.add_text_field("owner", tokenizer_name="raw", index_option="basic")
    b.add_text_field("kind", tokenizer_name="raw", index_option="basic")
    b.add_text_field("work", tokenizer_name="raw", index_option="basic")
    b.add_integer_field("ts", fast=True)
    b.add_text_field("body", tokenizer_name=_ANALYZER, index_option="freq")
    b.add_text_field("meta", tokenizer_name=_ANALYZER, index_option="freq")
    b.add_text_field("sender", tokenizer_name=_ANALYZER, index_option="basic")
    b.add_integer_field("seg", indexed=True, fast=True)  # indexed: a search reads a segment's other turns
    for name in ("features", "p1", "p2"):
        b.add_integer_field(name, fast=True)
    return b.build()


class Engine:
    """One tantivy index directory. Use ``engine_at`` (one instance per directory and process)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.schema = _schema()
        self.analyzer = _analyzer()
        self._lock = threading.Lock()
        self._generation: tuple[int, int, int] | None = None
        self._collected = False
        self.index = self._open()

    def _open(self) -> Any:  # Any: tantivy.Index
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
            except ValueError:  # unreadable or of another schema: a projection starts over
                shutil.rmtree(self.path, ignore_errors=True)
                self.path.mkdir(parents=True, exist_ok=True)
                index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
        except OSError as e:
            raise EngineError(f"cannot open the search index at {self.path}: {e}") from e
        index.register_tokenizer(_ANALYZER, self.analyzer)
        return index

    # --- writing ------------------------------------------------------------------------------

    def write(self, rows: Iterable[Row], deletes: Iterable[int] = (), *, owners: Iterable[str] = (),
              clear: bool = False) -> None:  # fmt: skip
        """Apply and commit: delete ``deletes`` ids and every document of ``owners`` (or all, with
        ``clear``), then write ``rows`` (each replacing any document of its id)."""
        rows = list(rows)
        deletes = list(deletes)
        owners = list(owners)
        if not (rows or deletes or owners or clear):
            return
        with self._lock:
            writer = self.index.writer(heap_size=HEAP, num_threads=1)
            try:
                if not self._collected:
                    # A process killed inside a commit leaves files the committed meta does not name
                    # (a segment's ``<id>.<opstamp>.del``); the next commit reaches the same opstamp
                    # and would fail on FileAlreadyExists. The first writer of a process removes them.
                    writer.garbage_collect_files()
                    self._collected = True
                if clear:
                    writer.delete_all_documents()
                for owner in owners:
                    writer.delete_documents_by_term("owner", owner)
                for doc_id in deletes:
                    writer.delete_documents_by_term("id", doc_id)
                document = tantivy.Document
                for r in rows:
                    if not clear:  # a cleared index holds no document of any id
                        writer.delete_documents_by_term("id", r.id)
                    writer.add_document(
                        document(id=r.id, owner=r.owner, kind=r.kind, work=r.work_item_id, ts=r.ts_us, body=r.body,
                                 meta=r.meta, sender=r.sender, features=r.features, seg=r.segment, p1=r.before[0],
                                 p2=r.before[1])
                    )  # fmt: skip
                writer.commit()
            except BaseException:
                writer.rollback()
                raise
            finally:
                writer.wait_merging_threads()  # releases the directory's writer lock
            self.index.reload()

    # --- reading ------------------------------------------------------------------------------

    def searcher(self) -> Any:  # Any: tantivy.Searcher
        """A searcher on the last commit of any process. The index is reloaded only when its
        ``meta.json`` changed (a commit or merge replaces it: a new inode): a reload costs about
        0.2 ms at 1,000,000 documents, the ``stat`` a few microseconds."""
        try:
            st = os.stat(self.path / "meta.json")
            generation: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            generation = None
        if generation is None or generation != self._generation:
            self.index.reload()
            self._generation = generation
        return self.index.searcher()

    def analyze(self, terms: Iterable[str]) -> list[str]:
        """``terms`` (holon's, ``holon.memory.text.engine_term``) as the engine indexes them,
        distinct, in order: what a term query must name."""
        out: dict[str, None] = {}
        for term in terms:
            out |= dict.fromkeys(self.analyzer.analyze(term))
        return list(out)

    def tokens(self, text: str) -> list[str]:
        """``text`` (holon's terms, space-separated) as the engine indexes it, in order."""
        return list(self.analyzer.analyze(text))

    def hidden_docs(self, rows: Iterable[Row]) -> dict[int, HiddenDoc]:
        """``rows`` (documents this engine holds) as ``Hidden`` needs them: their terms analysed."""
        return {
            r.id: HiddenDoc(r.owner, r.kind, r.ts_us, r.work_item_id, frozenset(self.analyzer.analyze(r.body)),
                            frozenset(self.analyzer.analyze(r.meta)))
            for r in rows
        }  # fmt: skip

    def num_docs(self) -> int:
        return int(self.searcher().num_docs)

    def holds_beyond(self, doc_id: int) -> bool:
        """Whether a document of an id above ``doc_id`` is in the index (a range over the indexed
        ids: what a transaction that never committed may have left)."""
        query = tantivy.Query.range_query(self.schema, "id", tantivy.FieldType.Integer, doc_id + 1, None)
        return len(self.searcher().search(query, 1, count=False).hits) > 0

    def deleted(self, owners: Iterable[str]) -> int:
        """Deleted documents still in the index's statistics: every document has one owner, and an
        owner's document frequency counts its deleted documents until a merge drops them, so this
        is that sum less the live documents (``owners``: every owner the index ever held)."""
        searcher = self.searcher()
        return sum(int(searcher.doc_freq("owner", o)) for o in owners) - int(searcher.num_docs)

    def doc_freq(self, term: str, *, field: str = "body", searcher: Any = None) -> int:  # Any: tantivy.Searcher
        """Documents whose ``field`` holds ``term`` (deleted ones may still count until a merge)."""
        return int((searcher or self.searcher()).doc_freq(field, term))

    def _scoring(
        self, terms: Sequence[str], owners: Sequence[str], f: Filters, weights: tuple[float, float],
        others: Sequence[str] | None = None,
    ) -> Any:  # fmt: skip  # Any: tantivy.Query
        """The query a document is found and scored by: any term in ``body``/``meta`` (weighted),
        owned by ``owners``, passing ``f``; its score the BM25 (the filters score 0).

        With ``others`` (every other owner that has documents), ownership is a MustNot over them
        instead of a Must over ``owners``: the same documents, and when ``owners`` hold most of the
        index much cheaper (no intersection with a posting list of most documents; without other
        filters the query stays a plain disjunction, which tantivy prunes: at 1,000,000 documents
        a common word's top 201 with its count 6.3 -> 3.8 ms)."""
        t = tantivy.Query
        should = self._terms(terms, weights)
        if not should or not owners:
            return None
        filters = self._filters(f)
        if others is not None:
            exclude = [(tantivy.Occur.MustNot, self._any("owner", others))] if others else []
            if not filters:
                return t.boolean_query(should + exclude)
            return t.boolean_query([(tantivy.Occur.Must, t.boolean_query(should)), *exclude, *filters])
        owned = (tantivy.Occur.Must, t.const_score_query(self._any("owner", owners), 0.0))
        return t.boolean_query([(tantivy.Occur.Must, t.boolean_query(should)), owned, *filters])

    def _terms(self, terms: Sequence[str], weights: tuple[float, float]) -> list[tuple[Any, Any]]:
        t, s = tantivy.Query, self.schema
        should = []
        for name, w in zip(("body", "meta"), weights, strict=True):
            if w > 0:
                should += [(tantivy.Occur.Should, t.boost_query(t.term_query(s, name, term), w)) for term in terms]
        return should

    def _any(self, name: str, values: Sequence[Any]) -> Any:  # Any: tantivy's values and Query
        """Documents whose ``name`` is one of ``values``: term queries, OR-ed. (A term set query
        costs about 0.3 ms at 100,000 documents whatever it matches: it builds a bitset; a term
        query walks its posting list lazily, skipping with the text's.)"""
        t, s = tantivy.Query, self.schema
        if len(values) == 1:
            return t.term_query(s, name, values[0])
        return t.boolean_query([(tantivy.Occur.Should, t.term_query(s, name, v)) for v in values])

    def _filters(self, f: Filters) -> list[tuple[Any, Any]]:  # Any: tantivy's Occur and Query
        t, s = tantivy.Query, self.schema
        out = []
        if f.kinds:
            out.append(self._any("kind", f.kinds))
        if f.work_item_id is not None:
            out.append(t.term_query(s, "work", f.work_item_id))
        if f.segments:
            out.append(self._any("seg", f.segments))
        if f.since_us is not None or f.until_us is not None:
            out.append(t.range_query(s, "ts", tantivy.FieldType.Integer, f.since_us, f.until_us))
        return [(tantivy.Occur.Must, t.const_score_query(q, 0.0)) for q in out]

    def matches(
        self,
        terms: Sequence[str],
        *,
        owners: Sequence[str],
        filters: Filters | None = None,
        weights: tuple[float, float] = (1.0, 0.2),
        limit: int,
        count: bool = True,
        searcher: Any = None,  # Any: tantivy.Searcher
        others: Sequence[str] | None = None,
        hidden: Hidden = NO_HIDDEN,
    ) -> tuple[Matches, int]:
        """The exact top ``limit`` by score (``Matches.scores``: BM25 over ``body`` and ``meta``
        weighted by ``weights``, plus ``BASE``) among ``owners``' documents matching any term and
        passing ``filters``, ``hidden`` ids left out (superseded versions: they count in the
        statistics, never as hits), with their fast fields; and how many match (0 unless ``count``)."""
        query = self._scoring(terms, owners, filters or Filters(), weights, others)
        if query is None or limit <= 0:
            return _NO_MATCHES, 0
        searcher = searcher or self.searcher()
        hits, total = self._top(searcher, query, limit, count=count, hidden=hidden.ids)
        if count and hidden:
            total -= hidden.matching(terms, filters or Filters(), weights)
        return self._read(searcher, hits, cut=limit), total

    @staticmethod
    def _top(
        searcher: Any, query: Any, limit: int, *, count: bool, hidden: frozenset[int] = frozenset()
    ) -> tuple[list[Any], int]:  # Any: tantivy's hits
        """The top ``limit`` hits not ``hidden`` and every such hit tied with the ``limit``-th (best
        first), and how many match (``hidden`` ones included).

        tantivy orders equal scores by their address (segment, then document), which differs between
        two indexes of the same documents committed in other batches (RFC 0008, "Identical ranking on
        every node"): a tie across the cut is read whole, so that ``_read`` can cut it by id. One more
        hit than asked shows whether a tie crosses the cut; while fewer than that are left once the
        hidden ones are dropped, or the last hit read still ties with the ``limit``-th, the engine is
        asked for four times more (bounded by the matches themselves)."""
        n = limit + 1
        found = searcher.search(query, n, count=count)
        raw = found.hits
        hits = _visible(searcher, raw, hidden)
        while len(raw) == n and (len(hits) <= limit or raw[-1][0] == hits[limit - 1][0]):
            n = n * 4 if len(hits) > limit else _deeper(n, limit + 1 - len(hits))
            raw = searcher.search(query, n, count=False).hits
            hits = _visible(searcher, raw, hidden)
        if len(hits) > limit:
            last = hits[limit - 1][0]
            hits = [h for h in hits if h[0] >= last]
        return hits, int(found.count or 0)

    def matches_cut(
        self,
        terms: Sequence[str],
        *,
        owners: Sequence[str],
        filters: Filters | None = None,
        weights: tuple[float, float] = (1.0, 0.2),
        limit: int,
        keep: int = 0,
        at_least: float | None = None,
        count: bool = False,
        searcher: Any = None,  # Any: tantivy.Searcher
        others: Sequence[str] | None = None,
        hidden: Hidden = NO_HIDDEN,
    ) -> tuple[Matches, int, float | None, float | None]:
        """``matches``' top ``limit`` (``hidden`` ids left out) cut to those scoring at least the
        ``keep``-th score (or ``at_least``): only their fast fields are read. Returns them, the
        count (0 unless ``count``), the best score of the rest of the ``limit`` (None: none; with
        fewer than ``limit`` hits, every match is there), and the cut."""
        query = self._scoring(terms, owners, filters or Filters(), weights, others)
        if query is None or limit <= 0:
            return _NO_MATCHES, 0, None, None
        searcher = searcher or self.searcher()
        n = limit + (min(len(hidden.ids), limit // 8) + 16 if hidden else 0)  # a margin for hidden ones
        found = searcher.search(query, n, count=count)
        raw = found.hits
        hits = _visible(searcher, raw, hidden.ids)
        while len(raw) == n and len(hits) < limit:  # hidden ones dropped: read deeper
            n = _deeper(n, limit - len(hits))
            raw = searcher.search(query, n, count=False).hits
            hits = _visible(searcher, raw, hidden.ids)
        hits = hits[:limit]
        if at_least is None:
            at_least = hits[keep - 1][0] + BASE if 0 < keep <= len(hits) else 0.0
        kept, below = [], None
        for score, addr in hits:
            if score + BASE >= at_least:
                kept.append((score, addr))
            elif below is None:  # best first: the first below is the best of them
                below = score + BASE
        total = int(found.count or 0)
        if count and hidden:
            total -= hidden.matching(terms, filters or Filters(), weights)
        return self._read(searcher, kept), total, below, at_least

    def score(
        self,
        ids: Sequence[int],
        terms: Sequence[str],
        *,
        owners: Sequence[str],
        filters: Filters | None = None,
        weights: tuple[float, float] = (1.0, 0.2),
        searcher: Any = None,  # Any: tantivy.Searcher
        hidden: Hidden = NO_HIDDEN,
    ) -> Matches:
        """The documents of ``ids`` (not ``hidden``) that belong to ``owners`` and pass ``filters``,
        each with the score ``matches`` gives it (bit for bit: the same scoring query), 0 if it
        matches no term."""
        ids = [i for i in ids if i not in hidden.ids] if hidden else ids
        if not ids or not owners:
            return _NO_MATCHES
        t, f = tantivy.Query, filters or Filters()
        must = [
            (tantivy.Occur.Must, t.const_score_query(self._any("id", ids), 0.0)),
            (tantivy.Occur.Must, t.const_score_query(self._any("owner", owners), 0.0)),
            *self._filters(f),
        ]
        should = self._terms(terms, weights)
        if should:
            must.append((tantivy.Occur.Should, t.boolean_query(should)))
        searcher = searcher or self.searcher()
        found = searcher.search(t.boolean_query(must), len(ids), count=False)
        return self._read(searcher, found.hits)

    @staticmethod
    def _read(searcher: Any, hits: list[tuple[float, Any]], *, cut: int | None = None) -> Matches:  # Any: tantivy's
        """The fast fields of ``hits``, ordered by score, ties by id (never by the engine's address
        order, which depends on how the documents were committed), the first ``cut`` of them."""
        if not hits:
            return _NO_MATCHES
        addresses = [addr for _score, addr in hits]
        ids, features, ts, seg, p1, p2 = (searcher.fast_field_values(n, addresses) for n in _FAST)
        order = sorted(range(len(hits)), key=lambda i: (-hits[i][0], ids[i]))[:cut]
        return Matches([ids[i] for i in order], [hits[i][0] + BASE if hits[i][0] > 0 else 0.0 for i in order],
                       [features[i] or 0 for i in order], [ts[i] or 0 for i in order], [seg[i] or 0 for i in order],
                       [p1[i] or 0 for i in order], [p2[i] or 0 for i in order])  # fmt: skip

    def top(
        self,
        terms: Sequence[str],
        *,
        owners: Sequence[str],
        kinds: Sequence[str] = (),
        since_us: int | None = None,
        until_us: int | None = None,
        work_item_id: str | None = None,
        weights: tuple[float, float] = (1.0, 0.2),
        limit: int,
        count: bool = True,
        hidden: Hidden = NO_HIDDEN,
    ) -> tuple[list[tuple[int, float]], int]:
        """``matches`` as ``(id, score)`` pairs (tests and tools that need no fast fields)."""
        f = Filters(tuple(kinds), since_us, until_us, work_item_id)
        found, n = self.matches(terms, owners=owners, filters=f, weights=weights, limit=limit, count=count,
                                hidden=hidden)  # fmt: skip
        return list(zip(found.ids, found.scores, strict=True)), n

    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())


def _deeper(n: int, missing: int) -> int:
    """How many hits to ask for when ``missing`` were hidden among the first ``n``: twice as many
    more and a margin (a top-k costs about its size; four times the candidates would cost more
    than the few superseded versions among them)."""
    return n + 2 * missing + 16


def _visible(searcher: Any, hits: list[Any], hidden: frozenset[int]) -> list[Any]:  # Any: tantivy's
    """``hits`` without those whose id is ``hidden`` (their ids read from the fast field only
    while there is something to hide)."""
    if not hidden or not hits:
        return hits
    ids = searcher.fast_field_values("id", [addr for _score, addr in hits])
    return [h for h, i in zip(hits, ids, strict=True) if i not in hidden]


_engines: dict[Path, Engine] = {}
_engines_lock = threading.Lock()


def engine_at(directory: Path) -> Engine:
    """The engine stored in ``directory`` (``DIR_NAME`` inside it), opened once per process."""
    path = (directory / DIR_NAME).resolve()
    with _engines_lock:
        engine = _engines.get(path)
        if engine is None or not path.exists():
            engine = _engines[path] = Engine(path)
        return engine


class PlainIndex:
    """tantivy used the plain way, for ``holon bench search``'s dedicated-engine anchor: one
    ``body`` field analysed by tantivy's own English stemmer (stored, so a hit can show its text)
    and a fast ``id``; a query is the disjunction of the terms, top ``limit`` by BM25, no count.
    Here so that tantivy stays imported in one module of holon."""

    def __init__(self, path: Path) -> None:
        b = tantivy.SchemaBuilder()
        b.add_integer_field("id", stored=True, fast=True)
        b.add_text_field("body", stored=True, tokenizer_name="en_stem")
        self.path = path
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        self.index = tantivy.Index(b.build(), path=str(path))
        self.searcher: Any = None  # Any: tantivy.Searcher

    def add(self, rows: Iterable[tuple[int, str]]) -> None:
        writer = self.index.writer(heap_size=256_000_000)
        for doc_id, body in rows:
            writer.add_document(tantivy.Document(id=doc_id, body=body))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def parse(self, terms: Sequence[str]) -> Any:  # Any: tantivy.Query
        text = " OR ".join('"' + t.replace('"', " ").replace("\\", " ") + '"' for t in terms)
        return self.index.parse_query(text, ["body"])

    def search(self, query: Any, limit: int) -> list[Any]:  # Any: tantivy's query and doc addresses
        return [addr for _score, addr in self.searcher.search(query, limit, count=False).hits]

    def texts(self, addresses: Sequence[Any]) -> list[str]:  # Any: tantivy's doc addresses
        """The stored body of each hit (what a caller shows: holon's hits carry their text)."""
        doc = self.searcher.doc
        return [str(doc(addr).get_first("body") or "") for addr in addresses]

    def ids(self, addresses: Sequence[Any]) -> list[int]:
        return [int(i) for i in self.searcher.fast_field_values("id", list(addresses))] if addresses else []

    def version(self) -> str:
        from importlib.metadata import version

        return version("tantivy")
