"""The dashboard's changes (JSON, session + CSRF token) and its live streams (SSE, session).

Each change calls the same ``DaemonPort`` method as its ``/v1`` route, so it is as durable and as
checked (a bad schedule is the same 400, an unknown agent the same 404). Changes arrive as JSON
with the page's CSRF token in ``X-Holon-CSRF`` (``security.write_session``). Streams are the API's
own (``holon.api.stream.agent_events``: every ledger event after a cursor, exactly once, then live)
behind the session cookie, since ``EventSource`` cannot send a header; a stream only reads.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from sse_starlette import EventSourceResponse

from holon.api.dashboard.security import PageSession, WriteSession
from holon.api.models import AddTimer, CreateAgent, InputAccepted, InputIn
from holon.api.port import DaemonPort
from holon.api.stream import agent_events, last_event_cursor
from holon.projections.state import AgentState, TimerProjection
from holon.runtime.ingress import InputSpec, check_idempotency_key

__all__ = ["actions_router", "dashboard_input"]

AfterQ = Annotated[int | None, Query(ge=0, le=2**62)]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)]


def dashboard_input(text: str, idempotency_key: str | None) -> InputSpec:
    """The operator's message typed into the dashboard (channel ``dashboard``)."""
    key = None if idempotency_key is None else check_idempotency_key(idempotency_key)
    return InputSpec(
        text, origin="operator:dashboard", authority="operator", sender="operator", channel="dashboard",
        idempotency_key=key,
    )  # fmt: skip


def actions_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/ui", include_in_schema=False)
    store = port.store

    def agent_id(agent: str) -> str:
        return store.agent(agent).agent_id

    @r.post("/agents", status_code=201)
    async def create(body: CreateAgent, session: WriteSession) -> AgentState:
        return port.create_agent(
            body.name, template=body.template, workspace=body.workspace, schedule=body.schedule or None,
            prompt=body.prompt or None, settings=body.settings,
        )  # fmt: skip

    @r.post("/agents/{agent}/pause")
    async def pause(agent: str, session: WriteSession) -> AgentState:
        return port.pause(agent_id(agent))

    @r.post("/agents/{agent}/resume")
    async def resume(agent: str, session: WriteSession) -> AgentState:
        return port.resume(agent_id(agent))

    @r.post("/agents/{agent}/abort")
    async def abort(agent: str, session: WriteSession) -> dict[str, bool]:
        return {"aborted": await port.abort_anywhere(agent_id(agent))}

    @r.delete("/agents/{agent}", status_code=204, response_class=Response)
    async def delete(agent: str, session: WriteSession) -> Response:
        port.delete(agent_id(agent))
        return Response(status_code=204)

    @r.post("/agents/{agent}/messages", status_code=202)
    async def message(agent: str, body: InputIn, session: WriteSession) -> InputAccepted:
        """The operator's input; durable when answered (the reply arrives on the stream)."""
        event = await port.submit_input(agent_id(agent), dashboard_input(body.text, body.idempotency_key))
        return InputAccepted(agent_id=event.agent_id, seq=event.seq, event_id=event.id)

    @r.post("/agents/{agent}/timers", status_code=201)
    async def add_timer(agent: str, body: AddTimer, session: WriteSession) -> TimerProjection:
        return port.add_timer(agent_id(agent), body.schedule, prompt=body.prompt or None)

    @r.delete("/agents/{agent}/timers/{timer_id}")
    async def cancel_timer(agent: str, timer_id: str, session: WriteSession) -> TimerProjection:
        return port.cancel_timer(agent_id(agent), timer_id)

    @r.get("/agents/{agent}/events")
    async def agent_stream(
        agent: str, session: PageSession, after: AfterQ = None, last_event_id: LastEventId = None
    ) -> EventSourceResponse:
        """The agent's ledger events after the cursor, then live (with ``delta`` text as it is generated)."""
        return EventSourceResponse(
            agent_events(port, agent_id(agent), last_event_cursor(after, last_event_id)), ping=15
        )

    @r.get("/events")
    async def all_events(
        session: PageSession, after: AfterQ = None, last_event_id: LastEventId = None
    ) -> EventSourceResponse:
        """Every agent's events from the cursor (the head when none): the agents page refreshes on them."""
        cursor = last_event_cursor(after, last_event_id) if (after or last_event_id) else store.ledger.head()
        return EventSourceResponse(agent_events(port, None, cursor), ping=15)

    return r
