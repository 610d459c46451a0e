"""``holon memory reindex``: rebuild the search index from the ledger (and the curated files).

The index is a projection (``holon.memory.index``): dropping it and reading the ledger again must
give the index that catching up event by event gave, and so the same search results
(``tests/test_memory_reindex.py`` checks that). A rebuild is the remedy for an index suspected
of damage, and what an ``INDEX_VERSION`` bump does by itself on the next search. With one agent,
only that agent's documents are rebuilt (its events, work items, tasks and own curated files);
shared scopes and durable entries stay as they are.
"""

from __future__ import annotations

import time
from typing import Any

from holon.memory.access import sync_agent_files
from holon.memory.index import Progress, SearchIndex
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = ["reindex"]


def reindex(store: Store, *, agent: AgentState | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Rebuild the whole index, or ``agent``'s documents; returns what was done, for the CLI."""
    index = SearchIndex(store)
    started = time.monotonic()
    if agent is None:
        fresh = index.rebuild(progress=progress)
        events = fresh.indexed_seq
        agents = store.agents()
    else:
        events = index.rebuild_owner(agent.agent_id, progress=progress)
        agents = [agent]
    files = sum(sync_agent_files(store, index, a) for a in agents)
    docs = index.live_docs()
    owners = [f"agent:{a.agent_id}" for a in agents] if agent is not None else list(docs)
    return {
        "agent": agent.name if agent is not None else None,
        "events": events,
        "files": files,
        "documents": sum(docs.get(o, 0) for o in owners),
        "seconds": round(time.monotonic() - started, 3),
    }
