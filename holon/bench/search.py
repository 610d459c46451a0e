"""``holon bench search``: MemorySearch latency on large indexes, against the raw FTS5 query.

Method. One home, one index, grown in steps to each size asked for (100,000 then 1,000,000
documents by default), so the smaller index is a prefix of the larger one. Documents are realistic
conversation (``holon.bench.chatter``): about 85% chat turns in segments of 20-40, with tool
results and episodes between them; 90% belong to the measured agent and 10% to another agent, so
scoping is exercised. They are written through the index's own writer (``SearchIndex.add_documents``,
the same code ``catch_up`` uses) rather than appended as events, which would take far longer and
measures nothing search does; the ledger stays empty, so every search's catch-up finds nothing
to do. Building time is reported (``build_s_*``) but is not a target.

At each size, queries are drawn from the vocabulary by the document frequency they actually have
in the index (every column counts, as it does for a search):

* ``rare``: one word found in at least one and fewer than 0.1% of the documents;
* ``common``: one word found in 5-20% of the documents;
* ``multi``: 3-5 words, one or two rare and the rest common.

Each query runs through ``search(index, [agent], query, limit=10)`` and, on the same connection
and data, through the baseline: ``SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY
rank LIMIT 10`` with the same quoted OR expression (``plan_query(q).expression()``). The two
alternate query by query, after a few untimed warm-up queries. Reported: p50 and p95 over all
queries and per class, for MemorySearch and for the baseline, and ``ratio_to_raw`` = p95 / raw p95.
"""

from __future__ import annotations

import itertools
import math
import platform
import random
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from holon.bench.chatter import SENTENCES, Chatter
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.memory.index import SearchIndex
from holon.memory.search import search
from holon.memory.text import STOP_WORDS, plan_query, words
from holon.projections import Store

__all__ = ["TARGETS", "format_report", "run_search_bench", "size_label"]

TARGETS = {"p95_ms_1m": 20.0, "ratio_to_raw_1m": 2.0}
Kind = Literal["rare", "common", "multi"]
CLASSES: tuple[Kind, ...] = ("rare", "common", "multi")
#: A rare word is in fewer than this share of the documents; a common one within COMMON.
RARE_SHARE = 0.001
COMMON = (0.05, 0.20)
AGENT = "agent:agt_bench"
OTHER = "agent:agt_other"
OTHER_SHARE = 0.1
WARMUP = 5
_RAW_SQL = "SELECT rowid FROM search_fts WHERE search_fts MATCH ? ORDER BY rank LIMIT 10"


def size_label(n: int) -> str:
    """``1m`` for 1,000,000, ``100k`` for 100,000, the plain number otherwise."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def _pct(values: list[float], q: float) -> float:
    """Percentile ``q`` (0-100) by linear interpolation between closest ranks."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class _Vocabulary:
    """Query words with their document frequency in the index as it is now."""

    def __init__(self, store: Store, chatter: Chatter, rng: random.Random) -> None:
        self.store = store
        self.rng = rng
        sentence_words = {w for s in SENTENCES for w in words(s.replace("{}", " ").replace("{name}", " "))}
        self.common_pool = sorted(
            {w for w in [*sentence_words, *chatter.vocab[:300]] if w.isalpha() and w not in STOP_WORDS}
        )
        self.tail = chatter.vocab
        self.df: dict[str, int] = {}

    def doc_freq(self, word: str) -> int:
        if word not in self.df:
            rows = self.store.ledger.query("SELECT count(*) FROM search_fts WHERE search_fts MATCH ?", [f'"{word}"'])
            self.df[word] = int(rows[0][0])
        return self.df[word]

    def common(self, n: int, docs: int) -> list[str]:
        lo, hi = COMMON[0] * docs, COMMON[1] * docs
        found = [w for w in self.common_pool if lo <= self.doc_freq(w) <= hi]
        return self._pick(found, n)

    def rare(self, n: int, docs: int) -> list[str]:
        found: list[str] = []
        limit = max(1.0, RARE_SHARE * docs)
        top = math.log(len(self.tail))
        for _ in range(n * 40):  # ranks drawn log-uniformly over the tail, kept when rare enough
            w = self.tail[int(math.exp(self.rng.uniform(math.log(200), top))) - 1]
            if w not in found and w not in STOP_WORDS and 1 <= self.doc_freq(w) < limit:
                found.append(w)
                if len(found) == n:
                    break
        return self._pick(found, n)

    def _pick(self, found: list[str], n: int) -> list[str]:
        if not found:
            return []
        if len(found) >= n:
            return self.rng.sample(found, n)
        return [self.rng.choice(found) for _ in range(n)]


