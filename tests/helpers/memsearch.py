"""Writing searchable history into a real ``Store`` and reading the search index back independently.

``say`` and ``answer`` append conversation turns the way the runtime does (``input_events``; a
turn that settles with a reply). ``index_rows`` and ``fts_rows`` snapshot the index by document
key (ids differ between an incremental build and a rebuild; keys and contents must not).
``brute_total`` counts matching documents without the engine: every document's terms computed
again in Python, ownership and filters checked against ``search_docs``.
"""

from __future__ import annotations

import itertools

from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.memory.engine import Engine
from holon.memory.index import SearchIndex
from holon.memory.index_writer import Doc, body_of, meta_text
from holon.memory.text import engine_term, index_terms, plan_query
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.inputs import input_events

__all__ = ["answer", "brute_total", "fts_rows", "index_rows", "say"]

_turns = itertools.count(1)


def say(
    store: Store, agent: AgentState, text: str, *, sender: str = "operator", authority: Authority = "operator"
) -> Event:
    """A message for ``agent`` from ``sender`` (the operator unless told), through ``input_events``."""
    origin = "operator:cli" if authority == "operator" else f"{authority}:{sender}"
    events = input_events(
        store, agent.agent_id, text, origin=origin, authority=authority, sender=sender, channel="test"
    )
    return store.append(*events)[-1]


def answer(store: Store, agent: AgentState, text: str) -> Event:
    """A turn of ``agent`` that settles with ``text`` as its reply; returns the ``turn.settled`` event."""
    turn_id = f"turn_{next(_turns):05d}"
    store.append(NewEvent(agent.agent_id, ev.TurnStarted(turn_id=turn_id), turn_id=turn_id, origin="runtime:turn"))
    settled = store.append(
        NewEvent(
            agent.agent_id,
            ev.TurnSettled(turn_id=turn_id, outcome="completed", reply=text, rounds=1),
            turn_id=turn_id,
            origin="runtime:turn",
        )
    )
    return next(e for e in settled if e.type == "turn.settled")


def index_rows(store: Store) -> list[tuple[object, ...]]:
    """What each document shows, by key (superseded versions left out: no search sees them)."""
    sql = "SELECT key, ref, owner, kind, seq, title, text FROM search_docs WHERE superseded = 0 ORDER BY key"
    return [tuple(r) for r in store.local_db().query(sql)]


def _doc(row: tuple[object, ...]) -> Doc:
    key, owner, kind, ts_us, sender, title, text = row
    return Doc(str(key), "", owner=str(owner), kind=str(kind), ts_us=int(str(ts_us)), title=str(title),
               text=str(text), sender=str(sender), turn=kind in ("message", "reply"))  # fmt: skip


_DOC_COLUMNS = "key, owner, kind, ts_us, sender, title, text"


def fts_rows(store: Store) -> list[tuple[object, ...]]:
    """What each document is matched on (its own terms, body and meta; a turn's engine body adds
    the two previous turns', compared through matches elsewhere), by key, and whether
    the engine holds exactly one document for it, found under its owner."""
    engine = SearchIndex(store).engine
    out = []
    for row in store.local_db().query(f"SELECT id, {_DOC_COLUMNS} FROM search_docs ORDER BY key"):
        doc = _doc(tuple(row[1:]))
        held = engine.searcher().search(_id_query(engine, int(row[0]), doc.owner), 2, count=True).count
        out.append((doc.key, index_terms(body_of(doc)), index_terms(meta_text(doc)), held))
    return out


def _id_query(engine: Engine, doc_id: int, owner: str) -> object:
    import tantivy  # tests may read the engine directly

    q = tantivy.Query
    return q.boolean_query(
        [
            (tantivy.Occur.Must, q.term_query(engine.schema, "id", doc_id)),
            (tantivy.Occur.Must, q.term_query(engine.schema, "owner", owner)),
        ]
    )


def brute_total(
    store: Store,
    owners: list[str],
    query: str,
    *,
    kinds: tuple[str, ...] = (),
    since_us: int | None = None,
    until_us: int | None = None,
    work_item_id: str | None = None,
) -> int:
    """Documents of ``owners`` matching any term of ``query`` (in their text or metadata) and the
    filters, plus the turns found through them (the two turns before and after a matching turn in
    its segment, passing the filters too), counted the slow way: every document's terms computed
    again in Python."""
    engine = SearchIndex(store).engine
    terms = set(engine.analyze(engine_term(t) for t in plan_query(query).terms))
    passing: set[int] = set()
    matched: set[int] = set()
    segments: dict[int, list[int]] = {}
    for row in store.local_db().query(f"SELECT id, {_DOC_COLUMNS}, work_item_id, segment FROM search_docs ORDER BY id"):
        doc_id, doc, item, segment = int(row[0]), _doc(tuple(row[1:-2])), row[-2], row[-1]
        if segment is not None and doc.turn:
            segments.setdefault(int(segment), []).append(doc_id)
        if doc.owner not in owners or (kinds and doc.kind not in kinds):
            continue
        if (since_us is not None and doc.ts_us < since_us) or (until_us is not None and doc.ts_us > until_us):
            continue
        if work_item_id is not None and item != work_item_id:
            continue
        passing.add(doc_id)
        matched_terms = set(engine.analyze(f"{index_terms(body_of(doc))} {index_terms(meta_text(doc))}".split()))
        if terms & matched_terms:
            matched.add(doc_id)
    found = set(matched)
    for turns in segments.values():
        for n, doc_id in enumerate(turns):
            if doc_id in matched:
                found |= {j for j in turns[max(0, n - 2) : n + 3] if j in passing}
    return len(found)
