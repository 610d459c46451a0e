"""What ``holon run`` prints about settled turns, read back from the ledger.

In-process, ``holon run`` holds the ``TurnResult``s; through the daemon it only sees the events.
Both build their output from here (``GET /v1/agents/{agent}/turns`` serves ``turn_reports``), so
``--json`` is the same document either way.
"""

from __future__ import annotations

from typing import Any

from holon.ledger import BlobText, EventQuery
from holon.ledger import events as ev
from holon.projections import Store

__all__ = ["briefs_of", "turn_reports"]


def _text(store: Store, value: ev.LargeText | None) -> str | None:
    text = store.ledger.resolve(value)
    return text if text is None or isinstance(text, str) else (text.text or text.preview)


def turn_reports(store: Store, turn_ids: list[str]) -> list[dict[str, Any]]:
    """``TurnResult.as_json()`` of each settled turn in ``turn_ids`` (in the order given; turns
    not settled yet are left out)."""
    if not turn_ids:
        return []
    found: dict[str, dict[str, Any]] = {}
    for e in store.ledger.find(EventQuery(types=("turn.settled",), turn_ids=turn_ids)):
        p = e.payload
        if not isinstance(p, ev.TurnSettled):
            continue
        found[p.turn_id] = {
            "turn_id": p.turn_id,
            "outcome": p.outcome,
            "reply": _text(store, p.reply),
            "reason": p.reason,
            "rounds": p.rounds,
            "tool_calls": p.tool_calls,
            "usage": p.usage.model_dump(),
            "cost_usd": p.cost_usd,
            "requeued": p.requeue,
            "rejected": list(p.rejected),
        }
    return [found[t] for t in turn_ids if t in found]


def briefs_of(store: Store, agent_id: str, turn_ids: set[str]) -> list[dict[str, Any]]:
    """The briefs the agent delivered in those turns (the last 50 it delivered, at most)."""
    out = []
    for e in store.ledger.recent(agent_id, ("brief.delivered",), limit=50):
        if e.turn_id in turn_ids and isinstance(e.payload, ev.BriefDelivered):
            text = store.ledger.resolve(e.payload.text)
            shown = text.preview if isinstance(text, BlobText) else text or ""
            out.append({"kind": e.payload.kind, "text": shown})
    return out
