"""The index writer: folds documents into the search tables inside one transaction.

It knows nothing about events: ``holon.memory.index_docs`` turns events into ``Doc`` values,
``holon.memory.index_files`` curated files; both hand them to a ``_Writer``. A conversation turn
joins its owner's current **segment** (a conversation without a pause longer than
``SEGMENT_GAP_US``, at most ``SEGMENT_MAX_TURNS`` turns) and carries its neighbouring turns as
``prev``/``next`` context columns.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from holon.clock import utc
from holon.memory.index_schema import kind_token, owner_token
from holon.memory.text import fold, word_count

__all__ = ["CONTEXT_CAP", "DOC_CAP", "SEGMENT_GAP_US", "SEGMENT_MAX_TURNS", "Doc", "cap"]

#: A conversation pause longer than this starts a new segment (the same gap that ends an episode).
SEGMENT_GAP_US = 30 * 60 * 1_000_000
#: A segment longer than this many turns is split, so no single segment row grows without bound.
SEGMENT_MAX_TURNS = 60
#: Characters of any document that are indexed and shown.
DOC_CAP = 20_000
#: Characters of each neighbouring turn kept as context.
CONTEXT_CAP = 600


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


@dataclass
class _Segment:
    id: int
    last_ts_us: int
    turns: int
    recent: list[tuple[int, str]] = field(default_factory=list)
    """(doc id, folded text) of the last two turns, whose ``next`` context grows."""


class _Writer:
    """Writes documents inside one transaction. Knows nothing about events.

    FTS rows are held back until ``finish``: a turn's ``next`` context and its segment's text grow
    with the turns after it, and rewriting an FTS5 row re-tokenises all of it (a segment would be
    rewritten once per turn). Held back, each row is written once, in rowid order (FTS5 flushes
    its pending terms whenever rowids go backwards). The rows are the same as if written one by
    one; only rows committed by an earlier transaction are updated in place.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.segments: dict[str, _Segment | None] = {}
        self.owner_counts: dict[str, int] = {}
        self.rows: dict[int, list[str]] = {}
        """Held-back ``search_fts`` rows: doc id -> [body, prev, next, meta, scope]."""
        self.next_more: dict[int, str] = {}
        """The new ``next`` of turns committed earlier."""
        self.new_segments: dict[int, list[str]] = {}
        """Held-back ``search_segments`` rows: segment id -> [body, scope]."""
        self.segment_more: dict[int, str] = {}
        """Text to append to the body of segments committed earlier."""

    def upsert(self, doc: Doc) -> int:
        row = self.conn.execute("SELECT id FROM search_docs WHERE key = ?", (doc.key,)).fetchone()
        if row is not None:
            self.delete(row[0])
        stripped = doc.text.strip()
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
                word_count(stripped[:DOC_CAP]),
                int(stripped.endswith("?") and "\n" not in stripped),
                doc.title,
                cap(doc.text),
            ),
        )
        doc_id = int(cur.lastrowid or 0)
        body = fold(f"{doc.title}\n{cap(doc.text)}" if not doc.turn else cap(doc.text))
        prev = ""
        segment = None
        if doc.turn:
            segment, prev = self._join_segment(doc, doc_id, body)
            self.conn.execute("UPDATE search_docs SET segment = ? WHERE id = ?", (segment, doc_id))
        meta = fold(f"{doc.sender} {doc.kind.replace('_', ' ')} {_date_words(doc.ts_us)}")
        scope = f"{owner_token(doc.owner)} {kind_token(doc.kind)}"
        self.rows[doc_id] = [body, prev, "", meta, scope]
        self.owner_counts[doc.owner] = self.owner_counts.get(doc.owner, 0) + 1
        return doc_id

    def delete(self, doc_id: int) -> None:
        row = self.conn.execute("SELECT owner FROM search_docs WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            return
        if self.rows.pop(doc_id, None) is None:
            self.conn.execute("DELETE FROM search_fts WHERE rowid = ?", (doc_id,))
        self.next_more.pop(doc_id, None)
        self.conn.execute("DELETE FROM search_docs WHERE id = ?", (doc_id,))
        self.conn.execute("DELETE FROM search_vectors WHERE id = ?", (doc_id,))
        self.owner_counts[row[0]] = self.owner_counts.get(row[0], 0) - 1

    def _segment(self, owner: str) -> _Segment | None:
        if owner not in self.segments:
            row = self.conn.execute(
                "SELECT id, last_ts_us, turns FROM search_segment_info WHERE owner = ? ORDER BY id DESC LIMIT 1",
                (owner,),
            ).fetchone()
            seg = None
            if row is not None:
                seg = _Segment(row[0], row[1], row[2])
                recent = self.conn.execute(
                    "SELECT d.id, f.body FROM search_docs d JOIN search_fts f ON f.rowid = d.id "
                    "WHERE d.segment = ? ORDER BY d.id DESC LIMIT 2",
                    (seg.id,),
                ).fetchall()
                seg.recent = [(r[0], r[1]) for r in reversed(recent)]
            self.segments[owner] = seg
        return self.segments[owner]

    def _join_segment(self, doc: Doc, doc_id: int, body: str) -> tuple[int, str]:
        """Put a turn in its owner's current segment (or a new one); returns (segment, prev text)."""
        seg = self._segment(doc.owner)
        piece = body[:CONTEXT_CAP]
        if seg is None or doc.ts_us - seg.last_ts_us > SEGMENT_GAP_US or seg.turns >= SEGMENT_MAX_TURNS:
            seg = _Segment(doc_id, doc.ts_us, 0)
            self.segments[doc.owner] = seg
            self.new_segments[seg.id] = ["", owner_token(doc.owner)]
        prev = " ".join(text[:CONTEXT_CAP] for _id, text in seg.recent)
        for other_id, _text in seg.recent:
            if (held := self.rows.get(other_id)) is not None:
                held[2] = f"{held[2]} {piece}".strip(" ")  # as SQLite's trim(next || ' ' || piece)
            else:
                if other_id not in self.next_more:
                    row = self.conn.execute("SELECT next FROM search_fts WHERE rowid = ?", (other_id,)).fetchone()
                    if row is None:
                        continue
                    self.next_more[other_id] = row[0]
                self.next_more[other_id] = f"{self.next_more[other_id]} {piece}".strip(" ")
        added = " " + body[: CONTEXT_CAP * 2]
        if (new := self.new_segments.get(seg.id)) is not None:
            new[0] += added
        else:
            self.segment_more[seg.id] = self.segment_more.get(seg.id, "") + added
        seg.turns += 1
        seg.last_ts_us = doc.ts_us
        seg.recent = [*seg.recent, (doc_id, body)][-2:]
        self.conn.execute(
            "INSERT INTO search_segment_info(id, owner, last_ts_us, turns) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET last_ts_us = excluded.last_ts_us, turns = excluded.turns",
            (seg.id, doc.owner, seg.last_ts_us, seg.turns),
        )
        return seg.id, prev

    def finish(self) -> None:
        """Write the held-back FTS rows (older rowids first) and the owner counts."""
        conn = self.conn
        for doc_id, text in sorted(self.next_more.items()):
            conn.execute("UPDATE search_fts SET next = ? WHERE rowid = ?", (text, doc_id))
        conn.executemany(
            "INSERT INTO search_fts(rowid, body, prev, next, meta, scope) VALUES (?, ?, ?, ?, ?, ?)",
            [(doc_id, *cols) for doc_id, cols in sorted(self.rows.items())],
        )
        for seg_id, more in sorted(self.segment_more.items()):
            conn.execute("UPDATE search_segments SET body = body || ? WHERE rowid = ?", (more, seg_id))
        conn.executemany(
            "INSERT INTO search_segments(rowid, body, scope) VALUES (?, ?, ?)",
            [(seg_id, *cols) for seg_id, cols in sorted(self.new_segments.items())],
        )
        self.rows.clear()
        self.next_more.clear()
        self.new_segments.clear()
        self.segment_more.clear()
        for owner, delta in self.owner_counts.items():
            if delta:
                conn.execute(
                    "INSERT INTO search_owners(owner, docs) VALUES (?, ?) "
                    "ON CONFLICT(owner) DO UPDATE SET docs = docs + excluded.docs",
                    (owner, delta),
                )
        self.owner_counts.clear()
