"""Identical ranking on every node (RFC 0008 step 13): the search index of one ledger, built by two
nodes (two node-local indexes of one PostgreSQL ledger) in other batches, one of them SIGKILLed in
the middle of its catch-up, and by a SQLite home of the same events, answers every query alike:
refs, scores, order, snippets, totals, with no compaction asked for. What could make them differ,
each checked here: tantivy's order of equal scores (its segments' order: ties are cut by id), the
ids themselves (every document, each version of a work item or task included, takes its id at its
event), and the documents in tantivy's BM25 statistics: a rewritten work item or task keeps its
earlier versions there, superseded (never deleted, which tantivy would count until a background
merge), the fold compacts at events the ledger decides, and a crash's leftovers are rebuilt from
the tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.engines import open_store, three_agents_script
from helpers.pg import PgDatabase
from helpers.turn_cli import cli_env

from holon.memory import index as search_index
from holon.memory import index_writer
from holon.memory.access import search_memory
from holon.memory.engine import Engine, Row
from holon.memory.index import SearchIndex
from holon.projections import Store

INDEXER = Path(__file__).parent / "helpers" / "indexer.py"
#: Single common words of the workload's vocabulary (long ties of equal scores), pairs, rare and
#: absent words.
QUERIES = ("ledger", "result", "tool", "memory", "deploy", "plan todo", "review cache token", "memory search tool",
           "request 17", "operator brief timer", "agent ledger projection memory", "nothing-like-this")  # fmt: skip
DOCS = ("SELECT id, key, ref, owner, kind, seq, ts_us, sender, work_item_id, words, question, title, text, segment, "
        "superseded FROM search_docs ORDER BY id")  # fmt: skip
COUNTS = "SELECT name, n FROM search_counts WHERE name != 'epoch' ORDER BY name"


def _results(store: Store) -> list[Any]:
    out: list[Any] = []
    for agent in sorted(store.agents(), key=lambda a: a.name):
        for q in QUERIES:
            r = search_memory(store, agent, q, limit=30)
            hits = [(h.ref, h.kind, h.title, h.snippet, h.score, h.seq) for h in r.hits]
            out.append((agent.name, q, r.total, r.exhaustive, hits))
    return out


def _committed_cursor(store: Store) -> int:
    rows = store.local_db().query("SELECT seq FROM projection_cursors WHERE name = 'search'")
    return int(rows[0][0]) if rows else 0


def _kill_mid_catch_up(root: Path, url: str, node: str, store: Store) -> None:
    """An indexer process of node ``node`` (batches of 37, slowed), SIGKILLed after its first commit."""
    env = cli_env(HOLON_STORAGE_URL=url, HOLON_NODE_NAME=node)
    proc = subprocess.Popen([sys.executable, str(INDEXER), str(root), "37", "0.5"], env=env, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _committed_cursor(store) == 0:
            assert proc.poll() is None, f"indexer exited early ({proc.returncode}): {proc.stderr.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "indexer never committed a batch"
            time.sleep(0.002)
        assert proc.poll() is None, "indexer finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _compactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Compact a few times in the workload's ledger (``COMPACT_MIN`` and ``COMPACT_SHARE`` lowered); returns the list
    every compaction appends the live-document count it saw to (one list per test)."""
    seen: list[int] = []
    compact = index_writer._Writer.compact

    def counted(self: index_writer._Writer) -> None:
        seen.append(self._counts()["live"])
        compact(self)

    monkeypatch.setattr(index_writer._Writer, "compact", counted)
    monkeypatch.setattr(index_writer, "COMPACT_MIN", 4)
    monkeypatch.setattr(index_writer, "COMPACT_SHARE", 0.01)
    return seen


