"""``/v1/ledger`` (tail, verify, stats), ``/v1/status``, and external ingress ``/v1/hooks/{token}``."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from holon.api.agents import AllQ, IdempotencyHeader, one_key
from holon.api.errors import BodyTooLarge
from holon.api.models import BadRow, EventOut, InputAccepted, LedgerStats, LedgerVerify
from holon.api.port import DaemonPort
from holon.errors import LedgerError, NotFoundError, UsageError
from holon.ledger import Event, EventQuery
from holon.ledger.events import PAYLOAD_TYPES
from holon.ledger.store import canonical_event
from holon.runtime.ingress import InputSpec, check_text
from holon.runtime.status import without_internal

__all__ = ["HOOK_MAX_BYTES", "event_json", "ledger_router"]

HOOK_MAX_BYTES = 64 * 1024
"""External events are notifications, not uploads: a hook body over this is refused with 413."""

NOT_FOUND = "Not Found"
"""The message of any unknown path; an unknown hook token answers the same."""


def event_json(event: Event) -> dict[str, Any]:
    """An event as ``holon ledger tail --json`` prints it."""
    return json.loads(canonical_event(event))


MAX_TYPES = 32
"""At most this many ``type`` filters in one tail request."""


def _event_types(types: list[str]) -> tuple[str, ...]:
    """``types`` checked against the catalog: a typo is a 400 naming it, not an empty answer."""
    if len(types) > MAX_TYPES:
        raise UsageError(f"at most {MAX_TYPES} type filters, got {len(types)}")
    unknown = sorted(t for t in set(types) if t not in PAYLOAD_TYPES)
    if unknown:
        raise UsageError(f"unknown event type {unknown[0][:64]!r} (see GET /v1/ledger/stats for the types in use)")
    return tuple(dict.fromkeys(types))


def tail_query(n: int, *, after: int | None, agent_id: str | None, types: tuple[str, ...]) -> EventQuery:
    """The filter of a tail: forwards from ``after`` (ascending), else back from the head."""
    return EventQuery(types=types or None, agent_id=agent_id, after=after or 0, limit=n, newest_first=after is None)


def ledger_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1")
    store = port.store

    @r.get("/ledger/tail", tags=["ledger"], response_model=list[EventOut])
    async def tail(
        n: Annotated[int, Query(ge=1, le=10_000, description="How many events.")] = 20,
        agent: Annotated[str | None, Query(max_length=128, description="Only this agent's (name or id).")] = None,
        after: Annotated[
            int | None,
            Query(ge=0, le=2**62, description="Page forwards: the first n events with a greater seq (a cursor)."),
        ] = None,
        type_: Annotated[
            list[str] | None,
            Query(alias="type", description=f"Only events of these types (repeatable, up to {MAX_TYPES})."),
        ] = None,
    ) -> list[dict[str, Any]]:
        """The last ``n`` events, or with ``after`` the first ``n`` after that seq, oldest first.

        A poller keeps the last seq it saw and asks with ``after`` so nothing is skipped however
        many events land between polls. Without ``after``, a ``type`` filter scans back from the head.
        """
        types = _event_types(type_ or [])
        agent_id = store.agent(agent).agent_id if agent else None
        if after is None and not types:
            return [event_json(e) for e in store.ledger.tail(n, agent_id=agent_id)]
        events = store.ledger.find(tail_query(n, after=after, agent_id=agent_id, types=types))
        return [event_json(e) for e in (events if after is not None else reversed(events))]

    @r.post("/ledger/verify", tags=["ledger"], response_model=LedgerVerify)
    async def verify() -> LedgerVerify:
        """Check the sequence is gapless and the hash chain intact (``ok`` false when not; still 200)."""
        # A worker thread: over a large ledger this reads for seconds, and agents keep running. The
        # ledger's connection is shared under its lock, taken per chunk of 5,000 events.
        try:
            v = await asyncio.to_thread(store.ledger.verify)
        except LedgerError as e:  # the file itself is damaged: that is verify's answer, not a 500
            return LedgerVerify(ok=False, events=0, problem=e.message, damaged=True)
        return LedgerVerify(
            ok=v.ok, events=v.events, first_bad_seq=v.first_bad_seq, problem=v.problem,
            bad_rows=[BadRow(seq=seq, reason=reason) for seq, reason in v.bad_rows],
            bad_row_count=v.bad_row_count, lost=v.lost,
        )  # fmt: skip

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
    async def status(all: AllQ = False) -> dict[str, Any]:
        """Daemon status: pid, uptime, ledger head, projection lag, and each agent's state (holon's
        internal agents only with ``all=true``)."""
        return without_internal(port.status(), everything=all)

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
    async def hook(token: str, request: Request, idempotency_key: IdempotencyHeader = None) -> InputAccepted:
        """External event ingress: the path token is the capability (no Authorization header).

        The JSON object becomes an input with ``external`` authority and origin ``external:hook``.
        It resolves the agent's pending ``wait(on="external")``: all of them, or, when the object
        has a string ``event`` field, those with no target or with that target. An
        ``Idempotency-Key`` header (or a string ``idempotency_key`` field) makes a retry return the
        first acknowledgement instead of a second input.
        """
        agent = port.agent_for_token(token) if len(token) <= 256 else None
        if agent is None:
            raise NotFoundError(NOT_FOUND)
        body = await request.body()
        if len(body) > HOOK_MAX_BYTES:
            raise BodyTooLarge(f"hook body over the limit of {HOOK_MAX_BYTES} bytes")
        data = _hook_object(body)
        field = data.get("idempotency_key")
        if field is not None and not isinstance(field, str):
            raise UsageError("the hook body's idempotency_key must be a string")
        text = "External event (hook):\n" + json.dumps(data, ensure_ascii=False, sort_keys=True)
        check_text(text, "the hook body")
        name = data.get("event")
        event = await port.submit_input(
            agent.agent_id,
            InputSpec(
                text, origin="external:hook", authority="external", sender="external", channel="hook",
                event=name if isinstance(name, str) and name else None,
                idempotency_key=one_key(idempotency_key, field),
            ),
        )  # fmt: skip
        return InputAccepted(agent_id=agent.agent_id, seq=event.seq, event_id=event.id)

    return r


def _hook_object(body: bytes) -> dict[str, Any]:
    """The hook body as a JSON object, or a ``UsageError`` that says what is wrong with it."""
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"the hook body is not UTF-8 text (byte {e.start} is not valid UTF-8)") from e
    try:
        data = json.loads(decoded)
    except json.JSONDecodeError as e:
        raise UsageError(f"the hook body is not JSON: {e.msg} at character {e.pos}") from e
    except (ValueError, RecursionError) as e:
        raise UsageError("the hook body is not JSON (or nested too deeply)") from e
    if not isinstance(data, dict):
        raise UsageError("the hook body must be a JSON object")
    return data
