"""Durable memory as JSON for the operator: one entry (``holon memory inspect --json``) and the
whole export (``holon memory export``). The CLI and the API (``GET /v1/memory/durable``,
``GET /v1/memory/export``) print the same documents from here."""

from __future__ import annotations

from typing import Any

from holon.evolve.review import list_entries, list_proposals
from holon.projections import Store
from holon.projections.durable import DurableState, is_stale, stale_at_us

__all__ = ["entry_json", "export_doc"]


def entry_json(s: DurableState, now_us: int) -> dict[str, Any]:
    """The entry's state with its freshness on the clock ``now_us``."""
    return {**s.model_dump(mode="json"), "stale": is_stale(s, now_us), "stale_at_us": stale_at_us(s)}


def export_doc(store: Store, now_us: int) -> dict[str, Any]:
    """Every durable entry (any status) and every proposal, with the ledger head they were read at."""
    return {
        "entries": [entry_json(s, now_us) for s in list_entries(store)],
        "proposals": [p.model_dump(mode="json") for p in list_proposals(store, status=None)],
        "ledger_head": store.ledger.head(),
    }
