"""``GET /v1/events``: every agent's events in one server-sent event stream (RFC 0005, "Event stream semantics").

The same stream as ``GET /v1/agents/{agent}/events`` (``stream.agent_events``) over the whole
ledger: each ledger event is an ``event`` message with ``id: <seq>`` (resume with
``Last-Event-ID`` or ``?after=``: every event after it, exactly once, in order), reply text being
generated is a ``delta`` message naming its agent and turn. Added here: ``status`` messages (no
id) with an agent's state as ``GET /v1/agents/{agent}/status`` gives it, one per agent when the
stream starts, then whenever an event may have changed it and it did change (a turn started or
settled, an input arrived, the agent was configured, paused or resumed). They are the state when
sent, not history: a reconnecting client gets a fresh snapshot instead of old states.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse

from holon.api.port import DaemonPort
from holon.api.stream import agent_events, last_event_cursor
from holon.errors import NotFoundError

__all__ = ["STATUS_TYPES", "home_events", "home_events_router"]

STATUS_TYPES = frozenset(
    {
        "agent.created",
        "agent.configured",
        "agent.deleted",
        "message.received",
        "turn.started",
        "turn.settled",
        "wait.registered",
        "wait.resolved",
        "timer.fired",
    }
)
"""Event types after which an agent's state is looked at again."""


def _status(port: DaemonPort, agent_id: str) -> dict[str, Any] | None:
    try:
        entry = asdict(port.agent_status(port.store.agent(agent_id)))
    except NotFoundError:
        return None  # deleted
    return entry


async def home_events(port: DaemonPort, after: int) -> AsyncIterator[dict[str, Any]]:
    """SSE messages for every agent: a status snapshot, then ledger events after ``after`` and live."""
    shown: dict[str, tuple[str, str]] = {}

    def changed(agent_id: str) -> dict[str, str] | None:
        entry = _status(port, agent_id)
        if entry is None:
            return None
        now = (str(entry.get("state")), str(entry.get("detail")))
        if shown.get(agent_id) == now:
            return None
        shown[agent_id] = now
        return {"event": "status", "data": json.dumps(entry, ensure_ascii=False)}

    for agent in port.store.agents():
        if (message := changed(agent.agent_id)) is not None:
            yield message
    live_from = port.store.ledger.head()
    async for message in agent_events(port, None, after):
        yield message
        if message.get("event") != "event" or int(message["id"]) <= live_from:
            continue
        event = json.loads(message["data"])
        if event["type"] in STATUS_TYPES and (status := changed(event["agent_id"])) is not None:
            yield status


def home_events_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["daemon"])

    @r.get("/events", responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream"}})
    async def events(
        after: Annotated[int | None, Query(ge=0, le=2**62, description="Events after this seq.")] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
    ) -> EventSourceResponse:
        """Every agent's ledger events (``event``, with ``id``), reply text as it is generated
        (``delta``), and agents' states (``status``) as one stream; resume with ``Last-Event-ID``."""
        return EventSourceResponse(home_events(port, last_event_cursor(after, last_event_id)), ping=15)

    return r
