"""Page 3, what the model saw: for a turn, each round's assembled context as its manifest lists it.

The data is ``holon.context.manifests.turn_contexts``, exactly what ``holon context show --json``
and ``GET /v1/agents/{a}/context`` return: per section its tier, representation, requested and
allocated tokens, refs included and omitted, and the reason (``pinned``, ``fits``, or why it was
compacted or left out). The page draws the token budget as a bar of sections (an inline SVG: its
widths are attributes, not styles, so the strict CSP holds) beside the same numbers as a table,
and the prompt as sent: its diff against the previous turn's prompt (``prompt_diff``: message by
message, line by line, the stable prefix a provider's cache can reuse marked; a later round against
the round before), the tools' schemas as sent, and every message in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from holon.api.dashboard.pages import page
from holon.api.dashboard.prompt_diff import diff_prompts, diff_tools
from holon.api.dashboard.security import PageSession
from holon.api.port import DaemonPort
from holon.context.manifests import turn_contexts
from holon.errors import NotFoundError
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = ["Segment", "bar", "context_router", "shared_prefix"]

TURNS = 20
"""Recent turns offered in the picker."""
BAR_WIDTH = 1000
"""The bar's width in SVG user units (it scales to the page)."""
_SECTION_DEFAULTS: dict[str, Any] = {
    "key": "?", "tier": "", "representation": "full", "reason": "", "excluded": False, "requested_tokens": 0,
    "allocated_tokens": 0, "refs_included": [], "refs_omitted": [],
}  # fmt: skip
"""A section as the template reads it (a manifest written by an older holon may lack a field)."""


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    tier: str
    x: float
    width: float
    tokens: int


def bar(sections: list[dict[str, Any]], limit: int) -> list[Segment]:
    """Each section's share of the budget ``limit`` as a segment of a ``BAR_WIDTH``-wide bar."""
    scale = BAR_WIDTH / max(limit, 1)
    out, x = [], 0.0
    for s in sections:
        tokens = int(s.get("allocated_tokens") or 0)
        if tokens <= 0:
            continue
        width = tokens * scale
        out.append(Segment(str(s["key"]), str(s.get("tier") or ""), round(x, 2), round(width, 2), tokens))
        x += width
    return out


def _messages(prompt: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(prompt.get("messages") or []) if prompt else []


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def shared_prefix(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> tuple[int, int]:
    """``(n, chars)``: the first ``n`` messages of ``now`` equal ``before``'s, and then the next
    message shares its first ``chars`` characters with ``before``'s (0 when there is none)."""
    n = 0
    while n < len(now) and n < len(before) and now[n] == before[n]:
        n += 1
    if n >= len(now) or n >= len(before):
        return n, 0
    a, b = _text(now[n]), _text(before[n])
    chars = 0
    while chars < len(a) and chars < len(b) and a[chars] == b[chars]:
        chars += 1
    return n, chars


def _turns(store: Store, agent: AgentState) -> list[str]:
    """The agent's recent turns with a recorded context, newest first."""
    index = store.ledger.recent_index(agent.agent_id, ("context.assembled",), limit=TURNS * 8)
    turns = [t for _seq, _type, t in reversed(index) if t]
    return list(dict.fromkeys(turns))[:TURNS]


def _previous_prompt(store: Store, agent: AgentState, first_seq: int) -> dict[str, Any] | None:
    """Round 0's prompt (messages and tools) of the turn before the one whose first context is at
    ``first_seq``; ``None`` when there is none or it was not recorded."""
    before = store.ledger.recent_index(agent.agent_id, ("context.assembled",), limit=1, before=first_seq)
    if not before or not before[0][2]:
        return None
    try:
        prompt: dict[str, Any] | None = turn_contexts(store, agent, before[0][2])[0]["prompt"]
    except NotFoundError:
        return None
    return prompt


def _view(item: dict[str, Any], compared: dict[str, Any] | None) -> dict[str, Any]:
    """One round as the template shows it; ``compared``: the prompt its diff is against (the
    previous turn's for round 0, the round before for the others; ``None``: nothing to compare)."""
    sections = [{**_SECTION_DEFAULTS, **s} for s in item["manifest"].get("sections", [])]
    item["manifest"] = {**item["manifest"], "sections": sections}
    messages = _messages(item["prompt"])
    previous = _messages(compared)
    limit = int(item["manifest"].get("budget", {}).get("limit") or item["budget_tokens"] or 1)
    n, chars = shared_prefix(messages, previous)
    tools = list(item["prompt"].get("tools") or []) if item["prompt"] else []
    before_tools = list(compared.get("tools") or []) if compared else None
    return {
        "item": item, "limit": limit, "bar": bar(sections, limit), "messages": [(m, _text(m)) for m in messages],
        "shared": n, "shared_chars": chars, "compared": compared is not None and bool(item["prompt"]),
        "diff": diff_prompts(messages, previous) if compared is not None else [],
        "tools": diff_tools(tools, before_tools),
        "left_out": [s for s in sections if s["excluded"] or s["representation"] != "full" or s["refs_omitted"]],
    }  # fmt: skip


def context_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    store = port.store

    @r.get("/agents/{agent}/context")
    async def context_page(
        request: Request,
        agent: str,
        session: PageSession,
        turn: Annotated[str | None, Query(max_length=128)] = None,
    ) -> Response:
        """Every round of ``turn`` (default the agent's last), as ``holon context show --json``."""
        try:
            a = store.agent(agent)
            rounds = turn_contexts(store, a, turn or None)
        except NotFoundError as e:
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        previous = _previous_prompt(store, a, rounds[0]["seq"])
        views = [_view(item, previous if i == 0 else rounds[i - 1]["prompt"]) for i, item in enumerate(rounds)]
        return page(
            request, session, "context.html", page="context", agent=a, turn_id=rounds[0]["turn_id"], views=views,
            turns=_turns(store, a), bar_width=BAR_WIDTH, had_previous=previous is not None,
        )  # fmt: skip

    return r
