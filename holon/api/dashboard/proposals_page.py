"""Page 5, the proposals inbox: what agents propose (durable memory, skills, edits of operator
memory) with its evidence, accepted or dismissed by the operator.

The decisions are ``holon.evolve.review``'s, as ``holon proposals accept|dismiss`` and
``POST /v1/proposals/{id}/accept|dismiss`` make them (in a worker thread, as the API does): each is
a ledger event with an idempotency key per proposal, so a proposal is decided once whichever
surface decides it; deciding it again is a 409 naming what it was. Evidence seqs link to the
ledger page.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from holon.api.dashboard.pages import page
from holon.api.dashboard.security import PageSession, WriteSession
from holon.api.port import DaemonPort
from holon.clock import format_us
from holon.evolve import review

__all__ = ["proposals_router"]

ORIGIN = "operator:dashboard"


class AcceptIn(BaseModel):
    text: str | None = Field(None, max_length=20_000)
    """The operator's edit of the proposed text (``None``: as proposed)."""


class DismissIn(BaseModel):
    reason: str = Field("", max_length=500)


def proposals_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    store = port.store

    @r.get("/proposals")
    async def proposals_page(
        request: Request,
        session: PageSession,
        status: Annotated[Literal["pending", "accepted", "dismissed", "all"], Query()] = "pending",
    ) -> Response:
        """The proposals with this status (pending first: the inbox), newest first."""
        found = review.list_proposals(store, status=None if status == "all" else status)
        names = {a.agent_id: a.name for a in store.agents()}
        items = sorted(found, key=lambda p: p.seq, reverse=True)
        when = {p.proposal_id: f"{format_us(p.created_us)[:19]}Z" for p in items}
        return page(
            request, session, "proposals.html", page="proposals", items=items, names=names, when=when, status=status
        )

    @r.post("/ui/proposals/{proposal_id}/accept")
    async def accept(proposal_id: str, body: AcceptIn, session: WriteSession) -> dict[str, Any]:
        """Accept it, as proposed or with the operator's edited ``text``: a memory proposal becomes
        durable, a skill is installed, an edit applied."""
        d = await asyncio.to_thread(review.accept, store, proposal_id[:200], text=body.text, origin=ORIGIN)
        return {"outcome": d.outcome, "entry_id": d.entry_id, "skill_path": d.skill_path, "memory_file": d.memory_file}

    @r.post("/ui/proposals/{proposal_id}/dismiss")
    async def dismiss(proposal_id: str, body: DismissIn, session: WriteSession) -> dict[str, Any]:
        d = await asyncio.to_thread(review.dismiss, store, proposal_id[:200], reason=body.reason, origin=ORIGIN)
        return {"outcome": d.outcome}

    return r
