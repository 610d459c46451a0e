"""The projection framework: per-projection migrations, versions, and a cursor committed with the rows.

A toy projection (events counted per type) exercises the protocol; the search index and the evolve
queue are opened on homes laid out by the holon before projections had migrations.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.memsearch import answer, say

from holon.errors import MigrationError
from holon.evolve.jobs import JobQueue
from holon.ledger import EventQuery, Transaction
from holon.ledger.pg.migrations import MIGRATIONS as PG_MIGRATIONS
from holon.ledger.sqlite.migrations import MIGRATIONS as LEDGER_MIGRATIONS
from holon.memory import index as search_index
from holon.memory.access import search_memory
from holon.memory.index import SearchIndex
from holon.projections import Projector, Store, framework
from holon.projections.framework import Migration, Projection, open_projection
from holon.projections.state import AgentState

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``), but those
    marked ``sqlite_only`` (the search index)."""
    return engine


@dataclass
class Toy:
    """Counts events per type in ``toy_counts``."""

    name: str = "toy"
    version: int = 1
    migrations: Sequence[Migration] = (
        Migration(1, "counts", ("CREATE TABLE toy_counts (type TEXT PRIMARY KEY, n INTEGER NOT NULL)",)),
        Migration(2, "counts_by_n", ("CREATE INDEX toy_counts_n ON toy_counts(n)",)),
    )
    fail_at: int | None = None
    folded: list[tuple[int, int]] = field(default_factory=list)

    def clear(self, tx: Transaction) -> None:
        tx.conn.execute("DELETE FROM toy_counts")

    def fold(self, tx: Transaction, after: int, upto: int) -> None:
        self.folded.append((after, upto))
        for e in tx.find(EventQuery(after=after, upto=upto)):
            tx.conn.execute(
                "INSERT INTO toy_counts(type, n) VALUES (?, 1) ON CONFLICT(type) DO UPDATE SET n = toy_counts.n + 1",
                (e.type,),
            )
            if self.fail_at is not None and e.seq == self.fail_at:
                raise RuntimeError("fold failed")


def counts(store: Store) -> dict[str, int]:
    return dict(store.ledger.query("SELECT type, n FROM toy_counts"))


def cursor(store: Store, name: str) -> tuple[int, int] | None:
    cur = framework.stored_cursor(store.ledger, name)
    return None if cur is None else (cur.seq, cur.version)


def chat(store: Store, agent: AgentState, n: int) -> None:
    for i in range(n):
        say(store, agent, f"tell me about aardvark number {i}")
        answer(store, agent, f"aardvark {i} eats ants")


def test_the_three_projections_follow_the_protocol(store: Store) -> None:
    for p in (Projector(), SearchIndex(store), JobQueue(store), Toy()):
        assert isinstance(p, Projection)
    assert {SearchIndex(store).name, JobQueue(store).name, Projector().name} == {"search", "evolve", "projections"}
    SearchIndex(store).ensure()
    JobQueue(store).ensure()
    assert store.cursors() == {"evolve": 0, "projections": store.ledger.head(), "search": 0}
    # On PostgreSQL the index is the node's own projection: its cursor is in the node's file.
    assert framework.cursors(store.local_db())["search"] == 0


def test_migrations_apply_once_each_in_their_own_namespace(store: Store) -> None:
    toy = Toy()
    ledger_before = store.ledger.query("SELECT version, name FROM schema_migrations ORDER BY version")
    assert framework.migrate_projection(store.ledger, "toy", toy.migrations, now_us=1) == [1, 2]
    assert framework.migrate_projection(store.ledger, "toy", toy.migrations, now_us=2) == []
    assert framework.applied_migrations(store.ledger, "toy") == [1, 2]
    assert store.ledger.query("SELECT projection, version, name FROM projection_migrations ORDER BY version") == [
        ("toy", 1, "counts"),
        ("toy", 2, "counts_by_n"),
    ]
    # The ledger's own numbers are untouched.
    assert store.ledger.query("SELECT version, name FROM schema_migrations ORDER BY version") == ledger_before
    own = PG_MIGRATIONS if store.ledger.engine.dialect == "postgresql" else LEDGER_MIGRATIONS
    assert ledger_before[-1][0] == own[-1].version


