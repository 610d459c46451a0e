"""The recorded context of a turn: per model round, what was included, compacted or left out, and why.

``holon context show`` and the HTTP API's ``/context`` read it through ``turn_contexts``, so both
explain a turn the same way. It reads the ``context.assembled`` events the turn loop recorded.
"""

from __future__ import annotations

import json
from typing import Any

from holon.errors import NotFoundError
from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = ["turn_contexts", "whole_manifest"]

_SCAN = 500
"""How many recent ``context.assembled`` events of the agent are searched for the turn."""


def _assembled(store: Store, agent_id: str, turn: str | None) -> list[tuple[Event, ev.ContextAssembled]]:
    found = [
        (e, e.payload)
        for e in store.ledger.recent(agent_id, ("context.assembled",), limit=_SCAN)
        if isinstance(e.payload, ev.ContextAssembled)
    ]
    if turn is not None:
        return [(e, p) for e, p in found if p.turn_id == turn or p.turn_id.endswith(turn)]
    if not found:
        return []
    last = found[-1][1].turn_id
    return [(e, p) for e, p in found if p.turn_id == last]


def _text(store: Store, value: Any) -> str | None:
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved
    return resolved.text


def whole_manifest(
    store: Store, text: str | None, base_seq: int | None, known: dict[int, ev.ContextAssembled] | None = None
) -> dict[str, Any] | None:
    """A recorded manifest as a whole: one written against an earlier round's (``manifest_base``)
    has each repeated entry as its index in that manifest's sections, put back here."""
    if not text:
        return None
    manifest: dict[str, Any] = json.loads(text)
    if base_seq is None:
        return manifest
    base = (known or {}).get(base_seq)
    if base is None:
        found = store.ledger.get(base_seq).payload
        assert isinstance(found, ev.ContextAssembled), base_seq
        base = found
    base_manifest = whole_manifest(store, _text(store, base.manifest), base.manifest_base)
    entries = base_manifest["sections"] if base_manifest is not None else []
    manifest["sections"] = [entries[s] if isinstance(s, int) else s for s in manifest["sections"]]
    return manifest


def turn_contexts(store: Store, agent: AgentState, turn: str | None = None) -> list[dict[str, Any]]:
    """One item per model round of ``turn`` (a turn id or its suffix; default the agent's last turn).

    Each item has the turn id, round, seq, budget and used tokens, the manifest digest, summary and
    manifest, and ``prompt`` (messages and tools exactly as sent, or None when not recorded).
    Raises ``NotFoundError`` when nothing was recorded for that turn.
    """
    rounds = _assembled(store, agent.agent_id, turn)
    if not rounds:
        raise NotFoundError(f"no assembled context for agent {agent.name}" + (f" and turn {turn}" if turn else ""))
    items = []
    tools_text = None
    by_seq = {e.seq: p for e, p in rounds}
    for e, p in rounds:
        manifest_text = _text(store, p.manifest)
        prompt_text = _text(store, p.prompt)
        tools_text = _text(store, p.tools) or tools_text  # recorded with round 0
        items.append(
            {
                "turn_id": p.turn_id,
                "round": p.round,
                "seq": e.seq,
                "budget_tokens": p.budget_tokens,
                "used_tokens": p.used_tokens,
                "digest": p.manifest_digest,
                "summary": p.summary,
                "manifest": whole_manifest(store, manifest_text, p.manifest_base, by_seq),
                "prompt": {"messages": json.loads(prompt_text), "tools": json.loads(tools_text or "[]")}
                if prompt_text
                else None,
            }
        )
    return items
