"""What ``holon bench search`` measures MemorySearch against, built in the same run from the same documents.

* ``BodyFts``: the well-tuned raw baseline. A body-only FTS5 index (external content: a plain
  ``docs(id, body)`` table and an FTS5 table over its one column, the same tokenizer as holon's)
  in a database file of its own with holon's pragmas, merged into one b-tree (``optimize``) after
  each load. A query is the OR of the quoted query terms, ranked exhaustively:
  ``... MATCH ? ORDER BY rank LIMIT 10`` (``rank`` is ``bm25()``).
* ``TantivyIndex``: the dedicated-engine anchor, tantivy used the plain way (its own analyser,
  where holon's engine gets holon's terms): one ``body`` text field (stemmed English, stored, so a
  hit can show its text as holon's can) and an ``id``; a query is the disjunction of the quoted
  terms, top 10 by tantivy's BM25, without counting matches, and the stored text of the 10 hits
  is read (holon's search returns its hits' text: the same job from the caller's side). The side
  ``tantivy_ids`` times the search alone (ids and scores: the anchor's definition before
  2026-11-27), reported beside it.

Both index the same text holon's ``body`` column holds (``holon.memory.index_writer``: the folded
text, titles of non-turn documents included). Sizes: ``index_bytes`` is what the index costs on
disk with the text it returns (FTS5's shadow tables plus the content table; tantivy's directory).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from holon.bench.peer import OptionalPeer
from holon.memory.index_writer import Doc, cap
from holon.memory.text import fold, quote

__all__ = ["BodyFts", "Stopwatch", "TantivyIndex", "Timing", "body_text", "object_bytes"]

Timing = tuple[float, float]
"""``(wall_ms, cpu_ms)`` of one query."""


class Stopwatch:
    """Wall and CPU time from creation to ``stop()`` (CPU: ``time.process_time``, this process)."""

    def __init__(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def stop(self) -> Timing:
        return (time.perf_counter() - self.wall0) * 1000, (time.process_time() - self.cpu0) * 1000


_TOKENIZER = "porter unicode61 remove_diacritics 2"


def body_text(doc: Doc) -> str:
    """The text holon's index puts in a document's ``body`` column."""
    return fold(f"{doc.title}\n{cap(doc.text)}" if not doc.turn else cap(doc.text))


def object_bytes(conn: sqlite3.Connection) -> dict[str, int]:
    """Bytes on disk per table or index of ``conn``'s main database (SQLite's ``dbstat``)."""
    rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    return {str(name): int(size) for name, size in rows}


class BodyFts:
    """A body-only FTS5 index with external content, ranked exhaustively by ``bm25()``."""

    SQL = "SELECT rowid FROM body_fts WHERE body_fts MATCH ? ORDER BY rank LIMIT ?"

    def __init__(self, path: Path, pragmas: tuple[str, ...]) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        for p in pragmas:
            self.conn.execute(p)
        self.conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self.conn.execute(
            f"CREATE VIRTUAL TABLE body_fts USING fts5(body, content='docs', content_rowid='id', tokenize='{_TOKENIZER}')"
        )
        self.docs = 0

    def add(self, bodies: Iterable[str]) -> None:
        conn = self.conn
        conn.execute("BEGIN")
        for body in bodies:
            self.docs += 1
            conn.execute("INSERT INTO docs (id, body) VALUES (?, ?)", (self.docs, body))
            conn.execute("INSERT INTO body_fts (rowid, body) VALUES (?, ?)", (self.docs, body))
        conn.execute("COMMIT")
        conn.execute("INSERT INTO body_fts (body_fts) VALUES ('optimize')")

    def query(self, terms: tuple[str, ...], limit: int = 10) -> tuple[Timing, list[int]]:
        """(timing, rowids of the top ``limit``) for the OR of ``terms``."""
        expr = " OR ".join(quote(t) for t in terms)
        watch = Stopwatch()
        rows = self.conn.execute(self.SQL, (expr, limit)).fetchall()
        return watch.stop(), [int(r[0]) for r in rows]

    def index_bytes(self) -> dict[str, int]:
        """``fts``: FTS5's own tables; ``text``: the content table it reads bodies from."""
        sizes = object_bytes(self.conn)
        return {
            "fts": sum(v for k, v in sizes.items() if k.startswith("body_fts")),
            "text": sizes.get("docs", 0),
        }

    def close(self) -> None:
        self.conn.close()


class TantivyIndex(OptionalPeer):
    """The same documents in tantivy used the plain way (``holon.memory.engine.PlainIndex``: its
    own English stemmer on the bodies, BM25 top 10, no count)."""

    module = "tantivy"
    distribution = "tantivy"

    def __init__(self, path: Path) -> None:
        from holon.memory.engine import PlainIndex

        self.path = path
        self.plain = PlainIndex(path)
        self.docs = 0

    def add(self, bodies: Iterable[str]) -> None:
        start = self.docs
        bodies = list(bodies)
        self.docs += len(bodies)
        self.plain.add(zip(range(start + 1, self.docs + 1), bodies, strict=True))

    def query(self, terms: tuple[str, ...], limit: int = 10, *, texts: bool = True) -> tuple[Timing, list[int]]:
        """(timing, document numbers of the top ``limit``), parsing included and, with ``texts``,
        reading the stored text of each hit (what holon's search does for its hits: like for
        like); the numbers are those ``BodyFts`` gives (read from the fast ``id`` after the clock
        stops). ``texts=False`` is the anchor's definition before 2026-11-27 (ids and scores only)."""
        watch = Stopwatch()
        found = self.plain.search(self.plain.parse(terms), limit)
        if texts:
            self.plain.texts(found)
        timing = watch.stop()
        return timing, self.plain.ids(found)

    def index_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def close(self) -> None:
        self.plain.searcher = None