def test_a_failing_migration_leaves_no_trace_and_a_newer_schema_is_refused(store: Store) -> None:
    broken = (*Toy().migrations, Migration(3, "broken", ("CREATE TABLE toy_more (x)", "CREATE TABLE toy_counts (y)")))
    with pytest.raises(MigrationError, match="migration toy 3 \\(broken\\) failed"):
        framework.migrate_projection(store.ledger, "toy", broken, now_us=1)
    assert framework.applied_migrations(store.ledger, "toy") == [1, 2]  # the earlier steps stay
    assert not store.ledger.has_table("toy_more")  # rolled back
    with pytest.raises(MigrationError, match="newer than this holon"):
        framework.migrate_projection(store.ledger, "toy", Toy().migrations[:1], now_us=1)
    with pytest.raises(MigrationError, match="numbered"):
        framework.migrate_projection(store.ledger, "toy", Toy().migrations[1:], now_us=1)


def test_catch_up_in_windows_equals_one_pass_and_the_cursor_moves_with_the_rows(
    store: Store, alice: AgentState
) -> None:
    chat(store, alice, 6)
    head = store.ledger.head()
    toy = Toy()
    open_projection(store.ledger, toy)
    assert cursor(store, "toy") == (0, 1)
    assert framework.catch_up(store.ledger, toy, window=5, max_events=7) == 7
    assert cursor(store, "toy") == (7, 1)
    assert toy.folded == [(0, 5), (5, 7)]
    framework.catch_up(store.ledger, toy, window=5)
    assert cursor(store, "toy") == (head, 1)
    stepped = counts(store)
    assert sum(stepped.values()) == head
    framework.rebuild(store.ledger, toy)
    assert cursor(store, "toy") == (0, 1) and counts(store) == {}
    framework.catch_up(store.ledger, toy, window=head)
    assert counts(store) == stepped


def test_a_failed_fold_commits_neither_rows_nor_cursor(store: Store, alice: AgentState) -> None:
    chat(store, alice, 3)
    toy = Toy(fail_at=store.ledger.head() - 1)
    open_projection(store.ledger, toy)
    framework.catch_up(store.ledger, toy, window=2, max_events=2)
    before = (counts(store), cursor(store, "toy"))
    with pytest.raises(RuntimeError):
        framework.catch_up(store.ledger, toy, window=100)
    assert (counts(store), cursor(store, "toy")) == before


def test_a_version_bump_clears_and_refolds(store: Store, alice: AgentState) -> None:
    chat(store, alice, 2)
    toy = Toy()
    open_projection(store.ledger, toy)
    framework.catch_up(store.ledger, toy, window=100)
    full = counts(store)
    bumped = Toy(version=2)
    open_projection(store.ledger, bumped)
    assert cursor(store, "toy") == (0, 2) and counts(store) == {}
    framework.catch_up(store.ledger, bumped, window=100)
    assert counts(store) == full
    open_projection(store.ledger, bumped)  # current: nothing happens
    assert cursor(store, "toy") == (store.ledger.head(), 2)


def test_a_queue_starts_at_the_head_when_told(store: Store, alice: AgentState) -> None:
    chat(store, alice, 2)
    queue = JobQueue(store, backfill=False)
    queue.ensure()
    assert cursor(store, "evolve") == (store.ledger.head(), 1)
    assert queue.enqueue(1) == 0
    answer(store, alice, "one more")
    assert queue.enqueue(2) == 1
    assert queue.rebuild(3) == 3  # every settled turn again
    assert queue.counts()["queued"] == 3


# --- homes laid out before projections had migrations ----------------------------------------------

