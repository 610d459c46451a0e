"""Optional dense retrieval: document embeddings beside the text index, fused into the ranking.

Search works fully without this module's help; an ``Embedder`` only adds a second opinion. It is
used when the home configures one (``[memory] embeddings``): the embedded MiniLM model from the
``holon[embed]`` extra, or any embedding model litellm reaches. On LoCoMo it lifts recall@10 by
about 1.3 points (RFC 0004); lexical ranking carries the rest.

Vectors live in ``search_vectors`` keyed by document id and model name, and are computed lazily
(``embed_pending``) in their own short transactions, outside the index catch-up, because a model
call is slow. A conversation turn is embedded with the turn before it ("Alice: ...\\nBob: ..."):
a short answer means little on its own. Query-time scoring is brute force over the searching
agent's vectors, newest ``MAX_DENSE_DOCS`` first, with numpy when it is installed.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence
from typing import Any, Protocol

from holon.errors import ModelError
from holon.memory.index import SearchIndex

__all__ = ["MAX_DENSE_DOCS", "Embedder", "dense_scores", "embed_pending"]

#: Dense scoring looks at most at this many of an agent's newest documents.
MAX_DENSE_DOCS = 50_000
#: Characters of each document given to the embedder.
EMBED_CHARS = 1_500


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model: vectors of different models never mix."""

    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def _pack(vec: Sequence[float]) -> bytes:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return array.array("f", (x / norm for x in vec)).tobytes()


def _unpack(blob: bytes) -> array.array[float]:
    out = array.array("f")
    out.frombytes(blob)
    return out


def embed_pending(index: SearchIndex, embedder: Embedder, *, batch: int = 64, limit: int | None = None) -> int:
    """Embed documents that have no vector for ``embedder`` yet. Returns how many were embedded."""
    index.ensure()
    ledger = index.db
    done = 0
    while limit is None or done < limit:
        size = batch if limit is None else min(batch, limit - done)
        rows = ledger.query(
            "SELECT d.id, d.kind, d.title, d.text, d.sender, d.segment FROM search_docs d "
            "LEFT JOIN search_vectors v ON v.id = d.id AND v.model = ? WHERE v.id IS NULL AND d.superseded = 0 "
            "ORDER BY d.id LIMIT ?",
            (embedder.name, size),
        )
        if not rows:
            break
        vectors = _embed(embedder, [_embed_text(ledger, r) for r in rows])
        stored = ledger.query("SELECT length(vec) FROM search_vectors WHERE model = ? LIMIT 1", (embedder.name,))
        dim = stored[0][0] // 4 if stored else len(vectors[0])
        if any(len(v) != dim for v in vectors):
            lengths = sorted({len(v) for v in vectors})
            raise ModelError(f"embedding model {embedder.name} returned vectors of {lengths} floats; expected {dim}")
        with index._tx() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO search_vectors(id, model, vec) "
                "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM search_docs WHERE id = ? AND superseded = 0)",
                [(r[0], embedder.name, _pack(v), r[0]) for r, v in zip(rows, vectors, strict=True)],
            )
        done += len(rows)
    return done


def _embed(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """``embedder.embed``, refusing an answer that would corrupt ``search_vectors`` or the scores."""
    vectors = embedder.embed(texts)
    if len(vectors) != len(texts):
        raise ModelError(f"embedding model {embedder.name} returned {len(vectors)} vectors for {len(texts)} texts")
    if any(len(v) == 0 for v in vectors):
        raise ModelError(f"embedding model {embedder.name} returned an empty vector")
    return vectors


def _embed_text(ledger: Any, row: tuple[Any, ...]) -> str:
    doc_id, kind, title, text, sender, segment = row
    if kind in ("message", "reply"):
        line = f"{sender}: {text}"[:EMBED_CHARS]
        if segment is not None:
            prev = ledger.query(
                "SELECT sender, text FROM search_docs WHERE segment = ? AND id < ? ORDER BY id DESC LIMIT 1",
                (segment, doc_id),
            )
            if prev:
                line = f"{prev[0][0]}: {prev[0][1][: EMBED_CHARS // 2]}\n{line}"
        return line
    return f"{title}\n{text}"[:EMBED_CHARS]


class _Matrix:
    """An agent's vectors for one model, cached until its documents change."""

    def __init__(self, ids: list[int], blobs: list[bytes]) -> None:
        self.ids = ids
        self.dim = len(blobs[0]) // 4 if blobs else 0
        try:
            import numpy as np  # optional: only an accelerator

            self.np: Any = np
            self.data: Any = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1) if blobs else None
        except ImportError:
            self.np = None
            self.data = [_unpack(b) for b in blobs]

    def scores(self, query: Sequence[float]) -> list[float]:
        if not self.ids:
            return []
        q = _unpack(_pack(query))
        if self.np is not None:
            return [float(x) for x in self.data @ self.np.asarray(q, dtype=self.np.float32)]
        return [sum(a * b for a, b in zip(v, q, strict=False)) for v in self.data]


_CACHE: dict[tuple[str, tuple[str, ...], str], tuple[tuple[int, int], _Matrix]] = {}


def dense_scores(
    index: SearchIndex, embedder: Embedder, owners: Sequence[str], query: str, *, top: int = 100
) -> dict[int, float]:
    """Cosine similarity of ``query`` to the owners' documents: the ``top`` best, by document id.

    Documents with no similarity at all (zero or negative) are left out: they are not matches.
    """
    index.ensure()
    ledger = index.db
    marks = ",".join("?" * len(owners))
    sql_from = f"FROM search_vectors v JOIN search_docs d ON d.id = v.id WHERE v.model = ? AND d.owner IN ({marks}) AND d.superseded = 0 "
    stamp = ledger.query(f"SELECT count(*), coalesce(max(v.id), 0) {sql_from}", (embedder.name, *owners))[0]
    key = (str(index.store.paths.db), tuple(owners), embedder.name)
    cached = _CACHE.get(key)
    if cached is None or cached[0] != tuple(stamp):
        rows = ledger.query(
            f"SELECT v.id, v.vec {sql_from} ORDER BY v.id DESC LIMIT {MAX_DENSE_DOCS}", (embedder.name, *owners)
        )
        cached = (tuple(stamp), _Matrix([r[0] for r in rows], [bytes(r[1]) for r in rows]))
        _CACHE[key] = cached
    matrix = cached[1]
    (qvec,) = _embed(embedder, [query[:EMBED_CHARS]])
    if matrix.ids and len(qvec) != matrix.dim:
        raise ModelError(
            f"embedding model {embedder.name} returned {len(qvec)} floats for the query; expected {matrix.dim}"
        )
    scored = sorted(zip(matrix.scores(qvec), matrix.ids, strict=True), reverse=True)[:top]
    return {doc_id: s for s, doc_id in scored if s > 0}
