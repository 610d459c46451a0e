"""The index writer: folds documents into the search tables inside one transaction.

It knows nothing about events: ``holon.memory.index_docs`` turns events into ``Doc`` values,
``holon.memory.index_files`` curated files; both hand them to a ``_Writer``. A conversation turn
joins its owner's current **segment** (a conversation without a pause longer than
``SEGMENT_GAP_US``, at most ``SEGMENT_MAX_TURNS`` turns), and its engine ``body`` holds its
terms with those of the two turns before it in the segment (``CONTEXT_CAP`` characters each),
indexed but not stored, so that a short answer is found by its question (RFC 0004, "Engine").
Only the turns *before* are known when a turn is written, so a row is never written again for
its context; the turns after a match are lifted at query time (``holon.memory.search``).

The text goes to the search engine (``holon.memory.engine``), the rest to SQLite; ``finish``
commits the engine inside the caller's SQLite transaction, before it commits (see the engine's
docstring for why that order keeps the cursor honest).

Versions (RFC 0008, "Identical ranking on every node"): the fold of the ledger never deletes a
document the engine holds. A rewrite (``upsert(version=True)``) supersedes the earlier version
(kept, with its text, in ``search_docs`` and in the engine; searches skip it) and the fold
compacts, dropping them all and rebuilding the engine from the tables, when they reach
``COMPACT_SHARE`` of the ledger's live documents: a rule over counts the ledger alone decides,
checked after each rewrite in seq order, so every node's engine holds the same documents after
the same event. Curated files (each node's own disk) are still deleted and rewritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holon.clock import utc
from holon.memory.engine import Engine, Row, engine_at
from holon.memory.prior import pack
from holon.memory.text import index_terms, word_count

__all__ = [
    "COMPACT_MIN",
    "COMPACT_SHARE",
    "CONTEXT_CAP",
    "DOC_CAP",
    "SEGMENT_GAP_US",
    "SEGMENT_MAX_TURNS",
    "Doc",
    "cap",
    "engine_for",
    "engine_rows",
    "meta_text",
    "REBUILD_SHARE",
    "ROW_COLUMNS",
    "version_row",
    "engine_deleted",
    "rebuild_engine",
    "settle_engine",
]

#: The columns of ``search_docs`` an engine row is made from (``engine_rows``, ``version_row``).
ROW_COLUMNS = "id, owner, kind, ts_us, sender, work_item_id, words, question, title, text, segment"
#: A conversation pause longer than this starts a new segment (the same gap that ends an episode).
SEGMENT_GAP_US = 30 * 60 * 1_000_000
#: A segment longer than this many turns is split, so no single segment row grows without bound.
SEGMENT_MAX_TURNS = 60
#: Characters of any document that are indexed and shown.
DOC_CAP = 20_000
#: Characters of each neighbouring turn indexed as a turn's context.
CONTEXT_CAP = 600
#: The engine is rebuilt from the tables when the deleted documents it still counts in its BM25
#: statistics reach this share of its live ones (``settle_engine``; RFC 0008, "Identical ranking
#: on every node"): a rebuild costs about 0.3 ms of CPU per document, so amortised over the
#: rewrites that cause it about 30 ms per rewritten document.
REBUILD_SHARE = 0.01
#: The ledger's fold compacts (drops the superseded versions of rewritten work items and tasks and
#: rebuilds the engine) when they reach this share of the ledger's live documents ...
COMPACT_SHARE = 0.25
#: ... and at least this many (a small index is not rebuilt for every few rewrites).
COMPACT_MIN = 200


@dataclass(slots=True)
class Doc:
    key: str
    """What the document stands for, unique in the index (``event:42``, ``work_item:wi_..``)."""
    ref: str
    """The ``source_ref`` a hit hands out; MemoryGet resolves it from canonical storage."""
    owner: str
    """``agent:<id>``, ``operator`` or ``workspace:<path>``: who may see it."""
    kind: str
    ts_us: int
    title: str
    text: str
    seq: int | None = None
    sender: str = ""
    work_item_id: str | None = None
    turn: bool = False
    """A conversation turn: gets neighbour context and a segment."""


def _date_words(ts_us: int) -> str:
    d = utc(ts_us)
    return f"{d.day} {d:%B} {d.year} {d:%A}"


def cap(text: str, limit: int = DOC_CAP) -> str:
    return text if len(text) <= limit else text[:limit]


def meta_text(doc: Doc) -> str:
    """What a document's ``meta`` field holds: sender, kind and date words."""
    return f"{doc.sender} {doc.kind.replace('_', ' ')} {_date_words(doc.ts_us)}"


