"""Timing the sides of ``holon bench search`` query by query, and holon's exact ranking for recall.

See ``holon.bench.search`` for the method. The sides run in an order rotated query by query; holon's
exact ranking (``exact_ranking``) runs after them, outside the rotation: it is the reference the
recall is computed against, and its latency is reported for information only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from holon.bench.progress import step
from holon.bench.search_peers import BodyFts, Stopwatch, TantivyIndex, Timing
from holon.memory import search as memory_search
from holon.memory.index import SearchIndex
from holon.memory.search import search
from holon.memory.text import plan_query

__all__ = ["CLASSES", "WARMUP", "Kind", "Side", "Sides", "exact_ranking", "measure", "pct"]

Kind = Literal["rare", "common", "multi"]
CLASSES: tuple[Kind, ...] = ("rare", "common", "multi")
WARMUP = 5


def pct(values: list[float], q: float) -> float:
    """Percentile ``q`` (0-100) by linear interpolation between closest ranks."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


Side = Literal["holon", "raw", "tantivy", "tantivy_ids"]


@contextmanager
def exact_ranking() -> Iterator[None]:
    """holon's ranking applied to every match: the engine returns all of them instead of its
    top-k, and all are ranked by the same function (``holon.memory.search``: every part of it is a
    function of the query, the document and the index, so this is the reference a re-ranked
    top-k is measured against, and equals when certified).

    Measurement only: the bench flips the planner's limit for the block and puts it back.
    """
    saved = memory_search.CANDIDATES
    memory_search.CANDIDATES = 0
    try:
        yield
    finally:
        memory_search.CANDIDATES = saved


def _holon(index: SearchIndex, owner: str, query: str) -> tuple[Timing, list[str], bool]:
    watch = Stopwatch()
    result = search(index, [owner], query, limit=10)
    return watch.stop(), [h.ref for h in result.hits], result.exhaustive


class Sides:
    """The timed sides of one measurement: holon, the body-only FTS5 index, tantivy (optional)."""

    def __init__(self, index: SearchIndex, owner: str, raw: BodyFts, tantivy: TantivyIndex | None) -> None:
        self.index, self.owner, self.raw, self.tantivy = index, owner, raw, tantivy
        self.names: list[Side] = ["holon", "raw"]
        if tantivy is not None:
            self.names += ["tantivy", "tantivy_ids"]

    def holon(self, query: str) -> tuple[Timing, list[str], bool]:
        """(timing, refs of the hits, exhaustive) of MemorySearch."""
        return _holon(self.index, self.owner, query)

    def run(self, side: Side, query: str) -> tuple[Timing, list[Any], bool]:
        """(timing, hits, exhaustive) of ``query`` on ``side``; hits are refs (holon) or document numbers."""
        if side == "holon":
            return self.holon(query)
        terms = plan_query(query).terms
        if side == "raw":
            timing, ids = self.raw.query(terms)
            return timing, ids, True
        assert self.tantivy is not None
        timing, ids = self.tantivy.query(terms, texts=side == "tantivy")
        return timing, ids, True


def _recall(approx: list[str], exact: list[str]) -> float:
    return len(set(approx) & set(exact)) / len(exact) if exact else 1.0


def measure(sides: Sides, queries: dict[Kind, list[str]], *, exact: bool, label: str = "") -> dict[str, Any]:
    for kind in CLASSES:  # warm-up: the first few of each class, untimed
        for q in queries[kind][:WARMUP]:
            for side in sides.names:
                sides.run(side, q)
    out: dict[str, Any] = {}
    every: dict[str, list[float]] = {}
    all_recalls: list[float] = []
    all_overlaps: list[float] = []
    for kind in CLASSES:
        ms: dict[str, list[float]] = {name: [] for name in (*sides.names, "exact")}
        cpu: dict[str, list[float]] = {name: [] for name in sides.names}
        hits: dict[str, int] = dict.fromkeys(sides.names, 0)
        bounded, recalls, overlaps = 0, [], []
        measured = queries[kind][WARMUP:]
        for i, q in enumerate(measured):
            step(f"measuring {kind} queries {label}".rstrip(), i, len(measured))  # between queries, never timed
            order = sides.names[i % len(sides.names) :] + sides.names[: i % len(sides.names)]
            found: dict[str, list[Any]] = {}
            for side in order:  # rotate which side runs first
                (wall, spent), found[side], exhaustive = sides.run(side, q)
                ms[side].append(wall)
                cpu[side].append(spent)
                hits[side] += len(found[side])
                if side == "holon":
                    bounded += not exhaustive
            if "tantivy" in found:  # the same BM25 on the same bodies: a check that both did the work
                overlaps.append(_recall(found["tantivy"], found["raw"]))
            if exact:
                _, approx, _ = sides.holon(q)
                with exact_ranking():
                    (wall, _), best, _ = sides.holon(q)
                ms["exact"].append(wall)
                recalls.append(_recall(approx, best))
        count = max(1, len(ms["holon"]))
        c: dict[str, Any] = {"queries": len(ms["holon"])}
        for name, values in ms.items():
            if values:
                c |= _percentiles(name, values)
                every.setdefault(name, []).extend(values)
        for name, values in cpu.items():
            every.setdefault(f"{name}_cpu", []).extend(values)
        for name, n in hits.items():
            c["hits_mean" if name == "holon" else f"{name}_hits_mean"] = round(n / count, 2)
        c["bounded_share"] = round(bounded / count, 3)
        if recalls:
            c["recall_at_10_vs_exact"] = round(sum(recalls) / len(recalls), 4)
            all_recalls += recalls
        if overlaps:
            c["tantivy_overlap_at_10_vs_raw"] = round(sum(overlaps) / len(overlaps), 4)
            all_overlaps += overlaps
        c["example"] = queries[kind][WARMUP] if len(queries[kind]) > WARMUP else ""
        out[kind] = c
    out["all"] = {}
    for name, values in every.items():
        out["all"] |= _percentiles(name, values)
    if all_recalls:
        out["all"]["recall_at_10_vs_exact"] = round(sum(all_recalls) / len(all_recalls), 4)
    if all_overlaps:
        out["all"]["tantivy_overlap_at_10_vs_raw"] = round(sum(all_overlaps) / len(all_overlaps), 4)
    return out


def _percentiles(name: str, values: list[float]) -> dict[str, float]:
    """``p50_ms``/``p95_ms`` for holon, ``<name>_p50_ms``/``<name>_p95_ms`` for the others
    (``cpu_p50_ms`` for ``holon_cpu``, ``raw_cpu_p50_ms`` for ``raw_cpu``...)."""
    prefix = "" if name == "holon" else "cpu_" if name == "holon_cpu" else f"{name}_"
    return {f"{prefix}p50_ms": round(pct(values, 50), 3), f"{prefix}p95_ms": round(pct(values, 95), 3)}