# Frozen copies of what the previous holon's ``SearchIndex.ensure`` (INDEX_VERSION 5) and
# ``JobQueue.ensure`` ran: never update them to follow the current migrations.
OLD_SEARCH_V5 = (
    """CREATE TABLE IF NOT EXISTS search_docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, ref TEXT NOT NULL, owner TEXT NOT NULL,
        kind TEXT NOT NULL, seq INTEGER, ts_us INTEGER NOT NULL, sender TEXT NOT NULL DEFAULT '', segment INTEGER,
        work_item_id TEXT, words INTEGER NOT NULL DEFAULT 0, question INTEGER NOT NULL DEFAULT 0,
        title TEXT NOT NULL, text TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS search_docs_owner_kind ON search_docs(owner, kind, id)",
    "CREATE INDEX IF NOT EXISTS search_docs_ts ON search_docs(ts_us)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(body, prev, next, meta, scope, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_segments USING fts5(body, scope, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    """CREATE TABLE IF NOT EXISTS search_segment_info (
        id INTEGER PRIMARY KEY, owner TEXT NOT NULL, last_ts_us INTEGER NOT NULL, turns INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS search_segment_owner ON search_segment_info(owner, id)",
    """CREATE TABLE IF NOT EXISTS search_files (
        owner TEXT NOT NULL, path TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL,
        PRIMARY KEY (owner, path))""",
    "CREATE TABLE IF NOT EXISTS search_owners (owner TEXT PRIMARY KEY, docs INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS search_durable_docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, entry_id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL)""",
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_durable USING fts5(body, meta, scope, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    """CREATE TABLE IF NOT EXISTS search_vectors (
        id INTEGER NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (id, model)) WITHOUT ROWID""",
)
OLD_EVOLVE = (
    """CREATE TABLE IF NOT EXISTS evolve_jobs (
        key TEXT PRIMARY KEY, agent_id TEXT NOT NULL, turn_id TEXT NOT NULL, settled_seq INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0, not_before_us INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,
        lease_until_us INTEGER, last_error TEXT, created_us INTEGER NOT NULL, finished_us INTEGER)""",
    "CREATE INDEX IF NOT EXISTS evolve_jobs_ready ON evolve_jobs(status, not_before_us, settled_seq)",
)


def _old_layout(store: Store, statements: Sequence[str], cursors: dict[str, tuple[int, int]]) -> None:
    with store.ledger.transaction() as tx:
        for stmt in statements:
            tx.conn.execute(stmt)
        for name, (seq, version) in cursors.items():
            tx.conn.execute("INSERT INTO projection_cursors(name, seq, version) VALUES (?, ?, ?)", (name, seq, version))


@sqlite_only("an old SQLite home's layout, with the search index (which stays on SQLite, RFC 0008 step 7)")
def test_an_old_layout_home_is_adopted_without_a_rebuild(store: Store, alice: AgentState) -> None:
    chat(store, alice, 3)
    head = store.ledger.head()
    _old_layout(store, OLD_SEARCH_V5 + OLD_EVOLVE, {"search": (head, 5), "evolve": (head, 1)})
    with store.ledger.transaction() as tx:  # what the old index and queue held (a marker each)
        tx.conn.execute("INSERT INTO search_owners(owner, docs) VALUES ('marker', 0)")
        tx.conn.execute(
            "INSERT INTO evolve_jobs(key, agent_id, turn_id, settled_seq, status, created_us) "
            "VALUES ('turn:old', ?, 'old', 1, 'done', 0)",
            (alice.agent_id,),
        )
    assert not store.ledger.query("SELECT 1 FROM sqlite_master WHERE name = 'projection_migrations'")
    index, queue = SearchIndex(store), JobQueue(store)
    # The search index's layout 1 is adopted, then migration 2 and version 6 (the engine) start it
    # over: its cursor goes back to 0 and the FTS5 tables are gone. The queue is adopted as it was.
    assert index.cursor() == 0
    assert not store.ledger.query("SELECT 1 FROM sqlite_master WHERE name IN ('search_fts', 'search_segments')")
    assert queue.lag() == 0 and queue.counts()["done"] == 1
    assert framework.applied_migrations(store.ledger, "search") == [1, 2, 3, 4]
    assert framework.applied_migrations(store.ledger, "evolve") == [1]
    chat(store, alice, 1)
    assert search_memory(store, alice, "aardvark").freshness.lag == 0
    assert queue.enqueue(5) == 1


@sqlite_only("an old SQLite home's index layout, in the ledger's own file")
def test_an_older_index_version_is_upgraded_and_rebuilt(store: Store, alice: AgentState) -> None:
    chat(store, alice, 3)
    v4 = tuple(s for s in OLD_SEARCH_V5 if "search_durable" not in s)  # INDEX_VERSION 4 had no durable tables
    _old_layout(store, v4, {"search": (store.ledger.head(), 4)})
    with store.ledger.transaction() as tx:
        tx.conn.execute("INSERT INTO search_owners(owner, docs) VALUES ('stale', 3)")
    index = SearchIndex(store)
    assert index.cursor() == 0  # a version bump: emptied, rebuilt from the ledger
    assert store.ledger.query("SELECT count(*) FROM search_owners") == [(0,)]
    assert store.ledger.query("SELECT 1 FROM sqlite_master WHERE name = 'search_durable'")
    assert index.catch_up().lag == 0
    assert cursor(store, "search") == (store.ledger.head(), search_index.INDEX_VERSION)
    assert search_memory(store, alice, "aardvark").hits


@sqlite_only("compares layouts in an in-memory sqlite3 database, no store")
def test_migration_one_is_the_old_layout() -> None:
    """The adopting migrations make exactly the tables the old code made."""
    from holon.evolve.jobs import MIGRATIONS as EVOLVE
    from holon.memory.index_schema import MIGRATIONS as SEARCH

    def layout(statements: Sequence[str]) -> dict[str, list[tuple[object, ...]]]:
        conn = sqlite3.connect(":memory:")
        for stmt in statements:
            conn.execute(stmt)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: conn.execute(f"PRAGMA table_info({n})").fetchall() for n in sorted(names)}

    assert layout(SEARCH[0].statements) == layout(OLD_SEARCH_V5)
    assert layout(EVOLVE[0].statements) == layout(OLD_EVOLVE)


def test_the_queue_has_the_same_columns_on_both_engines_and_64_bit_times(
    store: Store, alice: AgentState, engine: EngineTarget
) -> None:
    """RFC 0008 step 6: ``evolve_jobs`` per engine, the same columns in the same order; on
    PostgreSQL (whose ``INTEGER`` is 32-bit) a microsecond time and a seq fit."""
    from holon.evolve.jobs import MIGRATIONS, PG_MIGRATIONS

    conn = sqlite3.connect(":memory:")
    for stmt in MIGRATIONS[0].statements:
        conn.execute(stmt)
    sqlite_columns = [r[1] for r in conn.execute("PRAGMA table_info(evolve_jobs)")]
    queue = JobQueue(store)
    assert queue.migrations == (PG_MIGRATIONS if engine.name == "postgresql" else MIGRATIONS)
    chat(store, alice, 1)
    big = 1_800_000_000_000_000  # 2027 in microseconds: far past 2**31
    assert queue.enqueue(big) == 1
    assert queue.lease("w", big) is not None
    [(created,)] = store.ledger.query("SELECT created_us FROM evolve_jobs", ())
    assert created == big
    if engine.name == "postgresql":
        rows = store.ledger.query(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'evolve_jobs' "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            (),
        )
        assert [r[0] for r in rows] == sqlite_columns
        types = dict(rows)
        assert {c for c, t in types.items() if t == "bigint"} == {
            "settled_seq", "not_before_us", "lease_until_us", "created_us", "finished_us"
        }  # fmt: skip
