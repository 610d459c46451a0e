"""Search across engines (RFC 0008 step 7): the same events appended through a ``Store`` on SQLite
and on PostgreSQL give the same search index, the PostgreSQL home's in the node's own file
(``<home>/nodes/local/search.db``), and every query ranks identically on both (refs, scores, order,
snippets, totals); a lost node-local index is rebuilt from the shared ledger to the same results,
a node file folded from another ledger is not trusted, and the file's path is a function of the
node name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.engines import open_store, three_agents_script
from helpers.pg import PgDatabase

from holon.bench import workload
from holon.config import resolve_home
from holon.errors import LedgerError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import index as search_index
from holon.memory.access import search_memory
from holon.memory.index import SearchIndex
from holon.projections import Store
from holon.projections.local import LocalDb, node_db_path

QUERIES = ("ledger", "projection budget", "memory search tool", "operator brief timer", "request 17", "plan todo",
           "context episode wait", "nothing-like-this", "result", "agent ledger projection memory")  # fmt: skip
DOCS = "SELECT id, key, ref, owner, kind, seq, ts_us, sender, segment, work_item_id, words, question, title, text FROM search_docs ORDER BY id"


def _results(store: Store) -> list[Any]:
    out: list[Any] = []
    for agent in sorted(store.agents(), key=lambda a: a.name):
        for q in QUERIES:
            r = search_memory(store, agent, q, limit=20)
            out.append(
                (
                    agent.name,
                    q,
                    r.total,
                    r.exhaustive,
                    [(h.ref, h.kind, h.title, h.snippet, h.score, h.seq) for h in r.hits],
                )
            )
    return out


def test_the_same_ledger_ranks_identically_on_sqlite_and_on_postgresql(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_index, "BATCH", 97)  # several catch-up transactions, on both engines
    with open_store(tmp_path / "sqlite", monkeypatch, None) as lite:
        three_agents_script(lite, monkeypatch)
        expected = _results(lite)
        docs = lite.local_db().query(DOCS)
    assert sum(len(hits) for *_, hits in expected) > 50
    assert len(docs) > 300

    url = pg_new_db(migrated=False).url
    pg_home = tmp_path / "pg"
    with open_store(pg_home, monkeypatch, url) as pg:
        assert pg.ledger.engine.dialect == "postgresql"
        three_agents_script(pg, monkeypatch)
        assert _results(pg) == expected
        assert pg.local_db().query(DOCS) == docs
        assert pg.cursors()["search"] == pg.ledger.head()
        assert not pg.ledger.has_table("search_docs")  # nothing of the index in the shared database
    local = pg_home / "nodes" / "local"
    assert (local / "search.db").is_file() and (local / "search.tantivy").is_dir()

    # The node's index lost: rebuilt from the shared ledger, the same results again.
    for path in sorted(local.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    with open_store(pg_home, monkeypatch, url) as again:
        assert SearchIndex(again).cursor() == 0
        assert _results(again) == expected


def test_a_node_file_folded_from_another_ledger_is_refolded(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    first, second = pg_new_db(migrated=False).url, pg_new_db(migrated=False).url
    with open_store(home, monkeypatch, first) as a:
        three_agents_script(a, monkeypatch)
        SearchIndex(a).catch_up()
        assert SearchIndex(a).cursor() == a.ledger.head() > 100
    (home / "ledger.anchor").unlink()  # the anchor would refuse the other ledger first
    with open_store(home, monkeypatch, second) as b:  # the same home, another (shorter) ledger
        b.append(*workload.creation_events(1))
        assert SearchIndex(b).cursor() == 0  # the node file's cursors were dropped
        SearchIndex(b).catch_up()
        assert SearchIndex(b).cursor() == b.ledger.head()
        assert all(
            row[0] <= b.ledger.head() for row in b.local_db().query("SELECT seq FROM search_docs WHERE seq IS NOT NULL")
        )


def test_the_node_file_is_a_function_of_the_node_name_and_cannot_append(
    tmp_path: Path, pg_db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = resolve_home(tmp_path / "home")
    assert node_db_path(home, "n2") == home.root / "nodes" / "n2" / "search.db"
    for bad in ("", "a/b", "..", "."):
        with pytest.raises(LedgerError, match="plain name"):
            node_db_path(home, bad)
    with open_store(home.root, monkeypatch, pg_db.url) as store:
        store.node = "n2"  # what a named node sets before its first search
        db = store.local_db()
        assert isinstance(db, LocalDb) and db.path == node_db_path(home, "n2")
        store.append(*workload.creation_events(1))
        SearchIndex(store).catch_up()
        assert (home.root / "nodes" / "n2" / "search.db").is_file() and not (home.root / "nodes" / "local").exists()
        with db.transaction() as tx, pytest.raises(LedgerError, match="cannot append"):
            tx.append(NewEvent("agt_x", ev.MessageReceived(text="no")))
        assert db.cursors()["search"] == store.ledger.head() == tx.head_seq
