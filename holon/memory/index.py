"""The search index: a projection of the ledger (and of curated files) on SQLite FTS5.

Unlike the synchronous projections, the index is not folded inside each append: indexing text is
the slowest thing holon does per event and nothing on the turn path needs it. It lags behind the
ledger and catches up in batches (``SearchIndex.catch_up``), each batch committing its rows with
the ``search`` cursor in one transaction, so a crash loses nothing and repeats nothing. Every
search first catches up and reports how fresh the index is (``Freshness``). Dropping the tables or
bumping ``INDEX_VERSION`` rebuilds the index from seq 0.

What becomes a document (``docs_for``):

* conversation turns: messages received (operator, external, other agents) and the agent's
  replies. Each carries its two neighbouring turns on either side as context columns, and turns
  are grouped into **segments** (a conversation without a pause longer than ``SEGMENT_GAP_US``)
  that are indexed as a whole too, so a question about an evening's talk finds that evening;
* briefs, tool results (capped), sealed episodes, decisions;
* work items and tasks, one document each, rewritten as they change;
* curated markdown files, one document per section, re-read when the file changes
  (``sync_files``): operators may edit them by hand;
* active durable memory entries (RFC 0006), in a table of their own (``search_durable``) so
  that recall ranks them among themselves and MemorySearch's results do not change (it finds
  them through their markdown views); an entry leaves it when superseded or forgotten.

Tables: ``search_docs`` holds what a hit shows (ref, owner, kind, time, sender, display text);
``search_fts`` is the FTS5 index of the folded text (``holon.memory.text.fold``) in columns
``body``, ``prev``, ``next``, ``meta`` (sender, kind, date words) and ``scope`` (owner and kind
tokens, for filtering without a join); ``search_segments`` indexes segments.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holon.clock import utc
from holon.ledger import Event
from holon.ledger import events as ev
from holon.ledger.store import EVENT_COLUMNS, row_to_event
from holon.memory import markdown
from holon.memory.text import STOP_WORDS, fold, plan_query, quote, word_count
from holon.projections import Store
from holon.projections.state import TaskProjection, WorkItemState

__all__ = [
    "INDEX_VERSION",
    "Doc",
    "FileSource",
    "Freshness",
    "SearchIndex",
    "owner_token",
]

#: Bump when what or how documents are indexed changes: every home then rebuilds its index.
#: 4: document ids are never reused (a rewritten document must not inherit a cached vector's id).
#: 5: durable memory entries (``search_durable``), for recall.
INDEX_VERSION = 5
CURSOR_NAME = "search"
#: A conversation pause longer than this starts a new segment (the same gap that ends an episode).
SEGMENT_GAP_US = 30 * 60 * 1_000_000
#: A segment longer than this many turns is split, so no single segment row grows without bound.
SEGMENT_MAX_TURNS = 60
#: Characters of a tool result or task output that are indexed.
TOOL_RESULT_CAP = 4_000
#: Characters of any document that are indexed and shown.
DOC_CAP = 20_000
#: Characters of each neighbouring turn kept as context.
CONTEXT_CAP = 600
#: Events per catch-up transaction.
BATCH = 2_000
#: Tools whose results are not indexed: they are views of memory itself.
UNINDEXED_TOOLS = frozenset({"memory_search", "memory_get", "read_output"})

Progress = Callable[[int, int], None]
"""``(done, total)`` after each batch of a long indexing run (``holon memory reindex``)."""

_TOKENIZER = "porter unicode61 remove_diacritics 2"
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS search_docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE,
        ref TEXT NOT NULL,
        owner TEXT NOT NULL,
        kind TEXT NOT NULL,
        seq INTEGER,
        ts_us INTEGER NOT NULL,
        sender TEXT NOT NULL DEFAULT '',
        segment INTEGER,
        work_item_id TEXT,
        words INTEGER NOT NULL DEFAULT 0,
        question INTEGER NOT NULL DEFAULT 0,
        title TEXT NOT NULL,
        text TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS search_docs_owner_kind ON search_docs(owner, kind, id)",
    "CREATE INDEX IF NOT EXISTS search_docs_ts ON search_docs(ts_us)",
    f"""
    CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(
        body, prev, next, meta, scope, tokenize = '{_TOKENIZER}'
    )
    """,
    f"CREATE VIRTUAL TABLE IF NOT EXISTS search_segments USING fts5(body, scope, tokenize = '{_TOKENIZER}')",
    """
    CREATE TABLE IF NOT EXISTS search_segment_info (
        id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        last_ts_us INTEGER NOT NULL,
        turns INTEGER NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS search_segment_owner ON search_segment_info(owner, id)",
    """
    CREATE TABLE IF NOT EXISTS search_files (
        owner TEXT NOT NULL,
        path TEXT NOT NULL,
        mtime_ns INTEGER NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (owner, path)
    )
    """,
    "CREATE TABLE IF NOT EXISTS search_owners (owner TEXT PRIMARY KEY, docs INTEGER NOT NULL)",
    # Durable memory entries (RFC 0006): the active ones, one row each, for recall.
    """
    CREATE TABLE IF NOT EXISTS search_durable_docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        entry_id TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL
    )
    """,
    f"CREATE VIRTUAL TABLE IF NOT EXISTS search_durable USING fts5(body, meta, scope, tokenize = '{_TOKENIZER}')",
    # Optional embeddings (holon.memory.vectors), unit-length float32, one row per document and model.
    """
    CREATE TABLE IF NOT EXISTS search_vectors (
        id INTEGER NOT NULL,
        model TEXT NOT NULL,
        vec BLOB NOT NULL,
        PRIMARY KEY (id, model)
    ) WITHOUT ROWID
    """,
)
_TABLES = (
    "search_docs",
    "search_fts",
    "search_segments",
    "search_segment_info",
    "search_files",
    "search_owners",
    "search_vectors",
    "search_durable_docs",
    "search_durable",
)


