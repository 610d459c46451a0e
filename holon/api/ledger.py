"""``/v1/ledger`` (tail, verify, stats), ``/v1/status``, and external ingress ``/v1/hooks/{token}``."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from holon.api.errors import BodyTooLarge
from holon.api.models import EventOut, InputAccepted, LedgerStats, LedgerVerify
from holon.api.port import DaemonPort
from holon.errors import NotFoundError, UsageError
from holon.ledger import Event
from holon.ledger.store import canonical_event

__all__ = ["HOOK_MAX_BYTES", "event_json", "ledger_router"]

HOOK_MAX_BYTES = 64 * 1024
"""External events are notifications, not uploads: a hook body over this is refused with 413."""

NOT_FOUND = "Not Found"
"""The message of any unknown path; an unknown hook token answers the same."""


def event_json(event: Event) -> dict[str, Any]:
    """An event as ``holon ledger tail --json`` prints it."""
    return json.loads(canonical_event(event))  # type: ignore[no-any-return]


def ledger_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1")
    store = port.store

    @r.get("/ledger/tail", tags=["ledger"], response_model=list[EventOut])
    async def tail(
        n: Annotated[int, Query(ge=1, le=10_000, description="How many recent events.")] = 20,
        agent: Annotated[str | None, Query(max_length=128, description="Only this agent's (name or id).")] = None,
    ) -> list[dict[str, Any]]:
        agent_id = store.agent(agent).agent_id if agent else None
        return [event_json(e) for e in store.ledger.tail(n, agent_id=agent_id)]

    @r.post("/ledger/verify", tags=["ledger"], response_model=LedgerVerify)
    async def verify() -> LedgerVerify:
        """Check the sequence is gapless and the hash chain intact (``ok`` false when not; still 200)."""
        # A worker thread: over a large ledger this reads for seconds, and agents keep running. The
        # ledger's connection is shared under its lock, taken per chunk of 5,000 events.
        v = await asyncio.to_thread(store.ledger.verify)
        return LedgerVerify(ok=v.ok, events=v.events, first_bad_seq=v.first_bad_seq, problem=v.problem)

    @r.get("/ledger/stats", tags=["ledger"], response_model=LedgerStats)
    async def stats() -> LedgerStats:
        s = await asyncio.to_thread(store.ledger.stats)
        return LedgerStats(
            events=s.events,
            head_seq=s.head_seq,
            by_type=s.by_type,
            blobs=s.blobs,
            blob_bytes=s.blob_bytes,
            blobs_pruned=s.blobs_pruned,
            db_bytes=s.db_bytes,
        )

    @r.get("/status", tags=["daemon"])
    async def status() -> dict[str, Any]:
        """Daemon status: pid, uptime, ledger head, projection lag, and each agent's state."""
        return port.status()

    @r.post(
        "/hooks/{token}",
        tags=["hooks"],
        status_code=202,
        response_model=InputAccepted,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object", "additionalProperties": True}}},
            }
        },
    )
    async def hook(token: str, request: Request) -> InputAccepted:
        """External event ingress: the path token is the capability (no Authorization header).

        The JSON object becomes an input with ``external`` authority and origin ``external:hook``.
        It resolves the agent's pending ``wait(on="external")``: all of them, or, when the object
        has a string ``event`` field, those with no target or with that target.
        """
        agent = port.agent_for_token(token) if len(token) <= 256 else None
        if agent is None:
            raise NotFoundError(NOT_FOUND)
        body = await request.body()
        if len(body) > HOOK_MAX_BYTES:
            raise BodyTooLarge(f"hook body over the limit of {HOOK_MAX_BYTES} bytes")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise UsageError("the hook body is not JSON") from e
        if not isinstance(data, dict):
            raise UsageError("the hook body must be a JSON object")
        text = "External event (hook):\n" + json.dumps(data, ensure_ascii=False, sort_keys=True)
        name = data.get("event")
        event = port.submit(
            agent.agent_id, text, origin="external:hook", authority="external", sender="external", channel="hook",
            event=name if isinstance(name, str) and name else None,
        )  # fmt: skip
        return InputAccepted(agent_id=agent.agent_id, seq=event.seq, event_id=event.id)

    return r
