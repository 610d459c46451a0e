"""``/v1/proposals`` and durable memory (RFC 0006): the operator's review, over HTTP.

Accept, dismiss and forget go through ``holon.evolve.review`` (the same functions as the CLI and
the REPL), with origin ``operator:api``. Ids may be unique prefixes. They run in a worker thread:
besides the append they rewrite markdown views (an operator-scope entry is shown in every agent's
home), and the daemon's loop must keep running turns meanwhile. Reads stay on the loop, like the
other routers' projection reads.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from holon.api.port import DaemonPort
from holon.clock import SystemClock
from holon.errors import UsageError
from holon.evolve import review
from holon.evolve.export import entry_json, export_doc
from holon.evolve.jobs import JobQueue
from holon.memory.access import owners_for
from holon.projections.durable import DurableState, ProposalState, is_stale, stale_at_us

__all__ = ["evolve_router"]


class AcceptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = Field(None, min_length=1, max_length=20_000, description="The operator's edited text.")


class DismissIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500)


class Decision(BaseModel):
    proposal: ProposalState
    outcome: Literal["accepted", "dismissed"]
    entry_id: str | None = None
    skill_path: str | None = None
    memory_file: str | None = None


class Retried(BaseModel):
    retried: int
    """How many dead jobs were queued again."""


class DurableOut(BaseModel):
    entry: DurableState
    stale: bool
    stale_at_us: int | None


def durable_out(s: DurableState, now_us: int) -> DurableOut:
    return DurableOut(entry=s, stale=is_stale(s, now_us), stale_at_us=stale_at_us(s))


def evolve_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["memory"])
    store = port.store

    def _now() -> int:
        clock = getattr(port, "clock", None) or SystemClock()  # the daemon's (injected in tests)
        return int(clock.now_us())

    def _ref(ref: str) -> str:
        if len(ref) > 200:
            raise UsageError("ids are at most 200 characters")
        return ref

    @r.get("/proposals", response_model=list[ProposalState])
    async def list_proposals(
        status: Annotated[Literal["pending", "accepted", "dismissed", "all"], Query()] = "pending",
        agent: Annotated[str | None, Query(max_length=128)] = None,
    ) -> list[ProposalState]:
        agent_id = store.agent(agent).agent_id if agent else None
        return review.list_proposals(store, status=None if status == "all" else status, agent_id=agent_id)

    @r.get("/proposals/{proposal_id}", response_model=ProposalState)
    async def show_proposal(proposal_id: str) -> ProposalState:
        return review.find_proposal(store, _ref(proposal_id))

    @r.post("/proposals/{proposal_id}/accept", response_model=Decision)
    async def accept(proposal_id: str, body: AcceptIn | None = None) -> Decision:
        text = body.text if body else None
        d = await asyncio.to_thread(review.accept, store, _ref(proposal_id), text=text, origin="operator:api")
        return Decision(
            proposal=d.proposal,
            outcome=d.outcome,
            entry_id=d.entry_id,
            skill_path=d.skill_path,
            memory_file=d.memory_file,
        )

    @r.post("/proposals/{proposal_id}/dismiss", response_model=Decision)
    async def dismiss(proposal_id: str, body: DismissIn | None = None) -> Decision:
        reason = body.reason if body else ""
        d = await asyncio.to_thread(review.dismiss, store, _ref(proposal_id), reason=reason, origin="operator:api")
        return Decision(proposal=d.proposal, outcome=d.outcome)

    @r.get("/agents/{agent}/memory/durable", response_model=list[DurableOut])
    async def durable(
        agent: str,
        scope: Annotated[Literal["operator", "workspace", "agent"] | None, Query()] = None,
        status: Annotated[Literal["active", "superseded", "forgotten", "stale", "all"], Query()] = "active",
    ) -> list[DurableOut]:
        """The entries ``agent`` can recall (its own scope, its workspace's, the operator's);
        ``status=stale``: the active ones past their stale-after time on the daemon's clock."""
        a = store.agent(agent)
        now = _now()
        found = review.list_entries(
            store, scope=scope, status=None if status == "all" else status, owners=owners_for(a), now_us=now
        )
        return [durable_out(s, now) for s in found]

    @r.get("/memory/durable")
    async def durable_all(
        agent: Annotated[str | None, Query(max_length=128, description="Only what this agent can recall.")] = None,
        scope: Annotated[Literal["operator", "workspace", "agent"] | None, Query()] = None,
        status: Annotated[Literal["active", "superseded", "forgotten", "stale", "all"], Query()] = "active",
    ) -> list[dict[str, Any]]:
        """Durable entries as ``holon memory inspect --json`` prints them (every entry, or
        ``agent``'s), each with ``stale`` and ``stale_at_us`` on the daemon's clock."""
        owners = owners_for(store.agent(agent)) if agent else None
        now = _now()
        found = review.list_entries(
            store, scope=scope, status=None if status == "all" else status, owners=owners, now_us=now
        )
        return [entry_json(s, now) for s in found]

    @r.get("/memory/export")
    async def export() -> dict[str, Any]:
        """Every durable entry (any status) and every proposal, as ``holon memory export`` writes them."""
        return export_doc(store, _now())

    @r.post("/memory/durable/{entry_id}/forget", response_model=DurableOut)
    async def forget(entry_id: str, body: DismissIn | None = None) -> DurableOut:
        reason = body.reason if body else ""
        s = await asyncio.to_thread(review.forget, store, _ref(entry_id), reason=reason, origin="operator:api")
        return durable_out(s, _now())

    @r.post("/evolve/retry-dead", response_model=Retried)
    async def retry_dead() -> Retried:
        """Re-arm dead evolve jobs (``GET /v1/status`` lists them under ``evolve.dead``)."""
        queue = JobQueue(store)
        return Retried(retried=await asyncio.to_thread(queue.retry_dead, _now()))

    return r