def owner_token(owner: str) -> str:
    """A single FTS token naming an owner (FTS5 would split ``agent:agt_01..`` into pieces)."""
    return "o" + hashlib.blake2b(owner.encode(), digest_size=8).hexdigest()


def kind_token(kind: str) -> str:
    return "k" + kind.replace("_", "")


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


@dataclass(frozen=True, slots=True)
class FileSource:
    """A curated file the index should hold, with the ref MemoryGet resolves."""

    owner: str
    ref: str
    path: Path
    title: str


@dataclass(frozen=True, slots=True)
class Freshness:
    indexed_seq: int
    head_seq: int

    @property
    def lag(self) -> int:
        return self.head_seq - self.indexed_seq

    def as_dict(self) -> dict[str, int]:
        return {"indexed_seq": self.indexed_seq, "head_seq": self.head_seq, "lag_events": self.lag}


def _date_words(ts_us: int) -> str:
    d = utc(ts_us)
    return f"{d.day} {d:%B} {d.year} {d:%A}"


def _cap(text: str, limit: int = DOC_CAP) -> str:
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
                _cap(doc.text),
            ),
        )
        doc_id = int(cur.lastrowid or 0)
        body = fold(f"{doc.title}\n{_cap(doc.text)}" if not doc.turn else _cap(doc.text))
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