@pytest.mark.slow  # three indexes of 700 events, one with a killed subprocess (~15 s)
def test_two_nodes_and_sqlite_rank_one_ledger_identically(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _compactions(monkeypatch)
    # A SQLite home folds the ledger in one batch.
    with open_store(tmp_path / "sqlite", monkeypatch, None) as lite:
        three_agents_script(lite, monkeypatch)
        index = SearchIndex(lite)
        expected = _results(lite)
        docs = lite.local_db().query(DOCS)
        counts = lite.local_db().query(COUNTS)
        superseded = index.superseded()
        assert index.deleted_in_engine() == 0 and index.engine.num_docs() == len(docs)
    assert sum(len(hits) for *_, hits in expected) > 100
    assert sum(1 for *_, hits in expected if len(hits) == 30) > 10  # common words: ties cut at the limit
    # Work items and tasks were rewritten: their earlier versions are in the engine, superseded
    # (and compacted twice on the way, at events the ledger decides).
    assert len(seen) >= 2 and len(superseded) >= 2
    assert sum(1 for *_, hits in expected for h in hits if h[1] in ("work_item", "task")) > 0
    at = list(seen)

    url = pg_new_db(migrated=False).url
    root = tmp_path / "pg"
    with open_store(root, monkeypatch, url) as n1:
        n1.node = "n1"
        three_agents_script(n1, monkeypatch)
        # Node n1 folds in batches of 13, caught up 50 events at a time: work items and tasks are
        # rewritten within and across batches. No compaction beyond the fold's own.
        monkeypatch.setattr(search_index, "BATCH", 13)
        index = SearchIndex(n1)
        seen.clear()
        while index.catch_up(max_events=50).lag:
            pass
        assert seen == at  # compacted at the same points (the live counts it saw)
        assert n1.local_db().query(DOCS) == docs  # the same documents, ids and versions
        assert n1.local_db().query(COUNTS) == counts and index.superseded() == superseded
        assert index.deleted_in_engine() == 0
        assert _results(n1) == expected

    # Node n2 of the same ledger: killed in the middle of its first catch-up (batches of 37), then
    # caught up in batches of 500.
    with open_store(root, monkeypatch, url) as n2:
        n2.node = "n2"
        _kill_mid_catch_up(root, url, "n2", n2)
        assert 0 < _committed_cursor(n2) < n2.ledger.head()
        monkeypatch.setattr(search_index, "BATCH", 500)
        index = SearchIndex(n2)
        index.catch_up()
        assert index.deleted_in_engine() == 0
        assert _results(n2) == expected
        assert n2.local_db().query(DOCS) == docs
        # Refolded from seq 0 in two batches: a work item rewritten across them is a version like
        # any other.
        index.rebuild()
        assert index.deleted_in_engine() == 0 and index.superseded() == superseded
        assert _results(n2) == expected


def _row(i: int, body: str) -> Row:
    return Row(i, "agent:a", "message", i, "", body, "")


def test_equal_scores_are_cut_by_id_whatever_the_commits(tmp_path: Path) -> None:
    """Documents scoring alike come back lowest id first, whichever commits (segments) hold them,
    and a tie across the limit is cut by id, not by the engine's order."""
    rows = [_row(i, "alpha beta" if i % 3 else "alpha gamma") for i in range(1, 301)]
    one, many = Engine(tmp_path / "one"), Engine(tmp_path / "many")
    one.write(rows)
    for at in range(len(rows), 0, -25):  # newest first, in twelve commits
        many.write(rows[max(0, at - 25) : at])
    for limit in (1, 7, 100, 199, 200, 250):
        found, n = one.top(["alpha"], owners=["agent:a"], limit=limit)
        assert found == many.top(["alpha"], owners=["agent:a"], limit=limit)[0]
        assert [i for i, _s in found] == list(range(1, limit + 1)) and n == 300
    best, _ = one.top(["beta"], owners=["agent:a"], limit=10)
    assert [i for i, _s in best] == [1, 2, 4, 5, 7, 8, 10, 11, 13, 14]
    assert best == many.top(["beta"], owners=["agent:a"], limit=10)[0]


class _Crash(BaseException):
    """The process dying (nothing catches it)."""


def test_a_rewrite_and_a_crash_leave_no_deleted_document_in_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index that rewrote documents, and one whose process died after tantivy's commit and
    before SQLite's, score exactly as an index built in one pass (tantivy would count the deleted
    documents in BM25's statistics until a background merge)."""
    with open_store(tmp_path / "home", monkeypatch, None) as store:
        three_agents_script(store, monkeypatch)
        monkeypatch.setattr(search_index, "BATCH", 29)
        index = SearchIndex(store)
        index.catch_up(max_events=300)
        finish = index_writer._Writer.finish

        def crash(self: index_writer._Writer) -> None:
            finish(self)  # the engine committed ...
            raise _Crash  # ... the transaction did not

        monkeypatch.setattr(index_writer._Writer, "finish", crash)
        with pytest.raises(_Crash):
            index.catch_up()
        monkeypatch.setattr(index_writer._Writer, "finish", finish)
        assert index.engine.num_docs() > sum(index.owner_docs().values())  # the engine ran ahead
        index.catch_up()  # rebuilds the engine from the tables, then folds the batch again
        assert index.engine.num_docs() == sum(index.owner_docs().values())
        assert index.deleted_in_engine() == 0 and index.superseded()
        pieces = _results(store)
        index.rebuild()  # from seq 0, in batches of 29 with no crash
        assert _results(store) == pieces
        assert index.deleted_in_engine() == 0


def test_a_crash_after_a_compaction_is_repaired_to_the_same_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that died after a compaction rebuilt the engine (in the middle of a batch) and
    before SQLite committed: the next catch-up finds the engine's documents other than the tables'
    and rebuilds, and the index then answers exactly as one folded without a crash."""
    seen = _compactions(monkeypatch)
    with open_store(tmp_path / "home", monkeypatch, None) as store:
        three_agents_script(store, monkeypatch)
        monkeypatch.setattr(search_index, "BATCH", 41)
        index = SearchIndex(store)
        compact = index_writer._Writer.compact

        def crash(self: index_writer._Writer) -> None:
            compact(self)  # the engine rebuilt and committed ...
            raise _Crash  # ... the transaction did not

        monkeypatch.setattr(index_writer._Writer, "compact", crash)
        with pytest.raises(_Crash):
            index.catch_up()
        monkeypatch.setattr(index_writer._Writer, "compact", compact)
        assert seen and index.cursor() < store.ledger.head()
        assert index.engine.holds_beyond(index._last_id())  # documents of ids the tables never gave out
        index.catch_up(max_events=1)  # repaired first (not only when the batch reaches the compaction)
        assert not index.engine.holds_beyond(index._last_id())
        assert index.engine.num_docs() == sum(index.owner_docs().values())
        assert index.deleted_in_engine() == 0
        index.catch_up()
        pieces = _results(store)
        index.rebuild()
        assert _results(store) == pieces


def test_deleted_documents_count_until_the_engine_is_rebuilt(tmp_path: Path) -> None:
    """What tantivy does that the rebuilds are for: a rewritten document stays in the BM25
    statistics (scores differ from an index built in one pass) until the index is rebuilt."""
    words = [f"w{i}" for i in range(40)]
    rows = [_row(i, " ".join(words[(i * 7 + j) % 40] for j in range(1 + i % 13))) for i in range(1, 801)]
    fresh, folded = Engine(tmp_path / "fresh"), Engine(tmp_path / "folded")
    fresh.write(rows)
    for at in range(0, len(rows), 100):
        folded.write(rows[at : at + 100])

    def top(e: Engine) -> list[Any]:
        return [e.top([w], owners=["agent:a"], limit=20)[0] for w in words[:10]]

    assert top(folded) == top(fresh) and folded.deleted(["agent:a"]) == 0
    folded.write(rows[:150])  # rewritten: each replaces its committed copy
    assert folded.deleted(["agent:a"]) == 150 and folded.num_docs() == 800
    assert top(folded) != top(fresh)
    folded.write(rows, clear=True)
    assert folded.deleted(["agent:a"]) == 0 and top(folded) == top(fresh)
