"""The search index's schema: its tables as named, versioned migrations, and its FTS tokens.

The index is a projection (``holon.projections.framework``): its DDL lives here as migrations in
the ``search`` namespace (``projection_migrations``), never mixed with the ledger's own numbers.
Migration 1 is the layout every home had before the index had migrations, written with
``IF NOT EXISTS`` so that it adopts such a home's tables as they are; later changes are new
migrations appended below. ``recreate`` drops the tables and runs the migrations again in the
caller's transaction: how a rebuild or an ``INDEX_VERSION`` bump empties the index (ids restart,
FTS5 segments are not deleted row by row).

Tables: ``search_docs`` holds what a hit shows (ref, owner, kind, time, sender, display text);
the text itself is indexed by the search engine (``holon.memory.engine``, tantivy: migration 2
dropped the FTS5 tables ``search_fts`` and ``search_segments``); ``search_segment_info`` says
which conversation segment each turn belongs to; ``search_files``
and ``search_owners`` are bookkeeping of curated files and per-owner document counts;
``search_durable*`` hold durable memory entries; ``search_vectors`` optional embeddings;
``search_states`` and ``search_counts`` the fold's own state of work items and tasks and the
counts of versions (migration 4).
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3

from holon.errors import LedgerError
from holon.ledger.migrations import Migration
from holon.ledger.sql import Conn

__all__ = ["MIGRATIONS", "TABLES", "kind_token", "owner_token", "recreate"]

_TOKENIZER = "porter unicode61 remove_diacritics 2"
_LAYOUT_1 = (
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
#: 2: the text index moved to tantivy (``holon.memory.engine``): the FTS5 tables of turns and
#: segments go (the durable entries' FTS5 table stays: few rows, read on the turn path).
_LAYOUT_2 = ("DROP TABLE IF EXISTS search_fts", "DROP TABLE IF EXISTS search_segments")
#: 3: owner filtering happens in the engine; the (owner, kind, id) index cost ~50 bytes a document.
_LAYOUT_3 = ("DROP INDEX IF EXISTS search_docs_owner_kind",)
#: 4: rewritten work items and tasks keep their earlier versions, superseded (RFC 0008, "Identical
#: ranking on every node"): a superseded row's key becomes ``~<id>`` (the live version keeps the
#: document's key), searches skip it; ``search_states`` holds the index's own fold of each work
#: item and task (a version's text is a function of the ledger up to its event, never of the
#: projection's state when the batch ran); ``search_counts`` the counts compaction is decided on.
_LAYOUT_4 = (
    "ALTER TABLE search_docs ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS search_docs_superseded ON search_docs(owner, id) WHERE superseded = 1",
    """
    CREATE TABLE IF NOT EXISTS search_states (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        state TEXT NOT NULL
    )
    """,
    "CREATE TABLE IF NOT EXISTS search_counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
)
TABLES = (
    "search_docs",
    "search_fts",
    "search_segments",
    "search_segment_info",
    "search_files",
    "search_owners",
    "search_vectors",
    "search_durable_docs",
    "search_durable",
    "search_states",
    "search_counts",
)


#: The index's schema, in order. Never edit one that shipped: append a new migration.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "search_tables", _LAYOUT_1),
    Migration(2, "search_text_in_engine", _LAYOUT_2),
    Migration(3, "search_docs_without_owner_index", _LAYOUT_3),
    Migration(4, "search_docs_versions", _LAYOUT_4),
)


def sidecar(conn: Conn) -> sqlite3.Connection:
    """``conn`` as the SQLite connection the index's SQL (FTS5, ``lastrowid``, ``PRAGMA``) needs.

    The search index stays on SQLite whatever engine holds the ledger (RFC 0008, decision 5): on a
    SQLite home its tables sit beside the ledger's and ride in its transactions; when the ledger is
    remote (PostgreSQL) they live in the node's own file (``holon.projections.local.LocalDb``,
    ``Store.local_db``). Any other connection is a bug, refused here."""
    if not isinstance(conn, sqlite3.Connection):
        raise LedgerError(f"the search index needs a SQLite database; this connection's engine is {conn.dialect}")
    return conn


def recreate(conn: sqlite3.Connection) -> None:
    """Drop every index table and build them again from the migrations (inside the caller's
    transaction): an empty index whose schema is exactly what the migrations make."""
    for table in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for m in MIGRATIONS:
        for stmt in m.statements:
            conn.execute(stmt)
    # A new epoch of superseded versions (``_Writer.counts``): what a process cached of the
    # dropped tables' versions must not be taken for the new ones'.
    conn.execute("INSERT INTO search_counts(name, n) VALUES ('epoch', ?)", (secrets.randbits(62),))


def owner_token(owner: str) -> str:
    """A single FTS token naming an owner (FTS5 would split ``agent:agt_01..`` into pieces)."""
    return "o" + hashlib.blake2b(owner.encode(), digest_size=8).hexdigest()


def kind_token(kind: str) -> str:
    return "k" + kind.replace("_", "")