class SearchIndex:
    """The search index of one home. Cheap to create; tables are made on first use."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ready = False
        self._names: dict[str, str] = {}

    # --- schema -----------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.store.ledger.transaction() as tx:
            yield tx.conn

    def ensure(self) -> None:
        """Create the tables, or drop and recreate them when ``INDEX_VERSION`` changed."""
        if self._ready:
            return
        with self._tx() as conn:
            row = conn.execute("SELECT version FROM projection_cursors WHERE name = ?", (CURSOR_NAME,)).fetchone()
            if row is not None and row[0] != INDEX_VERSION:
                self._drop(conn)
            for stmt in _SCHEMA:
                conn.execute(stmt)
            if row is None or row[0] != INDEX_VERSION:
                conn.execute(
                    "INSERT INTO projection_cursors(name, seq, version) VALUES (?, 0, ?) "
                    "ON CONFLICT(name) DO UPDATE SET seq = 0, version = excluded.version",
                    (CURSOR_NAME, INDEX_VERSION),
                )
        self._ready = True

    @staticmethod
    def _drop(conn: sqlite3.Connection) -> None:
        for table in _TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    def rebuild(self, *, progress: Progress | None = None) -> Freshness:
        """Drop everything and index the whole ledger again (``holon memory reindex``)."""
        with self._tx() as conn:
            self._drop(conn)
            conn.execute("DELETE FROM projection_cursors WHERE name = ?", (CURSOR_NAME,))
        self._ready = False
        return self.catch_up(progress=progress)

    def rebuild_owner(self, agent_id: str, *, progress: Progress | None = None) -> int:
        """Drop one agent's documents (events, work items, tasks, its curated files) and index its
        events again up to the cursor; returns how many of its events were read. Other owners'
        documents and durable entries (which follow their own projection) are not touched."""
        self.catch_up()
        owner = f"agent:{agent_id}"
        with self._tx() as conn:
            writer = _Writer(conn)
            for (doc_id,) in conn.execute("SELECT id FROM search_docs WHERE owner = ?", (owner,)).fetchall():
                writer.delete(doc_id)
            for (seg_id,) in conn.execute("SELECT id FROM search_segment_info WHERE owner = ?", (owner,)).fetchall():
                conn.execute("DELETE FROM search_segments WHERE rowid = ?", (seg_id,))
            conn.execute("DELETE FROM search_segment_info WHERE owner = ?", (owner,))
            conn.execute("DELETE FROM search_files WHERE owner = ?", (owner,))
            writer.finish()
            (upto,) = conn.execute("SELECT seq FROM projection_cursors WHERE name = ?", (CURSOR_NAME,)).fetchone()
        total = self.store.ledger.query("SELECT count(*) FROM events WHERE agent_id = ? AND seq <= ?", (agent_id, upto))
        after = done = 0
        while True:
            with self._tx() as conn:
                rows = conn.execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE agent_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                    (agent_id, after, upto, BATCH),
                ).fetchall()
                if not rows:
                    return done
                self._index_rows(conn, rows, durable=False)
            after, done = rows[-1][0], done + len(rows)
            if progress is not None:
                progress(done, int(total[0][0]))

    # --- catching up ------------------------------------------------------------------------

    def cursor(self) -> int:
        self.ensure()
        row = self.store.ledger.query("SELECT seq FROM projection_cursors WHERE name = ?", (CURSOR_NAME,))
        return int(row[0][0]) if row else 0

    def freshness(self) -> Freshness:
        return Freshness(self.cursor(), self.store.ledger.head())

    def catch_up(self, *, max_events: int | None = None, progress: Progress | None = None) -> Freshness:
        """Index events after the cursor, ``BATCH`` per transaction. Safe to run from any process.
        ``progress(indexed_seq, head_seq)`` after each batch."""
        self.ensure()
        fresh = self.freshness()
        if fresh.lag == 0:
            return fresh
        done = 0
        while max_events is None or done < max_events:
            moved = self._batch(BATCH if max_events is None else min(BATCH, max_events - done))
            if not moved:
                break
            done += moved
            if progress is not None:
                progress(self.cursor(), fresh.head_seq)
        return self.freshness()

    def _batch(self, limit: int) -> int:
        with self._tx() as conn:
            (start,) = conn.execute("SELECT seq FROM projection_cursors WHERE name = ?", (CURSOR_NAME,)).fetchone()
            rows = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (start, limit)
            ).fetchall()
            if not rows:
                return 0
            self._index_rows(conn, rows, durable=True)
            conn.execute("UPDATE projection_cursors SET seq = ? WHERE name = ?", (rows[-1][0], CURSOR_NAME))
            return len(rows)

    def _index_rows(self, conn: sqlite3.Connection, rows: list[Any], *, durable: bool) -> None:
        """Index a batch of event rows in seq order (``durable``: follow durable entries too)."""
        writer = _Writer(conn)
        changed_items: dict[str, Event] = {}
        changed_tasks: dict[str, Event] = {}
        for raw in rows:
            if raw[3] not in _INDEXED_TYPES:
                continue
            event = row_to_event(raw)
            p = event.payload
            if isinstance(p, ev.WorkItemOpened | ev.WorkItemUpdated | ev.WorkItemCompleted | ev.TodoChanged):
                changed_items[p.work_item_id] = event
                continue
            if isinstance(p, ev.TaskCreated | ev.TaskResulted):
                changed_tasks[p.task_id] = event
                continue
            if isinstance(p, ev.DurableRecorded | ev.DurableForgotten):
                if durable:
                    _index_durable(conn, p)
                continue
            for doc in self._docs_for(event):
                writer.upsert(doc)
        for event in changed_items.values():
            for doc in self._work_item_doc(event):
                writer.upsert(doc)
        for event in changed_tasks.values():
            for doc in self._task_doc(event):
                writer.upsert(doc)
        writer.finish()

    # --- bulk loading -------------------------------------------------------------------------

    def add_documents(self, docs: Iterable[Doc], *, batch: int = 20_000) -> int:
        """Write ``docs`` straight into the index, ``batch`` per transaction; returns how many.

        The bulk path for benchmarks and imports: documents go through the same writer as
        ``catch_up`` (segments, neighbour context, owner counts) but come from the caller, not the
        ledger, and the cursor is not moved. Turns must arrive in time order per owner.
        """
        self.ensure()
        done = 0
        it = iter(docs)
        while chunk := list(itertools.islice(it, batch)):
            with self._tx() as conn:
                writer = _Writer(conn)
                for doc in chunk:
                    writer.upsert(doc)
                writer.finish()
            done += len(chunk)
        return done

    # --- events to documents ----------------------------------------------------------------

    def _name(self, agent_id: str) -> str:
        if agent_id not in self._names:
            try:
                self._names[agent_id] = self.store.agent(agent_id).name
            except Exception:  # an agent row always exists; be robust all the same
                self._names[agent_id] = "agent"
        return self._names[agent_id]

    def _text(self, value: ev.LargeText | None) -> str:
        resolved = self.store.ledger.resolve(value)
        if resolved is None:
            return ""
        if isinstance(resolved, str):
            return resolved
        return resolved.text if resolved.text is not None else resolved.preview

    def _docs_for(self, event: Event) -> Iterable[Doc]:
        p = event.payload
        owner = f"agent:{event.agent_id}"
        base = {"owner": owner, "ts_us": event.ts_us, "seq": event.seq, "work_item_id": event.work_item_id}
        key = f"event:{event.seq}"
        if isinstance(p, ev.MessageReceived):
            sender = p.sender
            yield Doc(key, key, kind="message", title=f"message from {sender}", text=self._text(p.text),
                      sender=sender, turn=True, **base)  # fmt: skip
        elif isinstance(p, ev.TurnSettled) and p.reply is not None:
            name = self._name(event.agent_id)
            text = self._text(p.reply)
            if text.strip():
                yield Doc(key, key, kind="reply", title=f"reply of {name}", text=text, sender=name, turn=True, **base)
        elif isinstance(p, ev.BriefDelivered):
            yield Doc(key, key, kind="brief", title=f"{p.kind} brief", text=self._text(p.text),
                      sender=self._name(event.agent_id), **base)  # fmt: skip
        elif isinstance(p, ev.ToolResulted) and p.tool not in UNINDEXED_TOOLS:
            text = _cap(self._text(p.output), TOOL_RESULT_CAP)
            yield Doc(key, key, kind="tool_result", title=f"{p.tool} result ({p.status})", text=text, **base)
        elif isinstance(p, ev.EpisodeSealed):
            parts = [p.objective, p.summary, *p.decisions, *p.follow_ups, *p.excerpts, p.last_reply, " ".join(p.files)]
            title = p.topic or p.objective or f"episode ending {p.boundary}"
            ref = f"episode:{p.episode_id}"
            yield Doc(ref, ref, kind="episode", title=_cap(title, 200),
                      text="\n".join(x for x in parts if x), **{**base, "work_item_id": p.work_item_id})  # fmt: skip
        elif isinstance(p, ev.DecisionRecorded):
            yield Doc(key, key, kind="decision", title="decision", text=p.text, **base)

    def _work_item_doc(self, event: Event) -> Iterable[Doc]:
        item_id = getattr(event.payload, "work_item_id", "")
        state = self.store.state("work_item", item_id)
        if not isinstance(state, WorkItemState):
            return
        lines = [state.objective, *state.plan, *state.constraints, *(t.text for t in state.todos)]
        if state.report is not None:
            lines.append(self._text(state.report))
        ref = f"work_item:{item_id}"
        yield Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="work_item", ts_us=state.updated_us,
                  title=f"{state.title} ({state.status})", text="\n".join(x for x in lines if x),
                  seq=event.seq, work_item_id=item_id)  # fmt: skip

    def _task_doc(self, event: Event) -> Iterable[Doc]:
        task_id = getattr(event.payload, "task_id", "")
        state = self.store.state("task", task_id)
        if not isinstance(state, TaskProjection):
            return
        command = state.spec.get("command") or state.spec.get("task") or ""
        output = _cap(self._text(state.output), TOOL_RESULT_CAP) if state.output is not None else ""
        ref = f"task:{task_id}"
        yield Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="task", ts_us=state.updated_us,
                  title=f"{state.title} ({state.state})", text=f"{command}\n{output}".strip(),
                  seq=event.seq, work_item_id=event.work_item_id)  # fmt: skip

    # --- curated files ----------------------------------------------------------------------

    def sync_files(self, files: Iterable[FileSource], *, complete: Iterable[str] = ()) -> int:
        """Re-index the files that changed since they were last indexed. Returns how many did.

        ``complete`` names owners whose files ``files`` lists in full: an indexed file of theirs
        that is no longer listed was deleted (by hand, or moved away), and its documents go.
        """
        self.ensure()
        files = list(files)
        # (owner, ref, the file or None when it is gone from its listing, mtime, size)
        stale: list[tuple[str, str, FileSource | None, int, int]] = []
        for f in files:
            try:
                st = f.path.stat()
            except OSError:
                st = None
            mtime, size = (st.st_mtime_ns, st.st_size) if st is not None else (-1, -1)
            row = self.store.ledger.query(
                "SELECT mtime_ns, size FROM search_files WHERE owner = ? AND path = ?", (f.owner, f.ref)
            )
            if not row or tuple(row[0]) != (mtime, size):
                stale.append((f.owner, f.ref, f, mtime, size))
        listed = {(f.owner, f.ref) for f in files}
        for owner in dict.fromkeys(complete):
            for (ref,) in self.store.ledger.query("SELECT path FROM search_files WHERE owner = ?", (owner,)):
                if (owner, ref) not in listed:
                    stale.append((owner, ref, None, -1, -1))
        if not stale:
            return 0
        with self._tx() as conn:
            writer = _Writer(conn)
            for owner, ref, f, mtime, size in stale:
                for (doc_id,) in conn.execute(
                    "SELECT id FROM search_docs WHERE owner = ? AND key LIKE ? ESCAPE '\\'",
                    (owner, _like_prefix(f"{owner}|{ref}#")),
                ).fetchall():
                    writer.delete(doc_id)
                if f is None:
                    conn.execute("DELETE FROM search_files WHERE owner = ? AND path = ?", (owner, ref))
                    continue
                if mtime >= 0:
                    for doc in _file_docs(f, mtime):
                        writer.upsert(doc)
                conn.execute(
                    "INSERT INTO search_files(owner, path, mtime_ns, size) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(owner, path) DO UPDATE SET mtime_ns = excluded.mtime_ns, size = excluded.size",
                    (f.owner, f.ref, mtime, size),
                )
            writer.finish()
        return len(stale)

    # --- reading ----------------------------------------------------------------------------

    def owner_docs(self) -> dict[str, int]:
        self.ensure()
        return {r[0]: int(r[1]) for r in self.store.ledger.query("SELECT owner, docs FROM search_owners")}


_INDEXED_TYPES = frozenset(
    {
        "message.received",
        "turn.settled",
        "brief.delivered",
        "tool.resulted",
        "episode.sealed",
        "decision.recorded",
        "work_item.opened",
        "work_item.updated",
        "work_item.completed",
        "todo.changed",
        "task.created",
        "task.resulted",
        "durable.recorded",
        "durable.forgotten",
    }
)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _file_docs(f: FileSource, mtime_ns: int) -> Iterator[Doc]:
    """One document per markdown section (heading and the text up to the next heading)."""
    try:
        text = f.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    ts = mtime_ns // 1_000
    for i, part in enumerate(markdown.parts(text)):
        heading, body = part.title, "\n".join(part.body).strip()
        if not body and not heading:
            continue
        title = f"{f.title} > {heading}" if heading else f.title
        yield Doc(f"{f.owner}|{f.ref}#{i}", f.ref, owner=f.owner, kind="file", ts_us=ts, title=title, text=body)


# --- durable memory (RFC 0006) ---------------------------------------------------------------------

#: Most query terms a recall matches on.
DURABLE_TERMS = 48


def _drop_durable(conn: sqlite3.Connection, entry_id: str) -> None:
    row = conn.execute("SELECT id FROM search_durable_docs WHERE entry_id = ?", (entry_id,)).fetchone()
    if row is not None:
        conn.execute("DELETE FROM search_durable WHERE rowid = ?", (row[0],))
        conn.execute("DELETE FROM search_durable_docs WHERE id = ?", (row[0],))


def _index_durable(conn: sqlite3.Connection, p: ev.DurableRecorded | ev.DurableForgotten) -> None:
    """Follow the ``durable`` projection: a recorded entry goes in (unless it was recorded as
    history, already superseded), the entries it supersedes and a forgotten one go out. An entry
    is indexed once, as the projection records it once."""
    if isinstance(p, ev.DurableForgotten):
        _drop_durable(conn, p.entry_id)
        return
    for old in p.supersedes:
        _drop_durable(conn, old)
    seen = conn.execute("SELECT 1 FROM search_durable_docs WHERE entry_id = ?", (p.entry_id,)).fetchone()
    if p.superseded_by or seen is not None:
        return
    e = p.entry
    cur = conn.execute("INSERT INTO search_durable_docs(entry_id, owner) VALUES (?, ?)", (p.entry_id, e.owner))
    conn.execute(
        "INSERT INTO search_durable(rowid, body, meta, scope) VALUES (?, ?, ?, ?)",
        (cur.lastrowid, fold(e.text), fold(f"{e.subject.split(':', 1)[-1]} {e.kind}"), owner_token(e.owner)),
    )


def durable_expression(owners: Iterable[str], query: str) -> str | None:
    """The FTS5 MATCH expression for the durable entries of ``owners`` that share a stem with
    ``query`` (its content words quoted and OR-ed; never raw syntax), or ``None`` without any."""
    terms = [t for t in plan_query(query).terms if t not in STOP_WORDS][:DURABLE_TERMS]
    tokens = [owner_token(o) for o in dict.fromkeys(owners)]
    if not terms or not tokens:
        return None
    return f"{{body meta}} : ({' OR '.join(quote(t) for t in terms)}) AND scope : ({' OR '.join(tokens)})"


def durable_matches(store: Store, owners: Iterable[str], query: str, *, limit: int = 50) -> dict[str, float]:
    """Entry id -> relevance in (0, 1] (bm25 relative to the best match) of the active durable
    entries of ``owners`` the index matches with ``query``. Read-only and never catching up (it runs
    on the turn path; the daemon keeps the index current): ``{}`` before the index has the table.
    """
    expr = durable_expression(owners, query)
    if expr is None or not store.ledger.query(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_durable'"
    ):
        return {}
    rows = store.ledger.query(
        "SELECT d.entry_id, bm25(search_durable, 1.0, 0.5, 0.0) AS rank FROM search_durable "
        "JOIN search_durable_docs d ON d.id = search_durable.rowid WHERE search_durable MATCH ? "
        "ORDER BY rank LIMIT ?",
        (expr, limit),
    )
    best = min((float(r[1]) for r in rows), default=0.0)
    if best >= 0:  # bm25 is negative for a match; nothing (or nothing meaningful) matched
        return {}
    return {str(entry_id): float(rank) / best for entry_id, rank in rows}
