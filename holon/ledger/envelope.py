"""Event envelopes: what a caller appends (``NewEvent``) and what the ledger stores (``Event``)."""

from __future__ import annotations

from dataclasses import dataclass

from holon.ledger.events import Authority, Payload

__all__ = ["GENESIS_HASH", "Event", "NewEvent"]

#: The ``previous hash`` of the first event.
GENESIS_HASH = "0" * 64


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. The ledger assigns ``seq``, ``id``, ``ts_us`` and ``hash``.

    ``origin`` names who or what caused the event (``operator:cli``, ``agent:alice``,
    ``tool:run_command``, ``timer:t_01``, ``external:github``); ``authority`` is how far it may
    be trusted (see ``holon.ledger.events.Authority``). An ``idempotency_key`` makes the append
    a no-op returning the original event when the key was used before.
    """

    agent_id: str
    payload: Payload
    origin: str = "runtime"
    authority: Authority = "runtime"
    turn_id: str | None = None
    work_item_id: str | None = None
    task_id: str | None = None
    episode_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An event as stored in the ledger."""

    seq: int
    id: str
    agent_id: str
    type: str
    version: int
    ts_us: int
    origin: str
    authority: Authority
    turn_id: str | None
    work_item_id: str | None
    task_id: str | None
    episode_id: str | None
    idempotency_key: str | None
    payload: Payload
    hash: str
