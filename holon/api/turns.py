"""``/v1/agents/{agent}/transcript`` and ``/turns``: what happened in an agent's turns, as the
CLI prints it (``holon transcript --json``, ``holon run --json``), so the CLI can be a client of
the daemon without a document of its own (RFC 0005, "The CLI is a client of the daemon")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from holon.api.port import DaemonPort
from holon.errors import UsageError
from holon.runtime.run_report import briefs_of, turn_reports
from holon.runtime.transcript import transcript_entries

__all__ = ["turns_router"]


def turns_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1/agents", tags=["agents"])
    store = port.store

    @r.get("/{agent}/transcript")
    async def transcript(
        agent: str, last: Annotated[int, Query(ge=1, le=10_000, description="How many recent turns.")] = 5
    ) -> list[dict[str, Any]]:
        """The agent's last turns as ``holon transcript --json`` prints them (each entry has a ``line``)."""
        return transcript_entries(store, store.agent(agent).agent_id, last)

    @r.get("/{agent}/turns")
    async def turns(
        agent: str,
        turn: Annotated[list[str], Query(description="Turn ids (repeatable, at most 100).")],
    ) -> dict[str, Any]:
        """Settled turns as ``holon run --json`` reports them (outcome, reply, reason, usage, ...)
        and the briefs the agent delivered in them; a turn not settled yet is left out."""
        if len(turn) > 100 or any(len(t) > 128 for t in turn):
            raise UsageError(f"at most 100 turn ids of at most 128 characters, got {len(turn)}")
        a = store.agent(agent)
        return {"turns": turn_reports(store, turn), "briefs": briefs_of(store, a.agent_id, set(turn))}

    return r
