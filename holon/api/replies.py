"""What became of an input: the turn that took it, how it settled, and its reply (RFC 0005, "Replies").

The ledger answers this on its own: a ``turn.started`` lists the input seqs it took, and the
``turn.settled`` of that turn carries the outcome, the reason and the reply. ``input_outcome`` reads
the latest turn that took an input (after a failed turn re-queues it, a later one may take it
again), with two queries down the ``events_agent_type`` index. ``follow`` waits for that turn to
settle, yielding the reply text as the model generates it (``delta`` notices of that turn), then
the outcome. Notices only wake the reader: the outcome is always read from the ledger, so a notice
that is lost or comes before the subscription costs at most one poll.

Used by the synchronous ``/messages`` routes and the OpenAI-compatible ``/chat/completions``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from holon.api.port import DaemonPort, Notice
from holon.errors import NotFoundError
from holon.ledger import EventQuery
from holon.ledger.events import TurnSettled
from holon.projections import Store

__all__ = [
    "POLL_S",
    "ROUND_END",
    "InputOutcome",
    "RoundEnd",
    "Status",
    "check_input",
    "await_outcome",
    "follow",
    "input_outcome",
    "overlap",
    "subscription",
]

POLL_S = 1.0
"""Longest wait for a notice before the ledger is read again anyway."""
QUEUE = 10_000
"""Notices buffered per follower; past that they are dropped (the ledger is re-read anyway)."""
EARLY_MAX = 10_000
"""Deltas kept per reader while its turn's start is not read back yet (``follow``)."""

Status = Literal["queued", "running", "completed", "waiting", "failed", "interrupted"]


@dataclass(frozen=True, slots=True)
class InputOutcome:
    """Where an input stands: ``queued`` (no turn took it yet), ``running``, or how its turn settled."""

    status: Status
    turn_id: str | None = None
    reply: str | None = None
    reason: str | None = None
    requeued: bool = False
    """The turn failed or was interrupted and the input went back to the queue: a later turn retries it."""
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.status not in ("queued", "running")


def check_input(store: Store, agent_id: str, input_seq: int) -> None:
    """``NotFoundError`` unless ``input_seq`` is an input (``message.received``) of the agent."""
    if not store.ledger.exists(EventQuery(seqs=(input_seq,), agent_id=agent_id, types=("message.received",))):
        raise NotFoundError(f"agent {agent_id} has no input with seq {input_seq}")


def input_outcome(store: Store, agent_id: str, input_seq: int) -> InputOutcome:
    """The state of the latest turn that took input ``input_seq`` (``queued`` when none has)."""
    started = store.ledger.turn_taking(agent_id, input_seq)
    if started is None:
        return InputOutcome("queued")
    started_seq, turn_id = started
    settled = store.ledger.turn_settled_seq(agent_id, turn_id, after=started_seq)
    if settled is None:
        return InputOutcome("running", turn_id=turn_id)
    [event] = store.ledger.get_many([settled])
    p = event.payload
    assert isinstance(p, TurnSettled)
    reply = store.ledger.resolve(p.reply)
    text = (
        reply if reply is None or isinstance(reply, str) else (reply.text if reply.text is not None else reply.preview)
    )
    usage = {k: int(v) for k, v in p.usage.model_dump().items() if isinstance(v, int)}
    return InputOutcome(p.outcome, turn_id=turn_id, reply=text, reason=p.reason, requeued=p.requeue, usage=usage)


async def _pump(port: DaemonPort, agent_id: str, queue: asyncio.Queue[Notice]) -> None:
    async for notice in port.subscribe(agent_id):
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(notice)


@contextlib.asynccontextmanager
async def subscription(port: DaemonPort, agent_id: str) -> AsyncIterator[asyncio.Queue[Notice]]:
    """The agent's live notices in a queue, from now until the block ends. Enter it before the
    input is submitted, so that the first deltas of its turn are not missed."""
    queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=QUEUE)
    pump = asyncio.create_task(_pump(port, agent_id, queue), name=f"follow:{agent_id}")
    await asyncio.sleep(0)  # let the subscription start
    try:
        yield queue
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump


class RoundEnd:
    """Yielded by ``follow`` when a model round of the turn ended (its ``model.responded``): text
    after it belongs to the next round (the first one called tools)."""


ROUND_END = RoundEnd()


