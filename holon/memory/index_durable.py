"""Durable memory entries in the search index (RFC 0006): the active ones, for recall.

They live in tables of their own (``search_durable_docs``, ``search_durable``) so that recall ranks
them among themselves and MemorySearch's results do not change (it finds entries through their
markdown views). The index follows the ``durable`` projection: an entry goes in when recorded and
out when superseded or forgotten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from holon.ledger import events as ev
from holon.memory.index_schema import owner_token
from holon.memory.text import STOP_WORDS, fold, plan_query, quote
from holon.projections import Store

__all__ = ["DURABLE_TERMS", "durable_expression", "durable_matches", "index_durable"]

#: Most query terms a recall matches on.
DURABLE_TERMS = 48


def _drop_durable(conn: sqlite3.Connection, entry_id: str) -> None:
    row = conn.execute("SELECT id FROM search_durable_docs WHERE entry_id = ?", (entry_id,)).fetchone()
    if row is not None:
        conn.execute("DELETE FROM search_durable WHERE rowid = ?", (row[0],))
        conn.execute("DELETE FROM search_durable_docs WHERE id = ?", (row[0],))


def index_durable(conn: sqlite3.Connection, p: ev.DurableRecorded | ev.DurableForgotten) -> None:
    """Follow the ``durable`` projection: a recorded entry goes in (unless it was recorded as
    history, already superseded), the entries it supersedes and a forgotten one go out. An entry
    is indexed once, as the projection records it once."""
    if isinstance(p, ev.DurableForgotten):
        _drop_durable(conn, p.entry_id)
        return
    for old in p.supersedes:
        _drop_durable(conn, old)
    seen = conn.execute("SELECT 1 FROM search_durable_docs WHERE entry_id = ?", (p.entry_id,)).fetchone()
    if p.superseded_by or seen is not None:
        return
    e = p.entry
    cur = conn.execute("INSERT INTO search_durable_docs(entry_id, owner) VALUES (?, ?)", (p.entry_id, e.owner))
    conn.execute(
        "INSERT INTO search_durable(rowid, body, meta, scope) VALUES (?, ?, ?, ?)",
        (cur.lastrowid, fold(e.text), fold(f"{e.subject.split(':', 1)[-1]} {e.kind}"), owner_token(e.owner)),
    )


def durable_expression(owners: Iterable[str], query: str) -> str | None:
    """The FTS5 MATCH expression for the durable entries of ``owners`` that share a stem with
    ``query`` (its content words quoted and OR-ed; never raw syntax), or ``None`` without any."""
    terms = [t for t in plan_query(query).terms if t not in STOP_WORDS][:DURABLE_TERMS]
    tokens = [owner_token(o) for o in dict.fromkeys(owners)]
    if not terms or not tokens:
        return None
    return f"{{body meta}} : ({' OR '.join(quote(t) for t in terms)}) AND scope : ({' OR '.join(tokens)})"


def durable_matches(store: Store, owners: Iterable[str], query: str, *, limit: int = 50) -> dict[str, float]:
    """Entry id -> relevance in (0, 1] (bm25 relative to the best match) of the active durable
    entries of ``owners`` the index matches with ``query``. Read-only and never catching up (it runs
    on the turn path; the daemon keeps the index current): ``{}`` before the index has the table.
    """
    expr = durable_expression(owners, query)
    db = store.local_db()
    if expr is None or not db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_durable'"):
        return {}
    rows = db.query(
        "SELECT d.entry_id, bm25(search_durable, 1.0, 0.5, 0.0) AS rank FROM search_durable "
        "JOIN search_durable_docs d ON d.id = search_durable.rowid WHERE search_durable MATCH ? "
        "ORDER BY rank, d.entry_id LIMIT ?",  # ties by id: the same entries whatever FTS5's row order
        (expr, limit),
    )
    best = min((float(r[1]) for r in rows), default=0.0)
    if best >= 0:  # bm25 is negative for a match; nothing (or nothing meaningful) matched
        return {}
    return {str(entry_id): float(rank) / best for entry_id, rank in rows}
