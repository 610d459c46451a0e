"""Writing searchable history into a real ``Store`` and reading the search index back independently.

``say`` and ``answer`` append conversation turns the way the runtime does (``input_events``; a
turn that settles with a reply). ``index_rows`` and ``fts_rows`` snapshot the index by document
key (ids differ between an incremental build and a rebuild; keys and contents must not).
``brute_total`` counts matching documents without the planner: one unscoped FTS query per term,
then ownership and filters checked in Python against ``search_docs``.
"""

from __future__ import annotations

import itertools

from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.memory.text import plan_query, quote
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
    """What each document shows, by key."""
    return [
        tuple(r)
        for r in store.ledger.query("SELECT key, ref, owner, kind, seq, title, text FROM search_docs ORDER BY key")
    ]


def fts_rows(store: Store) -> list[tuple[object, ...]]:
    """What each document is matched on (every FTS column, neighbour context included), by key."""
    return [
        tuple(r)
        for r in store.ledger.query(
            "SELECT d.key, f.body, f.prev, f.next, f.meta, f.scope FROM search_docs d "
            "JOIN search_fts f ON f.rowid = d.id ORDER BY d.key"
        )
    ]


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
    """Documents of ``owners`` matching any term of ``query`` and the filters, counted the slow way."""
    ids: set[int] = set()
    for term in plan_query(query).terms:
        quoted = "{body prev next meta} : " + quote(term)  # query words never match the scope column
        ids |= {
            int(r[0]) for r in store.ledger.query("SELECT rowid FROM search_fts WHERE search_fts MATCH ?", [quoted])
        }
    n = 0
    for doc_id, owner, kind, ts_us, item in store.ledger.query(
        "SELECT id, owner, kind, ts_us, work_item_id FROM search_docs"
    ):
        if doc_id not in ids or owner not in owners or (kinds and kind not in kinds):
            continue
        if (since_us is not None and ts_us < since_us) or (until_us is not None and ts_us > until_us):
            continue
        if work_item_id is not None and item != work_item_id:
            continue
        n += 1
    return n
