"""``GET /v1/agents/{agent}/events``: an agent's ledger events as server-sent events, or a JSON page.

Exactly once, in order, across reconnects: the ledger is the source of truth and the stream is
only ever a read of it from a cursor. Each ``event`` SSE message carries ``id: <seq>``; a client
reconnects with ``Last-Event-ID`` (or ``?after=SEQ``) and gets every event after it. Live notices
from ``port.subscribe`` only *wake* the reader (and carry ``delta`` text, sent as ``delta``
messages without ids, since a half-generated reply is not history; likewise ``model`` messages,
``{"what": "local model", "state": "starting"}``, while a model child starts: a client shows
"starting the local model…" instead of nothing); the events themselves are
always read from the ledger after the cursor, so an event appended while the client was away, or
between the catch-up read and the subscription, is neither lost nor sent twice. A wake-up poll
covers a notice that never comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse

from holon.api.ledger import event_json
from holon.api.models import EventsPage
from holon.api.port import DaemonPort, Notice
from holon.errors import UsageError
from holon.ledger import Event

__all__ = ["POLL_S", "agent_events", "events_router", "last_event_cursor"]

POLL_S = 1.0
"""Longest wait for a notice before the ledger is read again anyway."""
PAGE = 500
"""Events read from the ledger at a time."""
QUEUE = 10_000
"""Notices buffered per stream; past that, deltas are dropped (events are re-read from the ledger)."""


def _cursor(after: int | None, last_event_id: str | None) -> int:
    if last_event_id is not None and last_event_id.strip():
        value = last_event_id.strip()
        if not value.isdigit() or len(value) > 18:
            raise UsageError(f"Last-Event-ID must be an event seq, got {value[:40]!r}")
        return int(value)
    return after or 0


last_event_cursor = _cursor
"""The stream's cursor: ``Last-Event-ID`` when sent (it wins), else ``?after=``."""


async def _pump(port: DaemonPort, agent_id: str | None, queue: asyncio.Queue[Notice]) -> None:
    async for notice in port.subscribe(agent_id):
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(notice)


def _message(event: Event) -> dict[str, str]:
    return {"id": str(event.seq), "event": "event", "data": json.dumps(event_json(event), ensure_ascii=False)}


async def agent_events(
    port: DaemonPort, agent_id: str | None, after: int, *, poll_s: float = POLL_S
) -> AsyncIterator[dict[str, Any]]:
    """SSE messages for ``agent_id`` (every agent's when ``None``): every ledger event after
    ``after``, then live, until cancelled."""
    queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=QUEUE)
    pump = asyncio.create_task(_pump(port, agent_id, queue), name=f"sse:{agent_id or '*'}")
    await asyncio.sleep(0)  # let the subscription start before the catch-up read
    cursor = after
    notices: list[Notice] = []
    try:
        while True:
            # Notices in the order the port published them: an event notice first sends the
            # ledger up to its seq, so deltas and events interleave as they happened.
            for notice in notices:
                if notice.seq is not None and notice.seq > cursor:  # the ledger up to it goes first
                    for event in port.store.ledger.read(cursor, agent_id=agent_id, limit=notice.seq - cursor):
                        if event.seq > notice.seq:
                            break
                        cursor = event.seq
                        yield _message(event)
                if notice.kind == "delta":
                    data = {"agent_id": notice.agent_id, "turn_id": notice.turn_id, "text": notice.text}
                    yield {"event": "delta", "data": json.dumps(data, ensure_ascii=False)}
                elif notice.kind == "model":
                    yield {"event": "model", "data": json.dumps({"what": notice.text, "state": notice.state})}
            notices = []
            batch = list(port.store.ledger.read(cursor, agent_id=agent_id, limit=PAGE))
            for event in batch:
                cursor = event.seq
                yield _message(event)
            if len(batch) == PAGE:
                continue
            if pump.done() and queue.empty():
                await asyncio.sleep(poll_s)  # no live source (the daemon is stopping): poll
                continue
            try:
                notices.append(await asyncio.wait_for(queue.get(), timeout=poll_s))
            except TimeoutError:
                continue
            while not queue.empty():
                notices.append(queue.get_nowait())
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump


def events_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1/agents", tags=["agents"])

    @r.get(
        "/{agent}/events",
        response_model=EventsPage,
        responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream, or a JSON page"}},
    )
    async def events(
        request: Request,
        agent: str,
        after: Annotated[int | None, Query(ge=0, le=2**62, description="Events after this seq.")] = None,
        stream: Annotated[bool, Query(description="false: one JSON page instead of a stream.")] = True,
        limit: Annotated[int, Query(ge=1, le=PAGE, description="Page size (stream=false).")] = 100,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
    ) -> Any:
        """The agent's ledger events from a cursor (``Last-Event-ID`` wins over ``after``)."""
        a = port.store.agent(agent)
        cursor = _cursor(after, last_event_id)
        if not stream:
            head = port.store.ledger.head()
            page = [event_json(e) for e in port.store.ledger.read(cursor, agent_id=a.agent_id, limit=limit)]
            body = {"events": page, "next_after": page[-1]["seq"] if page else cursor, "head": head}
            return JSONResponse(body)
        return EventSourceResponse(agent_events(port, a.agent_id, cursor), ping=15)

    return r
