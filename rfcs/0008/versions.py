"""What superseded versions cost (RFC 0008 step 13, "Identical ranking on every node", as built).

A rewritten work item or task keeps its earlier versions in the search engine, superseded, until
the fold compacts (``holon.memory.index_writer.COMPACT_SHARE``). This folds one ledger of
``holon.bench.workload`` turns into a SQLite home's search index and reports:

* ``fold_cpu_s``: the catch-up of the whole ledger (default batches), CPU seconds;
* ``live_docs``, ``superseded``, ``compactions``: what the index holds at the end, and how many
  compactions the fold ran (absent on a tree without versions);
* ``index_bytes``: the search projection (every ``search_*`` table and index by ``dbstat``, and
  the engine's directory) by part; ``fts5_body_bytes``: a body-only FTS5 index with its text of
  the live documents (``holon bench search``'s reference); ``ratio``: the first over the second;
* ``search_cpu_ms_p50``/``p95``: ``holon.memory.search.search`` over 20 queries per agent, three
  rounds, CPU milliseconds per search.

``--rewrites R`` adds R more changes of the turn's work item per turn (a todo added, then updated:
the workload itself changes one about every fourth turn; "work items change on most turns" is
R >= 1). Runs on any tree (a tree without versions reports none). Prints JSON.

    PYTHONPATH=$PWD python rfcs/0008/versions.py --agents 3 --turns 2000 --rewrites 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from holon.bench import workload
from holon.bench.search import _holon_bytes
from holon.bench.search_peers import BodyFts
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import index_writer
from holon.memory.index import SearchIndex
from holon.memory.search import search
from holon.projections import Store

QUERIES = ("ledger", "result", "tool", "memory", "deploy", "plan todo", "review cache token", "memory search tool",
           "operator brief timer", "agent ledger projection memory", "parser config", "daemon schedule retry",
           "latency token", "cache prefix", "migrate index", "query refactor", "shell command file", "budget context",
           "episode wait", "search result")  # fmt: skip


def _events(agents: int, turns: int, rewrites: int) -> Iterator[NewEvent]:
    rng = random.Random(11)
    ids = workload.agent_ids(agents)
    for turn in range(turns):
        for a in ids:
            events = workload.turn_events(a, turn, rng)
            settled = events.pop()
            yield from events
            wi = f"wi_{a}_{turn // 10}"
            for r in range(rewrites):
                todo = f"rw{turn}_{r // 2}"
                op = "add" if r % 2 == 0 else "update"
                text = " ".join(rng.choice(("fix", "check", "ship", "review", "index", "cache")) for _ in range(5))
                yield NewEvent(a, ev.TodoChanged(work_item_id=wi, op=op, todo_id=todo, text=text,
                                                 status="done" if op == "update" else None),
                               turn_id=settled.turn_id, work_item_id=wi)  # fmt: skip
            yield settled


def measure(agents: int, turns: int, rewrites: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="holon-versions-") as tmp:
        settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
        with Store.open(HomePaths(Path(tmp) / "home"), settings, clock=SystemClock()) as store:
            store.append(*workload.creation_events(agents))
            events = _events(agents, turns, rewrites)
            while chunk := list(itertools.islice(events, 500)):
                store.append(*chunk)
            compactions = 0
            compact = getattr(index_writer._Writer, "compact", None)
            if compact is not None:

                def counted(self: Any) -> None:
                    nonlocal compactions
                    compactions += 1
                    compact(self)

                index_writer._Writer.compact = counted  # type: ignore[attr-defined]
            index = SearchIndex(store)
            cpu = time.process_time()
            index.catch_up()
            fold = time.process_time() - cpu
            db = index.db
            cols = {r[1] for r in db.query("PRAGMA table_info(search_docs)")}
            live_sql = "WHERE superseded = 0" if "superseded" in cols else ""
            live = int(db.query(f"SELECT count(*) FROM search_docs {live_sql}")[0][0])
            total = int(db.query("SELECT count(*) FROM search_docs")[0][0])
            parts = _holon_bytes(index)
            fts = BodyFts(Path(tmp) / "fts.db", ("PRAGMA journal_mode=WAL",))
            fts.add(f"{r[0]}\n{r[1]}" for r in db.query(f"SELECT title, text FROM search_docs {live_sql} ORDER BY id"))
            fts_bytes = sum(fts.index_bytes().values())
            owners = [f"agent:{a}" for a in workload.agent_ids(agents)]
            took: list[float] = []
            for _round in range(3):
                for owner in owners:
                    for q in QUERIES:
                        cpu = time.process_time()
                        search(index, [owner], q, limit=10)
                        took.append((time.process_time() - cpu) * 1000)
            took.sort()
            return {
                "agents": agents,
                "turns": turns,
                "rewrites": rewrites,
                "events": store.ledger.head(),
                "fold_cpu_s": round(fold, 2),
                "live_docs": live,
                "superseded": total - live,
                "compactions": compactions,
                "index_bytes": parts,
                "index_bytes_total": sum(parts.values()),
                "fts5_body_bytes": fts_bytes,
                "ratio": round(sum(parts.values()) / fts_bytes, 3),
                "search_cpu_ms_p50": round(statistics.median(took), 3),
                "search_cpu_ms_p95": round(took[int(0.95 * len(took))], 3),
            }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--rewrites", type=int, default=0)
    a = ap.parse_args()
    print(json.dumps(measure(a.agents, a.turns, a.rewrites)))


if __name__ == "__main__":
    main()