def body_of(doc: Doc) -> str:
    """The text a document is matched on (titles of non-turn documents included)."""
    return f"{doc.title}\n{cap(doc.text)}" if not doc.turn else cap(doc.text)


def engine_for(database_list: Sequence[Sequence[Any]]) -> Engine:  # Any: SQLite row values
    """The engine beside the main database file named by ``PRAGMA database_list``'s rows."""
    rows = database_list
    main = next((r[2] for r in rows if r[1] == "main"), "")
    if not main:
        raise ValueError("the search index needs a database file (an in-memory database has no directory)")
    return engine_at(Path(main).parent)


@dataclass
class _Segment:
    id: int
    last_ts_us: int
    turns: int
    recent: list[tuple[int, str]] | None = None
    """The ids and text of its last two turns (``CONTEXT_CAP`` characters each): the next turn's
    context and neighbours (read when a turn continues a segment committed earlier)."""


class _Writer:
    """Writes documents inside one transaction. Knows nothing about events.

    Engine rows are held back until ``finish`` and written in one engine commit.
    """

    def __init__(self, conn: sqlite3.Connection, engine: Engine | None = None) -> None:
        self.conn = conn
        self.engine = engine if engine is not None else engine_for(conn.execute("PRAGMA database_list").fetchall())
        self.segments: dict[str, _Segment | None] = {}
        self.owner_counts: dict[str, int] = {}
        self.rows: dict[int, Row] = {}
        """Held-back engine rows by doc id."""
        self.deletes: list[int] = []
        self.owner_deletes: list[str] = []
        self.counts: dict[str, int] | None = None
        """``live`` (documents of the ledger, not superseded) and ``superseded``, and ``epoch``
        (counts the times the superseded versions were dropped: with the count, what a process may
        key what it keeps of them by): read when first needed, written back by ``finish``."""
        self.counted = False
        self.compactions = 0
        self.rewrites = False
        """A document the engine already holds was deleted (or rewritten): tantivy keeps it in its
        BM25 statistics, and ``finish`` checks whether enough have gathered to rebuild the engine."""

    def upsert(self, doc: Doc, *, version: bool = False) -> int:
        """Write ``doc``, replacing the document of its key. With ``version`` (the fold of the
        ledger) the one it replaces stays in the engine, superseded (``supersede``); without (a
        curated file, a bulk load) it is deleted."""
        row = self.conn.execute("SELECT id FROM search_docs WHERE key = ?", (doc.key,)).fetchone()
        if row is not None:
            if version:
                self.supersede(int(row[0]))
            else:
                self.delete(row[0])
        stripped = doc.text.strip()
        words = word_count(stripped[:DOC_CAP])
        question = stripped.endswith("?") and "\n" not in stripped
        cur = self.conn.execute(
            "INSERT INTO search_docs(key, ref, owner, kind, seq, ts_us, sender, work_item_id, words, question, "
            "title, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc.key,
                doc.ref,
                doc.owner,
                doc.kind,
                doc.seq,
                doc.ts_us,
                doc.sender,
                doc.work_item_id,
                words,
                int(question),
                doc.title,
                cap(doc.text),
            ),
        )
        doc_id = int(cur.lastrowid or 0)
        body = index_terms(body_of(doc))
        segment, before_ids = 0, (0, 0)
        if doc.turn:
            segment, before = self._join_segment(doc, doc_id)
            self.conn.execute("UPDATE search_docs SET segment = ? WHERE id = ?", (segment, doc_id))
            if before:
                body += " " + index_terms("\n".join(text for _id, text in before))
            nearest = [i for i, _text in reversed(before)] + [0, 0]
            before_ids = (nearest[0], nearest[1])
        self.rows[doc_id] = Row(
            doc_id, doc.owner, doc.kind, doc.ts_us, doc.work_item_id or "", body, index_terms(meta_text(doc)),
            pack(doc.kind, words, question), segment, before_ids, index_terms(doc.sender or ""),
        )  # fmt: skip
        self.owner_counts[doc.owner] = self.owner_counts.get(doc.owner, 0) + 1
        if doc.kind != "file":
            self._count("live", 1)
        if version and row is not None:
            self._maybe_compact()
        return doc_id

    def supersede(self, doc_id: int) -> None:
        """Keep ``doc_id`` in the engine and the tables but out of every search: its key becomes
        ``~<id>`` (the next version takes the document's), its vectors go. The engine's BM25
        statistics then count it exactly as on every node that folded the same ledger, where a
        deleted document would count only until a background merge (RFC 0008, "Identical ranking
        on every node")."""
        self.conn.execute(
            "UPDATE search_docs SET key = '~' || id, superseded = 1 WHERE id = ? AND superseded = 0", (doc_id,)
        )
        self.conn.execute("DELETE FROM search_vectors WHERE id = ?", (doc_id,))
        self._count("live", -1)
        self._count("superseded", 1)

    def _counts(self) -> dict[str, int]:
        if self.counts is None:
            rows = self.conn.execute("SELECT name, n FROM search_counts").fetchall()
            self.counts = {"live": 0, "superseded": 0, "epoch": 0} | {str(r[0]): int(r[1]) for r in rows}
        return self.counts

    def _count(self, name: str, delta: int) -> None:
        counts = self._counts()
        counts[name] += delta
        self.counted = True

    def _maybe_compact(self) -> None:
        """Compact when the superseded versions reach ``COMPACT_SHARE`` of the live documents of
        the ledger (curated files not counted: they are each node's own) and ``COMPACT_MIN``.
        Evaluated after each superseding write, in seq order: every node compacts at the same
        event, so every node's engine holds the same documents at the same ledger position."""
        counts = self._counts()
        if counts["superseded"] >= max(COMPACT_MIN, COMPACT_SHARE * counts["live"]):
            self.compact()

    def compact(self) -> None:
        """Drop every superseded version from the tables and rebuild the engine from them (one
        commit: the documents of this batch so far go with it, and no deleted document is left in
        its statistics)."""
        conn = self.conn
        for owner, n in conn.execute(
            "SELECT owner, count(*) FROM search_docs WHERE superseded = 1 GROUP BY owner"
        ).fetchall():
            self.owner_counts[owner] = self.owner_counts.get(owner, 0) - int(n)
        conn.execute("DELETE FROM search_vectors WHERE id IN (SELECT id FROM search_docs WHERE superseded = 1)")
        conn.execute("DELETE FROM search_docs WHERE superseded = 1")
        rebuild_engine(conn, self.engine)
        self.rows.clear()
        self.deletes.clear()
        self.owner_deletes.clear()
        self.rewrites = False
        self._count("superseded", -self._counts()["superseded"])
        self._count("epoch", 1)
        self.compactions += 1

    def recount(self) -> None:
        """Count the live documents and superseded versions again from the tables (after a
        removal the counts cannot follow row by row: an owner's documents)."""
        live, superseded = self.conn.execute(
            "SELECT coalesce(sum(superseded = 0 AND kind != 'file'), 0), coalesce(sum(superseded), 0) FROM search_docs"
        ).fetchone()
        self.counts = self._counts() | {"live": int(live), "superseded": int(superseded)}
        self._count("epoch", 1)

    def delete(self, doc_id: int) -> None:
        row = self.conn.execute("SELECT owner, kind, superseded FROM search_docs WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            return
        if row[1] != "file":
            self._count("superseded" if row[2] else "live", -1)
        if self.rows.pop(doc_id, None) is None:  # committed to the engine by an earlier batch
            self.deletes.append(doc_id)
            self.rewrites = True
        self.conn.execute("DELETE FROM search_docs WHERE id = ?", (doc_id,))
        self.conn.execute("DELETE FROM search_vectors WHERE id = ?", (doc_id,))
        self.owner_counts[row[0]] = self.owner_counts.get(row[0], 0) - 1

    def delete_owner(self, owner: str) -> None:
        """Every document of ``owner`` (rows, vectors, segments, engine documents)."""
        conn = self.conn
        n = conn.execute("SELECT count(*) FROM search_docs WHERE owner = ?", (owner,)).fetchone()[0]
        if n > sum(1 for r in self.rows.values() if r.owner == owner):  # some are in the engine already
            self.rewrites = True
        conn.execute("DELETE FROM search_vectors WHERE id IN (SELECT id FROM search_docs WHERE owner = ?)", (owner,))
        conn.execute("DELETE FROM search_docs WHERE owner = ?", (owner,))
        conn.execute("DELETE FROM search_segment_info WHERE owner = ?", (owner,))
        self.rows = {i: r for i, r in self.rows.items() if r.owner != owner}
        conn.execute("DELETE FROM search_states WHERE owner = ?", (owner,))
        self.segments.pop(owner, None)
        self.owner_deletes.append(owner)
        self.owner_counts[owner] = self.owner_counts.get(owner, 0) - int(n)
        self.recount()

    def _segment(self, owner: str) -> _Segment | None:
        if owner not in self.segments:
            row = self.conn.execute(
                "SELECT id, last_ts_us, turns FROM search_segment_info WHERE owner = ? ORDER BY id DESC LIMIT 1",
                (owner,),
            ).fetchone()
            self.segments[owner] = _Segment(row[0], row[1], row[2]) if row is not None else None
        return self.segments[owner]

    def _join_segment(self, doc: Doc, doc_id: int) -> tuple[int, list[tuple[int, str]]]:
        """Put a turn in its owner's current segment (or a new one); returns the segment id and
        the ids and text of the (up to) two turns before it in the segment, oldest first."""
        seg = self._segment(doc.owner)
        if seg is None or doc.ts_us - seg.last_ts_us > SEGMENT_GAP_US or seg.turns >= SEGMENT_MAX_TURNS:
            seg = _Segment(doc_id, doc.ts_us, 0, [])
            self.segments[doc.owner] = seg
        if seg.recent is None:  # a segment of an earlier transaction, continued: its last two turns
            last = self.conn.execute(
                "SELECT id, text FROM search_docs WHERE segment = ? AND id >= ? ORDER BY id DESC LIMIT 2",
                (seg.id, seg.id),
            ).fetchall()
            seg.recent = [(int(r[0]), cap(r[1], CONTEXT_CAP)) for r in reversed(last)]
        before = seg.recent
        seg.recent = [*before, (doc_id, cap(doc.text, CONTEXT_CAP))][-2:]
        seg.turns += 1
        seg.last_ts_us = doc.ts_us
        self.conn.execute(
            "INSERT INTO search_segment_info(id, owner, last_ts_us, turns) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET last_ts_us = excluded.last_ts_us, turns = excluded.turns",
            (seg.id, doc.owner, seg.last_ts_us, seg.turns),
        )
        return seg.id, before

    def finish(self) -> None:
        """Commit the engine's rows and deletions, and write the owner counts (SQLite commits after).

        When the batch deleted or rewrote a document the engine already held, the engine is rebuilt
        from the tables once its deleted documents reach ``REBUILD_SHARE`` of its live ones
        (``settle_engine``): tantivy counts a deleted document in its BM25 statistics until a
        background merge drops it, so two nodes of one ledger score alike only when neither holds
        one (RFC 0008, "Identical ranking on every node"). Not at every rewrite: a rebuild costs
        about 0.3 ms of CPU per document (a batch of 100 about 0.05 s), and work items and tasks
        are rewritten whenever they change."""
        self.engine.write(
            [self.rows[i] for i in sorted(self.rows)], self.deletes, owners=dict.fromkeys(self.owner_deletes)
        )
        if self.rewrites:
            settle_engine(self.conn, self.engine, owners=self.owner_counts)
        self.rewrites = False
        self.rows.clear()
        self.deletes.clear()
        self.owner_deletes.clear()
        for owner, delta in self.owner_counts.items():
            if delta:
                self.conn.execute(
                    "INSERT INTO search_owners(owner, docs) VALUES (?, ?) "
                    "ON CONFLICT(owner) DO UPDATE SET docs = docs + excluded.docs",
                    (owner, delta),
                )
        self.owner_counts.clear()
        if self.counted:
            self.conn.executemany(
                "INSERT INTO search_counts(name, n) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET n = excluded.n",
                sorted(self._counts().items()),
            )
            self.counted = False


def engine_rows(conn: sqlite3.Connection) -> Iterator[Row]:
    """Every document of the tables as the engine row ``_Writer.upsert`` made of it, in id order.

    A row is a function of its ``search_docs`` row and, for a turn, of the (up to) two turns before
    it in its segment: the turns of a segment are never deleted one by one (only with their owner,
    whose segments go too), so the two before it now are the two it was written with."""
    recent: dict[int, list[tuple[int, str]]] = {}
    cur = conn.execute(f"SELECT {ROW_COLUMNS} FROM search_docs ORDER BY id")
    for doc_id, owner, kind, ts_us, sender, work_item_id, words, question, title, text, segment in cur:
        turn = segment is not None
        doc = Doc("", "", owner, kind, ts_us, title, text, sender=sender, work_item_id=work_item_id, turn=turn)
        body = index_terms(body_of(doc))
        before_ids = (0, 0)
        if turn:
            before = recent.get(segment, [])
            if before:
                body += " " + index_terms("\n".join(t for _id, t in before))
            nearest = [i for i, _t in reversed(before)] + [0, 0]
            before_ids = (nearest[0], nearest[1])
            recent[segment] = [*before, (doc_id, cap(text, CONTEXT_CAP))][-2:]
        yield Row(
            doc_id, owner, kind, ts_us, work_item_id or "", body, index_terms(meta_text(doc)),
            pack(kind, words, bool(question)), segment or 0, before_ids, index_terms(sender or ""),
        )  # fmt: skip


def version_row(values: Sequence[Any]) -> Row:  # Any: SQLite row values
    """The engine row of a superseded version from its ``ROW_COLUMNS`` (never a turn: only work
    items and tasks have versions), as ``engine_rows`` makes it."""
    doc_id, owner, kind, ts_us, sender, work_item_id, words, question, title, text, _segment = values
    doc = Doc("", "", owner, kind, ts_us, title, text, sender=sender, work_item_id=work_item_id)
    return Row(
        doc_id, owner, kind, ts_us, work_item_id or "", index_terms(body_of(doc)), index_terms(meta_text(doc)),
        pack(kind, words, bool(question)), 0, (0, 0), index_terms(sender or ""),
    )  # fmt: skip


def rebuild_engine(conn: sqlite3.Connection, engine: Engine) -> None:
    """Replace everything the engine holds with the tables' documents, in one engine commit (an
    index built in one pass: no deleted document left in its statistics)."""
    engine.write(engine_rows(conn), clear=True)


def engine_deleted(conn: sqlite3.Connection, engine: Engine, *, owners: Iterable[str] = ()) -> int:
    """The deleted documents the engine still counts in its statistics (``Engine.deleted`` over
    every owner the tables name, and ``owners``: those of a batch not yet counted)."""
    named = {str(r[0]) for r in conn.execute("SELECT owner FROM search_owners")}
    return engine.deleted(named | set(owners))


def settle_engine(
    conn: sqlite3.Connection, engine: Engine, *, owners: Iterable[str] = (), share: float | None = None
) -> int:
    """Rebuild the engine from the tables when its deleted documents reach ``share`` of its live
    ones (``REBUILD_SHARE``; 0: any); returns how many it held."""
    dead = engine_deleted(conn, engine, owners=owners)
    if dead > 0 and dead >= (REBUILD_SHARE if share is None else share) * engine.num_docs():
        rebuild_engine(conn, engine)
    return dead
