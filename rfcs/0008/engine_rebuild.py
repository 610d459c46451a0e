"""What a rebuild of a node's search engine costs (RFC 0008 step 13, "Identical ranking on every node").

A fold batch that deletes or rewrites a document the engine already holds rebuilds the engine
from the index's tables (``holon.memory.index_writer.rebuild_engine``): tantivy would keep the
deleted document in its BM25 statistics until a background merge. This measures that rebuild
beside an ordinary batch, at each ``--docs`` size: ``holon.bench.chatter``'s documents (the
corpus of ``holon bench search``) written through ``SearchIndex.add_documents`` into a SQLite
home, then

* ``batch_s``: one more ordinary batch of 100 documents (no rewrite), CPU seconds;
* ``rewrite_s``: the same batch rewriting one committed document (an upsert of its key): one
  deleted document, below ``REBUILD_SHARE``, so no rebuild (a rebuild at every rewrite, the
  first plan, measured 3.22 s at 10,000 documents, the rebuild's own cost), CPU seconds;
* ``rebuild_s``: ``rebuild_engine`` alone, CPU and wall seconds;
* ``same_scores``: whether 20 queries' top 50 (ids and scores) are identical before and after a
  rebuild of an index that never deleted a document (the rows are rebuilt exactly).

Imports holon (run from the repository root with ``PYTHONPATH=$PWD``). Prints JSON.

    PYTHONPATH=$PWD python rfcs/0008/engine_rebuild.py --docs 10000,100000
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from holon.bench.chatter import Chatter
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.memory.index import SearchIndex
from holon.memory.index_writer import _Writer, rebuild_engine
from holon.projections import Store

QUERIES = ("coffee", "the", "weekend trip", "dog", "music", "work", "project deadline", "dinner", "movie", "book",
           "garden", "painting", "birthday party", "school", "running", "family", "camping", "guitar", "city", "rain")  # fmt: skip


def _cpu() -> float:
    return time.process_time()


def _top(index: SearchIndex) -> list[Any]:
    e = index.engine
    return [e.top(e.analyze([q]), owners=["agent:bench"], limit=50)[0] for q in QUERIES]


def measure(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="holon-rebuild-") as tmp:
        settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
        with Store.open(HomePaths(Path(tmp)), settings, clock=SystemClock()) as store:
            index = SearchIndex(store)
            docs = Chatter(seed=7).docs()
            index.add_documents(itertools.islice(docs, n))
            extra = list(itertools.islice(docs, 200))
            before = _top(index)
            t0, w0 = _cpu(), time.perf_counter()
            with index._tx() as conn:
                rebuild_engine(conn, index.engine)
            rebuild_cpu, rebuild_wall = _cpu() - t0, time.perf_counter() - w0
            same = _top(index) == before
            t0 = _cpu()
            index.add_documents(extra[:100])
            batch = _cpu() - t0
            first = index.db.query("SELECT key FROM search_docs ORDER BY id LIMIT 1")[0][0]
            t0 = _cpu()
            with index._tx() as conn2:
                writer = _Writer(conn2)
                for doc in extra[100:]:
                    writer.upsert(doc)
                writer.upsert(dataclasses.replace(extra[100], key=first, text="rewritten"))
                writer.finish()
            rewrite = _cpu() - t0
            return {"docs": n, "batch_s": round(batch, 3), "rewrite_s": round(rewrite, 3),
                    "rebuild_cpu_s": round(rebuild_cpu, 3), "rebuild_wall_s": round(rebuild_wall, 3),
                    "same_scores": same}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", default="10000,100000")
    args = ap.parse_args()
    print(json.dumps([measure(int(n)) for n in args.docs.split(",")], indent=1))


if __name__ == "__main__":
    main()
