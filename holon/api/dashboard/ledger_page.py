"""Page 7, the ledger: its tail with type and agent filters, one event in full, and ``verify``.

The tail reads with the same ``EventQuery`` as ``GET /v1/ledger/tail`` (newest first, older pages
by ``before``); an event shows exactly as ``holon ledger tail --json`` prints it (``event_json``);
``verify`` is the ledger's own check in a worker thread, as ``POST /v1/ledger/verify`` runs it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from holon.api.dashboard.pages import page
from holon.api.dashboard.security import PageSession, WriteSession
from holon.api.ledger import event_json
from holon.api.port import DaemonPort
from holon.clock import format_us
from holon.errors import LedgerError, NotFoundError, UsageError
from holon.ledger import Event, EventQuery
from holon.ledger.events import PAYLOAD_TYPES

__all__ = ["LedgerRow", "ledger_router", "summary"]

PAGE = 100
"""Events on one page of the tail."""
_SUMMARY_FIELDS = ("text", "content", "reply", "output", "reason", "error", "title", "arguments", "tool", "turn_id")
_SUMMARY_CHARS = 160


@dataclass(frozen=True, slots=True)
class LedgerRow:
    seq: int
    when: str
    agent: str
    type: str
    summary: str


def summary(payload: dict[str, Any]) -> str:
    """One line about an event: its first telling field (a message's text, a tool's output, ...),
    else its payload as compact JSON; clipped."""
    value = next((payload[f] for f in _SUMMARY_FIELDS if payload.get(f) not in (None, "", [], {})), None)
    text = str(value) if value is not None else json.dumps(payload, ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _row(event: Event, names: dict[str, str]) -> LedgerRow:
    data = event_json(event)
    return LedgerRow(
        seq=event.seq, when=f"{format_us(event.ts_us)[:23]}Z", agent=names.get(event.agent_id, event.agent_id),
        type=event.type, summary=summary(data.get("payload") or {}),
    )  # fmt: skip


def ledger_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    store = port.store

    @r.get("/ledger")
    async def ledger_page(
        request: Request,
        session: PageSession,
        type: Annotated[str | None, Query(max_length=64)] = None,
        agent: Annotated[str | None, Query(max_length=128)] = None,
        before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
    ) -> Response:
        """The newest ``PAGE`` events matching the filters (older ones: ``before`` the last shown)."""
        type = type or None
        if type is not None and type not in PAYLOAD_TYPES:
            raise UsageError(f"unknown event type {type[:64]!r}")
        agents = store.agents()
        names = {a.agent_id: a.name for a in agents}
        agent_id = store.agent(agent).agent_id if agent else None
        query = EventQuery(
            types=(type,) if type else None, agent_id=agent_id, upto=None if before is None else before - 1,
            limit=PAGE, newest_first=True,
        )  # fmt: skip
        rows = [_row(e, names) for e in store.ledger.find(query)]
        older = rows[-1].seq if len(rows) == PAGE and rows[-1].seq > 1 else None
        return page(
            request, session, "ledger.html", page="ledger", rows=rows, types=sorted(PAYLOAD_TYPES),
            agents=sorted(names.values()), chosen_type=type or "", chosen_agent=agent or "", older=older,
            head=store.ledger.head(),
        )  # fmt: skip

    @r.get("/ledger/{seq}")
    async def event_page(request: Request, seq: int, session: PageSession) -> Response:
        """One event in full, as ``holon ledger tail --json`` prints it."""
        try:
            event = store.ledger.get(seq)
        except NotFoundError as e:
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        names = {a.agent_id: a.name for a in store.agents()}
        return page(
            request, session, "event.html", page="ledger", row=_row(event, names), event=event_json(event),
            head=store.ledger.head(),
        )  # fmt: skip

    @r.post("/ui/ledger/verify")
    async def verify(session: WriteSession) -> dict[str, Any]:
        """The hash chain and sequence checked (seconds on a large ledger: a worker thread)."""
        try:
            v = await asyncio.to_thread(store.ledger.verify)
        except LedgerError as e:
            return {"ok": False, "events": 0, "problem": e.message}
        return {"ok": v.ok, "events": v.events, "problem": v.problem, "first_bad_seq": v.first_bad_seq}

    return r