def _queries(vocab: _Vocabulary, n: int, docs: int) -> dict[Kind, list[str]]:
    rare = vocab.rare(n + WARMUP, docs)
    common = vocab.common(n + WARMUP, docs)
    multi = []
    for _ in range(n + WARMUP):
        k = vocab.rng.randint(3, 5)
        n_rare = min(vocab.rng.randint(1, 2), len(rare))
        picked = (
            vocab.rng.sample(rare, n_rare) + [vocab.rng.choice(common) for _ in range(k - n_rare)] if common else []
        )
        vocab.rng.shuffle(picked)
        if picked:
            multi.append(" ".join(dict.fromkeys(picked)))
    return {"rare": rare, "common": common, "multi": multi}


def _time_holon(index: SearchIndex, query: str) -> tuple[float, int, bool]:
    t0 = time.perf_counter()
    result = search(index, [AGENT], query, limit=10)
    return (time.perf_counter() - t0) * 1000, len(result.hits), result.exhaustive


def _time_raw(store: Store, query: str) -> tuple[float, int]:
    expr = plan_query(query).expression()
    t0 = time.perf_counter()
    rows = store.ledger.query(_RAW_SQL, [expr])
    return (time.perf_counter() - t0) * 1000, len(rows)


def _measure(store: Store, index: SearchIndex, queries: dict[Kind, list[str]]) -> dict[str, Any]:
    for kind in CLASSES:  # warm-up: the first few of each class, untimed
        for q in queries[kind][:WARMUP]:
            _time_holon(index, q)
            _time_raw(store, q)
    out: dict[str, Any] = {}
    every: dict[str, list[float]] = {"holon": [], "raw": []}
    for kind in CLASSES:
        holon, raw, hits, raw_hits, bounded = [], [], 0, 0, 0
        for i, q in enumerate(queries[kind][WARMUP:]):
            if i % 2:  # alternate which side runs first
                raw_ms, n_raw = _time_raw(store, q)
                ms, n, exhaustive = _time_holon(index, q)
            else:
                ms, n, exhaustive = _time_holon(index, q)
                raw_ms, n_raw = _time_raw(store, q)
            holon.append(ms)
            raw.append(raw_ms)
            hits += n
            raw_hits += n_raw
            bounded += not exhaustive
        every["holon"] += holon
        every["raw"] += raw
        count = max(1, len(holon))
        out[kind] = {
            "queries": len(holon),
            "p50_ms": round(_pct(holon, 50), 3),
            "p95_ms": round(_pct(holon, 95), 3),
            "raw_p50_ms": round(_pct(raw, 50), 3),
            "raw_p95_ms": round(_pct(raw, 95), 3),
            "hits_mean": round(hits / count, 2),
            "raw_hits_mean": round(raw_hits / count, 2),
            "bounded_share": round(bounded / count, 3),
            "example": queries[kind][WARMUP] if len(queries[kind]) > WARMUP else "",
        }
    out["all"] = {
        "p50_ms": round(_pct(every["holon"], 50), 3),
        "p95_ms": round(_pct(every["holon"], 95), 3),
        "raw_p50_ms": round(_pct(every["raw"], 50), 3),
        "raw_p95_ms": round(_pct(every["raw"], 95), 3),
    }
    return out


@contextmanager
def _home(directory: Path | None) -> Iterator[Path]:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="holon-bench-search-") as tmp:
        yield Path(tmp)


