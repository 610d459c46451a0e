"""Where a cluster turn's CPU goes: one throughput point of ``holon bench cluster`` under the
per-thread CPU profiler (``holon.testing.cpuprofile``), then the window's profiles summed by role
(node main process, model child) and thread, and each function's own CPU put in one bucket.

    PYTHONPATH=$PWD nice -n 15 python rfcs/0008/profile_cluster.py --nodes 3 --latency-ms 200 \
        --seconds 20 [--dir /tmp/prof] [--top 40]

Prints JSON: the point's own figures (unprofiled CPU per turn is NOT this run's: the profiler
costs CPU too), per role the CPU in the window per turn (from ``/proc``, overhead included), per
thread, and per bucket (the profile's own time of the functions of that bucket, scaled to the
role's measured CPU), and the top functions by own time.
"""

from __future__ import annotations

import argparse
import glob
import json
import marshal
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from holon.bench.cluster import measure_turns

#: (bucket, substrings of "file:function"), the first match wins. Own time only: psycopg's time is
#: in "psycopg" whichever holon code called it; the caller buckets are split by thread instead.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    (
        "http: uvicorn/starlette/h11/anyio",
        ("uvicorn", "starlette", "fastapi", "h11", "httptools", "anyio", "/email/", "multipart"),
    ),
    ("http: holon.api", ("holon/api/",)),
    ("pydantic", ("pydantic",)),
    ("model child: litellm/openai/httpx", ("litellm", "openai", "httpx", "httpcore", "tiktoken", "aiohttp")),
    ("model call: holon providers", ("holon/runtime/providers/",)),
    ("turn loop: holon.runtime", ("holon/runtime/",)),
    ("context assembly", ("holon/context/",)),
    ("memory / search index", ("holon/memory/",)),
    ("projections (folds, store reads)", ("holon/projections/",)),
    ("ledger: pg engine, append, leases, notify", ("holon/ledger/pg/",)),
    ("ledger: codec, append path", ("holon/ledger/",)),
    ("psycopg (any caller)", ("psycopg",)),
    ("sqlalchemy / sqlite", ("sqlalchemy", "sqlite3", "sqlmodel")),
    ("daemon: wakes/watcher", ("holon/daemon/wakes", "holon/daemon/notices")),
    ("daemon: cluster (heartbeat, scan)", ("holon/daemon/cluster",)),
    ("daemon: other", ("holon/daemon/",)),
    ("logging (structlog, logging)", ("structlog", "/logging/", "holon/logs")),
    ("json", ("/json/", "_json", "orjson")),
    ("asyncio / selectors / threads", ("asyncio", "selectors", "threading", "concurrent", "queue.py", "socket")),
]


def bucket_of(key: tuple[str, int, str]) -> str:
    file, _line, func = key
    where = f"{file}:{func}"
    for name, marks in BUCKETS:
        if any(m in where for m in marks):
            return name
    if file == "~":
        return f"builtin: {func}"[:60]
    return "other"


def load(where: Path) -> tuple[list[dict[str, Any]], dict[str, dict[tuple[str, int, str], float]]]:
    summaries = [json.loads(Path(p).read_text()) for p in glob.glob(str(where / "*.json"))]
    own: dict[str, dict[tuple[str, int, str], float]] = defaultdict(lambda: defaultdict(float))
    for p in glob.glob(str(where / "*.prof")):
        pid_role = os.path.basename(p).split("-")
        role = pid_role[1] if pid_role[1] != "node" else "node"
        stats = marshal.loads(Path(p).read_bytes())
        for key, (_cc, _nc, tt, _ct, _callers) in stats.items():
            own[role][key] += tt
    return summaries, own


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--per-node", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--analyze", type=float, default=0, help="only summarise --dir's profiles of this many turns")
    a = ap.parse_args()
    root = a.dir or Path(tempfile.mkdtemp(prefix="holon-prof-"))
    if a.analyze:
        point: dict[str, Any] = {}
        turns = a.analyze
    else:
        point = measure_turns(a.nodes, per_node=a.per_node, latency_ms=a.latency_ms, seconds=a.seconds, profile=root)
        turns = point["turns_per_s"] * a.seconds
    summaries, own = load(root / f"nodes{a.nodes}")
    roles: dict[str, Any] = {}
    for s in summaries:
        role = "node" if s["role"].startswith("node") else s["role"]
        r = roles.setdefault(role, {"processes": 0, "cpu_ms_per_turn": 0.0, "threads_ms_per_turn": defaultdict(float)})
        r["processes"] += 1
        r["cpu_ms_per_turn"] += s["cpu_s"] * 1000 / turns
        for name, cpu in s["threads_cpu_s"].items():
            thread = name.rsplit("_", 1)[0] if name.startswith(("asyncio_", "ThreadPoolExecutor")) else name
            r["threads_ms_per_turn"][thread] += cpu * 1000 / turns
    for role, r in roles.items():
        funcs = own.get(role, {})
        total = sum(funcs.values()) or 1.0
        buckets: dict[str, float] = defaultdict(float)
        for key, tt in funcs.items():
            buckets[bucket_of(key)] += tt
        scale = r["cpu_ms_per_turn"] / total
        r["buckets_ms_per_turn"] = {k: round(v * scale, 2) for k, v in sorted(buckets.items(), key=lambda kv: -kv[1])}
        r["top_own_ms_per_turn"] = [
            [f"{os.path.relpath(k[0]) if k[0] != '~' else '~'}:{k[1]}:{k[2]}", round(v * scale, 2)]
            for k, v in sorted(funcs.items(), key=lambda kv: -kv[1])[: a.top]
        ]
        r["cpu_ms_per_turn"] = round(r["cpu_ms_per_turn"], 1)
        r["threads_ms_per_turn"] = {
            k: round(v, 2) for k, v in sorted(r["threads_ms_per_turn"].items(), key=lambda kv: -kv[1])
        }
    print(json.dumps({"dir": str(root), "point": point, "turns": round(turns), "roles": roles}, indent=1))


if __name__ == "__main__":
    main()
