"""``/v1/agents/{agent}/messages``: send an input and get the reply in the same request.

``POST .../messages?wait=30`` stores the input exactly as ``POST .../inputs`` does (durable before
any answer, the same idempotency key rules) and then waits up to ``wait`` seconds (at most
``MAX_WAIT_S``) for the turn that takes it to settle: 200 with the outcome and the reply, or 202
with the input's seq and ``poll``, the URL of ``GET .../messages/{seq}?wait=N``, which answers the
same way. A failed turn is an answer too (200, ``status: failed`` with its reason and whether the
input was re-queued for a retry): the caller learns at once why there is no reply.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel

from holon.api.agents import IdempotencyHeader, api_input, one_key
from holon.api.models import InputIn
from holon.api.port import DaemonPort
from holon.api.replies import InputOutcome, Status, await_outcome, check_input

__all__ = ["MAX_WAIT_S", "MessageReply", "messages_router"]

MAX_WAIT_S = 300.0
"""Longest a request may wait for a turn; past it, poll."""

WaitQ = Annotated[
    float, Query(ge=0, le=MAX_WAIT_S, description=f"Seconds to wait for the turn to settle (0-{MAX_WAIT_S:g}).")
]

SeqPath = Annotated[int, Path(ge=1, le=2**62, description="The input's seq (from the 202 answer).")]


class MessageReply(BaseModel):
    """An input and what became of it; ``status`` queued or running comes with HTTP 202."""

    agent: str
    agent_id: str
    input_seq: int
    event_id: str
    status: Status
    turn_id: str | None = None
    """The latest turn that took the input."""
    reply: str | None = None
    """The settled turn's reply text."""
    reason: str | None = None
    """Why the turn failed, waits or was interrupted."""
    requeued: bool = False
    """The input went back to the queue (failed or interrupted turn): a later turn retries it."""
    usage: dict[str, int] = {}
    poll: str
    """``GET`` this (with ``?wait=N``) for the outcome later."""


def _answer(response: Response, agent: str, agent_id: str, seq: int, event_id: str, o: InputOutcome) -> MessageReply:
    poll = f"/v1/agents/{agent_id}/messages/{seq}"
    if not o.settled:
        response.status_code = 202
        response.headers["Location"] = poll
    return MessageReply(
        agent=agent, agent_id=agent_id, input_seq=seq, event_id=event_id, status=o.status, turn_id=o.turn_id,
        reply=o.reply, reason=o.reason, requeued=o.requeued, usage=o.usage, poll=poll,
    )  # fmt: skip


def messages_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1/agents", tags=["agents"])
    store = port.store

    @r.post("/{agent}/messages", response_model=MessageReply, responses={202: {"model": MessageReply}})
    async def send_message(
        agent: str,
        body: InputIn,
        request: Request,
        response: Response,
        wait: WaitQ = 30.0,
        idempotency_key: IdempotencyHeader = None,
    ) -> MessageReply:
        """Send an input and wait for its reply: 200 with the settled turn (``status`` completed,
        waiting, failed or interrupted; ``reply``; ``reason``), or 202 with ``poll`` when it has not
        settled within ``wait`` seconds. A retry with the same idempotency key waits for the same turn."""
        a = store.agent(agent)
        event = await port.submit_input(
            a.agent_id, api_input(body.text, one_key(idempotency_key, body.idempotency_key))
        )
        outcome = await await_outcome(port, a.agent_id, event.seq, wait, gone=request.is_disconnected)
        return _answer(response, a.name, a.agent_id, event.seq, event.id, outcome)

    @r.get("/{agent}/messages/{seq}", response_model=MessageReply, responses={202: {"model": MessageReply}})
    async def message_status(
        agent: str, seq: SeqPath, request: Request, response: Response, wait: WaitQ = 0.0
    ) -> MessageReply:
        """Where input ``seq`` stands (queued, running, or its settled turn and reply), waiting up
        to ``wait`` seconds for it to settle; 404 when the agent has no such input."""
        a = store.agent(agent)
        check_input(store, a.agent_id, seq)
        [event] = store.ledger.get_many([seq])
        outcome = await await_outcome(port, a.agent_id, seq, wait, gone=request.is_disconnected)
        return _answer(response, a.name, a.agent_id, seq, event.id, outcome)

    return r