def run_search_bench(
    *, sizes: tuple[int, ...] = (100_000, 1_000_000), queries: int = 50, seed: int = 7, directory: Path | None = None
) -> dict[str, Any]:
    """Build the index up to each of ``sizes`` and measure; ``directory`` keeps the home."""
    settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
    result: dict[str, Any] = {"queries_per_class": queries, "seed": seed}
    with _home(directory) as root:
        store = Store.open(HomePaths(root), settings, clock=SystemClock())
        try:
            index = SearchIndex(store)
            chatter = Chatter(seed=seed, owners=((AGENT, 1 - OTHER_SHARE), (OTHER, OTHER_SHARE)))
            docs = chatter.docs()
            rng = random.Random(seed)
            built, build_s = 0, 0.0
            for n, size in enumerate(sorted(set(sizes))):
                step(f"indexing {size:,} documents and measuring", n, len(set(sizes)))
                t0 = time.perf_counter()
                built += index.add_documents(itertools.islice(docs, size - built))
                build_s += time.perf_counter() - t0
                vocab = _Vocabulary(store, chatter, rng)
                m = _measure(store, index, _queries(vocab, queries, built))
                label = size_label(size)
                owners = index.owner_docs()
                result |= {
                    f"docs_{label}": built,
                    f"agent_docs_{label}": owners.get(AGENT, 0),
                    f"build_s_{label}": round(build_s, 1),
                    f"db_mb_{label}": round(_db_bytes(store) / 1e6, 1),
                    f"p50_ms_{label}": m["all"]["p50_ms"],
                    f"p95_ms_{label}": m["all"]["p95_ms"],
                    f"raw_p50_ms_{label}": m["all"]["raw_p50_ms"],
                    f"raw_p95_ms_{label}": m["all"]["raw_p95_ms"],
                    f"ratio_to_raw_{label}": round(m["all"]["p95_ms"] / max(m["all"]["raw_p95_ms"], 1e-3), 3),
                    f"by_class_{label}": {k: m[k] for k in CLASSES},
                }
        finally:
            store.close()
    result["sizes"] = [size_label(s) for s in sorted(set(sizes))]
    result["targets"] = TARGETS
    result["targets_met"] = {k: result[k] <= v for k, v in TARGETS.items() if k in result}
    result["python"] = platform.python_version()
    result["sqlite"] = sqlite3.sqlite_version
    return result


def _db_bytes(store: Store) -> int:
    pages = store.ledger.query("PRAGMA page_count")[0][0]
    return int(pages) * int(store.ledger.query("PRAGMA page_size")[0][0])


def format_report(r: dict[str, Any]) -> str:
    lines = [f"MemorySearch latency vs raw FTS5 ({r['queries_per_class']} queries per class, limit 10)"]
    for label in r["sizes"]:
        lines.append(
            f"  {r[f'docs_{label}']:,} documents ({r[f'db_mb_{label}']:,} MB, built in {r[f'build_s_{label}']} s): "
            f"p50 {r[f'p50_ms_{label}']:.2f} ms, p95 {r[f'p95_ms_{label}']:.2f} ms; raw FTS5 p50 "
            f"{r[f'raw_p50_ms_{label}']:.2f} ms, p95 {r[f'raw_p95_ms_{label}']:.2f} ms; "
            f"ratio {r[f'ratio_to_raw_{label}']:.2f}"
        )
        for kind, c in r[f"by_class_{label}"].items():
            lines.append(
                f"    {kind:>6}: p50 {c['p50_ms']:.2f} / p95 {c['p95_ms']:.2f} ms, "
                f"raw {c['raw_p50_ms']:.2f} / {c['raw_p95_ms']:.2f} ms, bounded {c['bounded_share']:.0%} "
                f"(e.g. {c['example']!r})"
            )
    lines.append(
        f"  targets: p95 <= {TARGETS['p95_ms_1m']} ms and <= {TARGETS['ratio_to_raw_1m']}x raw at 1m: "
        f"{r['targets_met'] or 'not measured at 1m'}"
    )
    return "\n".join(lines)
