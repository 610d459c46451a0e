"""The search index: a projection of the ledger (and of curated files) on SQLite and tantivy.

Unlike the synchronous projections, the index is not folded inside each append: indexing text is
the slowest thing holon does per event and nothing on the turn path needs it. It lags behind the
ledger and catches up in batches (``SearchIndex.catch_up``), each batch committing its rows with
the ``search`` cursor in one transaction, so a crash loses nothing and repeats nothing. Every
search first catches up and reports how fresh the index is (``Freshness``).

``SearchIndex`` is a ``Projection`` (``holon.projections.framework``): its tables are named,
versioned migrations in the ``search`` namespace (``holon.memory.index_schema``); bumping
``INDEX_VERSION`` (or ``rebuild``) empties them and the next catch-up indexes the ledger from seq
0. Events are read through the ledger's typed seam (``EventQuery``), only the types the index uses.

The index by concern:

* ``index_schema``: tables (migrations), ``recreate``, the owner/kind FTS tokens;
* ``engine``: the text index (tantivy), committed inside each batch's transaction before it;
* ``index_writer``: ``Doc`` and the writer folding documents into the tables and the engine;
* ``index_docs``: which events become which documents;
* ``index_files``: curated markdown files, one document per section, re-read when changed;
* ``index_durable``: durable memory entries (RFC 0006) for recall;
* this module: the projection itself (catch-up, rebuilds, freshness, bulk loading).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from holon.ledger import EventQuery, Transaction
from holon.memory.engine import Engine, Hidden, HiddenTerms
from holon.memory.index_docs import INDEXED_TYPES, TOOL_RESULT_CAP, UNINDEXED_TOOLS, DocMaker, index_events
from holon.memory.index_durable import DURABLE_TERMS, durable_expression, durable_matches
from holon.memory.index_files import FileSource, sync_files
from holon.memory.index_schema import MIGRATIONS, kind_token, owner_token, recreate, sidecar
from holon.memory.index_writer import (
    CONTEXT_CAP,
    DOC_CAP,
    REBUILD_SHARE,
    ROW_COLUMNS,
    SEGMENT_GAP_US,
    SEGMENT_MAX_TURNS,
    Doc,
    _Writer,
    engine_deleted,
    engine_for,
    rebuild_engine,
    settle_engine,
    version_row,
)
from holon.projections import Store, framework
from holon.projections.framework import Host, open_projection, read_cursor, stored_cursor

__all__ = [
    "BATCH",
    "CONTEXT_CAP",
    "CURSOR_NAME",
    "DOC_CAP",
    "DURABLE_TERMS",
    "INDEX_VERSION",
    "SEGMENT_GAP_US",
    "SEGMENT_MAX_TURNS",
    "TOOL_RESULT_CAP",
    "UNINDEXED_TOOLS",
    "Doc",
    "FileSource",
    "Freshness",
    "Progress",
    "SearchIndex",
    "durable_expression",
    "durable_matches",
    "kind_token",
    "owner_token",
]

#: Bump when what or how documents are indexed changes: every home then rebuilds its index.
#: 4: document ids are never reused (a rewritten document must not inherit a cached vector's id).
#: 5: durable memory entries (``search_durable``), for recall.
#: 6: the text is indexed by tantivy (``holon.memory.engine``), without the neighbours' text.
#: 7: a turn's engine row carries its ``context`` (its text with the two turns before it).
#: 8: engine rows carry the prior, packed features, segment and the two turns before (fast fields).
#: 9: the segment is an indexed field too (a search reads a lifted segment's other turns), and
#:    the sender's words a field of their own (whether a query can name a sender).
#: 10: work items and tasks take their ids at their last event of a batch (not after the batch's
#:    other documents), so ids follow the ledger whatever the batches; an engine that rewrote
#:    documents is rebuilt (no deleted document in its statistics): identical ranking on every node.
#: 11: rewritten work items and tasks keep their superseded versions in the engine (one version
#:    per event that changes them, folded by the index itself), compacted at points the ledger
#:    decides: the engine's statistics are a function of the ledger alone (migration 4).
#: 12: a possessive of an irregular form ("children's", "people's") is indexed by its base form, as
#:    a query names it ("children" asks for "child"); it was indexed unfolded, so no query found it.
#: (A change of the tables themselves is a new migration in ``index_schema``, usually with a bump.)
INDEX_VERSION = 12
CURSOR_NAME = "search"
#: Events per catch-up transaction.
BATCH = 2_000

#: What each process keeps of the superseded versions, by engine directory: the ``search_counts``
#: it was read at (Any: SQLite values), their terms, their ids by owner, and the ``Hidden`` of
#: each set of owners searched.
_HIDDEN: dict[str, tuple[dict[Any, Any], HiddenTerms, dict[str, set[int]], dict[tuple[str, ...], Hidden]]] = {}

Progress = Callable[[int, int], None]
"""``(done, total)`` after each batch of a long indexing run (``holon memory reindex``)."""


@dataclass(frozen=True, slots=True)
class Freshness:
    indexed_seq: int
    head_seq: int

    @property
    def lag(self) -> int:
        return self.head_seq - self.indexed_seq

    def as_dict(self) -> dict[str, int]:
        return {"indexed_seq": self.indexed_seq, "head_seq": self.head_seq, "lag_events": self.lag}


class SearchIndex:
    """The search index of one home. Cheap to create; tables are migrated on first use."""

    name = CURSOR_NAME
    migrations = MIGRATIONS

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db: Host = store.local_db()
        """Where the index's tables and cursor live: the ledger's own database on SQLite, this
        node's local file when the ledger is remote (``holon.projections.local``)."""
        self._ready = False
        self._docs = DocMaker(store)
        self._engine: Engine | None = None

    @property
    def version(self) -> int:
        return INDEX_VERSION  # read at each use: tests bump the module's value

    # --- schema -----------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.db.transaction() as tx:
            yield sidecar(tx.conn)

    def ensure(self) -> None:
        """Migrate the tables; empty them when ``INDEX_VERSION`` changed (the cursor goes to 0)."""
        if self._ready:
            return
        open_projection(self.db, self)
        self._ready = True

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = engine_for(self.db.query("PRAGMA database_list"))
        return self._engine

    def clear(self, tx: Transaction) -> None:
        conn = sidecar(tx.conn)
        recreate(conn)
        engine_for(conn.execute("PRAGMA database_list").fetchall()).write([], clear=True)

    def _check_engine(self) -> None:
        """Rebuild when the engine holds fewer documents than SQLite counts: its directory was
        lost or damaged (it then opens empty), or a clear reached it but its transaction did not.
        When it holds more, or any document of an id the tables never gave out (a compaction
        commits the engine in the middle of a batch: the counts may then agree while the documents
        differ), a process died between the engine's commit and its transaction's: the engine is
        rebuilt from the tables (cheap beside a refold) before the batch is folded again, since
        folding it again over the engine's copy would delete and re-add those documents, and
        tantivy counts deleted documents in its statistics (RFC 0008, "Identical ranking on every
        node"); so it is when its deleted documents reach ``REBUILD_SHARE`` of its live ones (a
        curated file's edits, an index of an older holon). Each is re-checked under the write
        lock: a fold in progress elsewhere commits the engine first."""
        counts = self.owner_docs()
        expected = sum(max(0, n) for n in counts.values())
        held = self.engine.num_docs()
        if (
            held == expected
            and not self.engine.holds_beyond(self._last_id())
            and self.engine.deleted(counts) < REBUILD_SHARE * held
        ):
            return
        with self._tx() as conn:
            expected = sum(max(0, int(r[0])) for r in conn.execute("SELECT docs FROM search_owners"))
            held = self.engine.num_docs()
            ahead = held > expected or self.engine.holds_beyond(self._last_id(conn))
            lost = not ahead and bool(expected) and held < expected
            if ahead:
                rebuild_engine(conn, self.engine)
            elif not lost:
                settle_engine(conn, self.engine)
        if lost:
            framework.rebuild(self.db, self)

    def _last_id(self, conn: sqlite3.Connection | None = None) -> int:
        """The last id the tables gave out (``AUTOINCREMENT``'s counter: rolled back with its
        transaction, never lowered by a deletion)."""
        sql = "SELECT seq FROM sqlite_sequence WHERE name = 'search_docs'"
        rows = conn.execute(sql).fetchall() if conn is not None else self.db.query(sql)
        return int(rows[0][0]) if rows else 0

    def compact(self) -> int:
        """Rebuild the engine from the tables if it holds any deleted document (whatever their
        share); returns how many it held. Two nodes' indexes of one ledger, both compacted, rank
        every query identically (RFC 0008, "Identical ranking on every node")."""
        self.ensure()
        with self._tx() as conn:
            return settle_engine(conn, self.engine, share=0.0)

    def superseded(self) -> frozenset[int]:
        """The ids of the superseded versions the engine holds (``_Writer.supersede``)."""
        self.ensure()
        return frozenset(int(r[0]) for r in self.db.query("SELECT id FROM search_docs WHERE superseded = 1"))

    def hidden(self, owners: Sequence[str]) -> Hidden:
        """The superseded versions of ``owners``, as a search skips and counts them (``Hidden``).

        Kept per process and read again only when the tables' ``search_counts`` changed (a version
        superseded, a compaction, an owner dropped, the tables recreated): a version never
        changes, so only the new ones of the searched owners are read and analysed (all of them
        again after a new ``epoch``: those dropped are let go)."""
        self.ensure()
        key: dict[Any, Any] = dict(self.db.query("SELECT name, n FROM search_counts"))  # Any: SQLite values
        path = str(self.engine.path)
        cached = _HIDDEN.get(path)
        if cached is None or cached[0] != key:
            terms = cached[1] if cached is not None and cached[0].get("epoch") == key.get("epoch") else HiddenTerms()
            owned: dict[str, set[int]] = {}
            for doc_id, owner in self.db.query("SELECT id, owner FROM search_docs WHERE superseded = 1"):
                owned.setdefault(str(owner), set()).add(int(doc_id))
            cached = _HIDDEN[path] = (key, terms, owned, {})
        key, terms, owned, views = cached
        mine = tuple(sorted(set(owners)))
        if mine not in views:
            ids = frozenset().union(*(owned.get(o, ()) for o in mine))
            missing = [i for i in ids if i not in terms.docs]
            for at in range(0, len(missing), 500):  # only the searched owners' versions are analysed
                chunk = missing[at : at + 500]
                sql = f"SELECT {ROW_COLUMNS} FROM search_docs WHERE id IN ({','.join('?' * len(chunk))})"
                terms.add(self.engine.hidden_docs(version_row(r) for r in self.db.query(sql, chunk)))
            views[mine] = Hidden(ids, terms)
        return views[mine]

    def deleted_in_engine(self) -> int:
        """Deleted documents the engine still counts in its BM25 statistics (0 after a rebuild)."""
        self.ensure()
        with self._tx() as conn:
            return engine_deleted(conn, self.engine)

    def fold(self, tx: Transaction, after: int, upto: int) -> None:
        """Index the events ``after < seq <= upto`` (the framework moves the cursor with them)."""
        events = tx.find(EventQuery(types=INDEXED_TYPES, after=after, upto=upto))
        index_events(sidecar(tx.conn), self._docs, events, durable=True)

    def rebuild(self, *, progress: Progress | None = None) -> Freshness:
        """Empty the index and index the whole ledger again (``holon memory reindex``)."""
        framework.rebuild(self.db, self)
        self._ready = False
        return self.catch_up(progress=progress)

    def rebuild_owner(self, agent_id: str, *, progress: Progress | None = None) -> int:
        """Drop one agent's documents (events, work items, tasks, its curated files) and index its
        events again up to the cursor; returns how many of its events were read. Other owners'
        documents and durable entries (which follow their own projection) are not touched."""
        self.catch_up()
        owner = f"agent:{agent_id}"
        ledger, db = self.store.ledger, self.db
        with db.transaction() as tx:
            conn = sidecar(tx.conn)
            writer = _Writer(conn)
            writer.delete_owner(owner)
            conn.execute("DELETE FROM search_files WHERE owner = ?", (owner,))
            writer.finish()
            cursor = read_cursor(tx.conn, CURSOR_NAME)
            upto = cursor.seq if cursor is not None else 0
        total = ledger.count(EventQuery(agent_id=agent_id, upto=upto))
        after = done = 0
        while True:
            with db.transaction() as tx:
                window = tx.find_keys(EventQuery(agent_id=agent_id, after=after, upto=upto, limit=BATCH))
                if not window:
                    return done
                last = window[-1].seq
                events = tx.find(EventQuery(types=INDEXED_TYPES, agent_id=agent_id, after=after, upto=last))
                index_events(sidecar(tx.conn), self._docs, events, durable=False)
            after, done = last, done + len(window)
            if progress is not None:
                progress(done, total)

    # --- catching up ------------------------------------------------------------------------

    def cursor(self) -> int:
        self.ensure()
        cur = stored_cursor(self.db, CURSOR_NAME)
        return cur.seq if cur is not None else 0

    def freshness(self) -> Freshness:
        return Freshness(self.cursor(), self.store.ledger.head())

    def catch_up(self, *, max_events: int | None = None, progress: Progress | None = None) -> Freshness:
        """Index events after the cursor, ``BATCH`` per transaction. Safe to run from any process.
        ``progress(indexed_seq, head_seq)`` after each batch."""
        self.ensure()
        self._check_engine()
        fresh = self.freshness()
        if fresh.lag == 0:
            return fresh
        framework.catch_up(
            self.db,
            self,
            window=BATCH,
            max_events=max_events,
            progress=None if progress is None else (lambda seq: progress(seq, fresh.head_seq)),
        )
        return self.freshness()

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

    # --- curated files ----------------------------------------------------------------------

    def sync_files(self, files: Iterable[FileSource], *, complete: Iterable[str] = ()) -> int:
        """Re-index the curated files that changed (see ``holon.memory.index_files.sync_files``)."""
        self.ensure()
        return sync_files(self.db, files, complete=complete)

    # --- reading ----------------------------------------------------------------------------

    def live_docs(self) -> dict[str, int]:
        """Documents per owner that a search can return (``owner_docs`` less the superseded
        versions; a scan of the tables, for reports)."""
        self.ensure()
        sql = "SELECT owner, count(*) FROM search_docs WHERE superseded = 0 GROUP BY owner"
        return {str(r[0]): int(r[1]) for r in self.db.query(sql)}

    def owner_docs(self) -> dict[str, int]:
        """Documents per owner the engine holds (superseded versions included: ``search_owners``)."""
        self.ensure()
        return {r[0]: int(r[1]) for r in self.db.query("SELECT owner, docs FROM search_owners")}
