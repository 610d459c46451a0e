"""RFC 0008, decision 5: search on PostgreSQL. tsvector/GIN in the shared database vs each node's
local tantivy index (the single-node engine, RFC 0004), on the same synthetic documents.

* ``gin``: 100,000 documents (Zipf-distributed vocabulary, 20-80 words, 50 owners) in a table
  with a stored ``tsvector`` column and a GIN index; top-10 by ``ts_rank_cd`` for one owner, for
  rare, common and two-word queries: p50/p95 ms, build seconds, bytes per document;
* ``tantivy``: the same documents and queries through tantivy 0.27 (BM25 top 10, owner filter as
  a term query): the engine each node would keep;
* ``tantivy_determinism``: the same 20,000 documents indexed (a) in one commit and (b) in 40
  commits with a fifth of them deleted and re-added (what an idempotent catch-up repeat does):
  are the top-10 ids and scores equal, as returned, with ties broken by id, and the scores
  alone? BM25's document frequencies count deleted documents until segments merge, and equal
  scores come back in segment order, so two nodes with different histories may differ.

Usage: ``python search.py [--docs 100000] [--queries 60]``; prints JSON. Needs ``tantivy~=0.27``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from typing import Any

import psycopg
from common import emit, pct, scratch_db

VOCAB = 20_000


def corpus(n: int, seed: int = 7) -> tuple[list[tuple[int, str, str]], list[str]]:
    rnd = random.Random(seed)
    words = [f"w{i:05d}x" for i in range(VOCAB)]
    weights = [1 / (i + 1) ** 1.05 for i in range(VOCAB)]
    docs = []
    for i in range(n):
        k = rnd.randint(20, 80)
        docs.append((i + 1, f"own_{i % 50:02d}", " ".join(rnd.choices(words, weights=weights, k=k))))
    return docs, words


def queries(words: list[str], n: int, seed: int = 11) -> dict[str, list[str]]:
    rnd = random.Random(seed)
    return {
        "rare": [rnd.choice(words[5000:20000]) for _ in range(n)],
        "common": [rnd.choice(words[0:20]) for _ in range(n)],
        "two_words": [f"{rnd.choice(words[20:2000])} {rnd.choice(words[20:2000])}" for _ in range(n)],
    }


GIN_Q = (
    "SELECT id, ts_rank_cd(tsv, q) AS r FROM search_docs, plainto_tsquery('simple', %s) q "
    "WHERE tsv @@ q AND owner = %s ORDER BY r DESC, id LIMIT 10"
)


def gin(url: str, docs: list[tuple[int, str, str]], qs: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            'CREATE TABLE search_docs (id BIGINT PRIMARY KEY, owner TEXT COLLATE "C" NOT NULL, text TEXT NOT NULL, '
            "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED)"
        )
        t0 = time.perf_counter()
        with c.cursor().copy("COPY search_docs (id, owner, text) FROM STDIN") as cp:
            for d in docs:
                cp.write_row(d)
        c.execute("CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv)")
        c.execute("CREATE INDEX search_docs_owner ON search_docs (owner)")
        c.execute("VACUUM ANALYZE search_docs")
        out["build_s"] = round(time.perf_counter() - t0, 2)
        size = c.execute("SELECT pg_total_relation_size('search_docs')").fetchone()[0]
        out["bytes_per_doc"] = round(size / len(docs), 1)
        out["gin_bytes_per_doc"] = round(
            c.execute("SELECT pg_relation_size('search_docs_tsv')").fetchone()[0] / len(docs), 1
        )
        for kind, qq in qs.items():
            lat = []
            for i, q in enumerate(qq):
                t0 = time.perf_counter()
                c.execute(GIN_Q, (q, f"own_{i % 50:02d}")).fetchall()
                lat.append((time.perf_counter() - t0) * 1000)
            out[kind] = {"p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3)}
        # without the owner filter: every match ranked
        lat = []
        for q in qs["common"]:
            t0 = time.perf_counter()
            c.execute(GIN_Q.replace("AND owner = %s ", ""), (q,)).fetchall()
            lat.append((time.perf_counter() - t0) * 1000)
        out["common_all_owners"] = {"p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3)}
    return out


def tantivy_index(path: str, docs: list[tuple[int, str, str]], *, commits: int = 1, churn: float = 0.0) -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True, indexed=True, fast=True)
    sb.add_text_field("owner", stored=False, tokenizer_name="raw")
    sb.add_text_field("body", stored=False, tokenizer_name="default")
    schema = sb.build()
    index = tantivy.Index(schema, path=path)
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    step = max(1, len(docs) // commits)
    rnd = random.Random(3)
    for s in range(0, len(docs), step):
        chunk = docs[s : s + step]
        for i, owner, text in chunk:
            writer.add_document(tantivy.Document(id=i, owner=owner, body=text))
        writer.commit()
        if churn:
            for i, owner, text in rnd.sample(chunk, int(len(chunk) * churn)):
                writer.delete_documents_by_term("id", i)
                writer.add_document(tantivy.Document(id=i, owner=owner, body=text))
            writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index, schema


def tantivy_top(index: Any, q: str, owner: str | None) -> list[tuple[float, int]]:
    import tantivy

    searcher = index.searcher()
    body = index.parse_query(q, ["body"])
    query = (
        body
        if owner is None
        else tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, body), (tantivy.Occur.Must, tantivy.Query.term_query(index.schema, "owner", owner))]
        )
    )
    hits = searcher.search(query, 10).hits
    return [(round(score, 5), searcher.doc(addr)["id"][0]) for score, addr in hits]


def tantivy_bench(docs: list[tuple[int, str, str]], qs: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        index, _ = tantivy_index(d, docs, commits=10)
        out["build_s"] = round(time.perf_counter() - t0, 2)
        for kind, qq in qs.items():
            lat = []
            for i, q in enumerate(qq):
                t0 = time.perf_counter()
                tantivy_top(index, q, f"own_{i % 50:02d}")
                lat.append((time.perf_counter() - t0) * 1000)
            out[kind] = {"p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3)}
    return out


def determinism(docs: list[tuple[int, str, str]], qs: dict[str, list[str]]) -> dict[str, Any]:
    sub = docs[:20_000]
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, tempfile.TemporaryDirectory() as d3:
        a, _ = tantivy_index(d1, sub, commits=1)
        b, _ = tantivy_index(d2, sub, commits=40)
        c, _ = tantivy_index(d3, sub, commits=40, churn=0.2)
        probe = qs["rare"][:20] + qs["common"][:20] + qs["two_words"][:20]
        res: dict[str, int] = {}
        for q in probe:
            ta, tb, tc = (tantivy_top(x, q, None) for x in (a, b, c))
            for name, other in (("one_vs_40_commits", tb), ("with_readds", tc)):
                # as returned (ties in engine order) / ties broken by id / the scores alone
                res[f"{name}_differs_as_returned"] = res.get(f"{name}_differs_as_returned", 0) + (ta != other)
                res[f"{name}_differs_ties_by_id"] = res.get(f"{name}_differs_ties_by_id", 0) + (
                    sorted(ta, key=lambda h: (-h[0], h[1])) != sorted(other, key=lambda h: (-h[0], h[1]))
                )
                res[f"{name}_scores_differ"] = res.get(f"{name}_scores_differ", 0) + (
                    [h[0] for h in ta] != [h[0] for h in other]
                )
        return {
            "queries": len(probe), **res,
            "num_docs": [x.searcher().num_docs for x in (a, b, c)],
        }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--determinism-only", action="store_true")
    a = ap.parse_args()
    docs, words = corpus(a.docs)
    qs = queries(words, a.queries)
    result: dict[str, Any] = {"docs": a.docs, "queries_per_kind": a.queries}
    if not a.determinism_only:
        with scratch_db("rfc0008_search") as url:
            result["gin"] = gin(url, docs, qs)
        result["tantivy"] = tantivy_bench(docs, qs)
    result["tantivy_determinism"] = determinism(docs, qs)
    emit(result)


if __name__ == "__main__":
    main()