def _rounds_ended(store: Store, after: int, upto: int, turn_id: str) -> bool:
    """Whether a model round of ``turn_id`` ended (``model.responded``) in ``(after, upto]``."""
    return store.ledger.round_ended(turn_id, after=after, upto=upto)


async def follow(
    port: DaemonPort, agent_id: str, input_seq: int, queue: asyncio.Queue[Notice], *, poll_s: float = POLL_S
) -> AsyncIterator[str | RoundEnd | InputOutcome]:
    """Text fragments of the turn that takes ``input_seq`` as they are generated (``ROUND_END``
    after each model round), then its settled ``InputOutcome`` (the last item). Runs until then;
    bound it with a timeout."""
    outcome = input_outcome(port.store, agent_id, input_seq)
    checked = input_seq  # rounds that ended up to this seq were reported
    # Deltas of a turn this reader cannot see start yet (its turn.started not read back yet): kept
    # until it can, then shown in order, so a fast turn's first words are never dropped.
    early: dict[str, list[Notice]] = {}
    kept = 0
    while True:
        if outcome.turn_id is not None and early:
            for held in early.pop(outcome.turn_id, []):
                if held.seq is not None and held.seq > checked:
                    if _rounds_ended(port.store, checked, held.seq, outcome.turn_id):
                        yield ROUND_END
                    checked = held.seq
                yield str(held.text)
            early.clear()  # another turn's deltas: not this input's
        if outcome.settled:
            break
        try:
            notice: Notice | None = await asyncio.wait_for(queue.get(), timeout=poll_s)
        except TimeoutError:
            notice = None
        if notice is not None and notice.kind == "delta":
            if outcome.turn_id is None or notice.turn_id != outcome.turn_id:
                outcome = input_outcome(port.store, agent_id, input_seq)  # the turn may have just started
            if notice.turn_id is not None and notice.text:
                if notice.turn_id == outcome.turn_id and notice.turn_id not in early:
                    # A delta carries the ledger head as it was written: a round that ended before it
                    # is reported first, whenever the (polling) watcher publishes that event.
                    if notice.seq is not None and notice.seq > checked:
                        if _rounds_ended(port.store, checked, notice.seq, notice.turn_id):
                            yield ROUND_END
                        checked = notice.seq
                    yield notice.text
                elif (outcome.turn_id is None or notice.turn_id == outcome.turn_id) and kept < EARLY_MAX:
                    early.setdefault(notice.turn_id, []).append(notice)
                    kept += 1
            continue
        if notice is not None and notice.seq is not None and outcome.turn_id is not None and notice.seq > checked:
            if _rounds_ended(port.store, checked, notice.seq, outcome.turn_id):
                yield ROUND_END
            checked = notice.seq
        outcome = input_outcome(port.store, agent_id, input_seq)
    yield outcome


async def await_outcome(
    port: DaemonPort,
    agent_id: str,
    input_seq: int,
    wait_s: float,
    *,
    gone: Callable[[], Awaitable[bool]] | None = None,
    poll_s: float = POLL_S,
) -> InputOutcome:
    """The input's outcome once its turn settles, or where it stands after ``wait_s`` seconds, or
    as soon as ``gone()`` says the client went away (checked at least every ``poll_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    outcome = input_outcome(port.store, agent_id, input_seq)
    if outcome.settled or wait_s <= 0:
        return outcome
    async with subscription(port, agent_id) as queue:
        while True:
            outcome = input_outcome(port.store, agent_id, input_seq)
            left = deadline - loop.time()
            if outcome.settled or left <= 0 or (gone is not None and await gone()):
                return outcome
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.get(), timeout=min(left, poll_s))
            while not queue.empty():
                queue.get_nowait()  # deltas and other notices: one ledger read covers them all


def overlap(streamed: str, reply: str) -> int:
    """The longest ``k`` such that ``streamed`` ends with ``reply[:k]``: how much of the reply a
    stream has already shown (the rest is sent when the turn settles). Linear: the reply's prefix
    function, then one pass over the end of the stream (Knuth-Morris-Pratt)."""
    n = len(reply)
    if not n or not streamed:
        return 0
    pi = [0] * n
    for i in range(1, n):
        k = pi[i - 1]
        while k and reply[i] != reply[k]:
            k = pi[k - 1]
        pi[i] = k + (reply[i] == reply[k])
    k = 0
    for ch in streamed[-n:]:
        if k == n:
            k = pi[k - 1]
        while k and ch != reply[k]:
            k = pi[k - 1]
        k += ch == reply[k]
    return k
