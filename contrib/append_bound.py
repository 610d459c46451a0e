"""The append path's bounds, measured in one process (RFC 0001, "The append path", step 3).

    PYTHONPATH=. nice -n 15 python contrib/append_bound.py [BLOCK] [ROUNDS] [SIDES]

Sides, each in its own home or file with holon's pragmas (synchronous=NORMAL), appending the same
``bench ledger`` workload: ``full`` (``Store.append`` as it is: rows written every few commits),
``eager`` (the same with the rows written at every commit, as before step 3), ``ledger`` (the
projector unhooked: the ledger's own path), ``raw`` (``RawSqlite`` into holon's events table, the
ratios' denominator) and ``es`` (eventsourcing's recorder). Each round runs every side in a
rotated order, BLOCK events one per transaction then BLOCK in tens; the figure is CPU time
(``time.process_time``) around the appends only, per event, median over the rounds.
"""

import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from holon.bench import workload
from holon.bench.ledger_peers import EventSourcingRecorder, RawSqlite
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.projections import Store

BLOCK = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SIDES = sys.argv[3].split(",") if len(sys.argv) > 3 else ["full", "eager", "ledger", "raw", "es"]
settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": "NORMAL"}))
tmp = Path(tempfile.mkdtemp(prefix="append-bound-"))


def _store(name: str) -> Store:
    s = Store.open(HomePaths(tmp / name), settings, clock=SystemClock())
    s.append(*workload.creation_events(10))
    if name == "ledger":
        s.ledger.hooks = []
    elif name == "eager":
        s.projector._defer_commits = 1
    return s


probe = Store.open(HomePaths(tmp / "probe"), settings, clock=SystemClock())
pragmas = probe.ledger.db.pragmas
probe.close()
sides = {}
for name in SIDES:
    if name == "raw":
        sides[name] = (RawSqlite(tmp / "raw.db", pragmas, "table"), workload.stream(10), None)
    elif name == "es":
        sides[name] = (EventSourcingRecorder(tmp / "es.db", pragmas), workload.stream(10), None)
    else:
        sides[name] = (_store(name), workload.stream(10), {})


def _holon(store: Store, events: list, size: int, waiting: dict) -> float:
    cpu = 0.0
    for i in range(0, len(events), size):
        chunk = workload.take_inputs(events[i : i + size], store.ledger.head(), waiting)
        c0 = time.process_time()
        store.append(*chunk)
        cpu += time.process_time() - c0
    return cpu / len(events) * 1e6


res: dict[tuple[str, str], list[float]] = {}
names = list(sides)
for r in range(ROUNDS):
    for name in names[r % len(names) :] + names[: r % len(names)]:
        side, stream, waiting = sides[name]
        for kind, size in (("single", 1), ("tens", 10)):
            events = list(itertools.islice(stream, BLOCK))
            if waiting is not None:
                us = _holon(side, events, size, waiting)
            else:
                n, cpu, _wall = side.run(events, size)
                us = cpu / n * 1e6
            res.setdefault((name, kind), []).append(us)
for kind in ("single", "tens"):
    raw = statistics.median(res[("raw", kind)]) if ("raw", kind) in res else float("nan")
    for name in names:
        m = statistics.median(res[(name, kind)])
        print(
            f"{kind:6} {name:7} {m:7.1f} us/event  ratio to raw {raw / m:.3f}  rounds {[round(x, 1) for x in res[(name, kind)]]}"
        )
print("load average", os.getloadavg())
