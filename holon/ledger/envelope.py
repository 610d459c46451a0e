"""Event envelopes: what a caller appends (``NewEvent``) and what the ledger stores (``Event``).

``Event``'s fields are the one definition of the envelope: their order is the column order of
the ``events`` table and of the hash chain's header (``EVENT_FIELDS``, ``HEADER_FIELDS``); the
ledger's column list, INSERT statement and row decoding, and the API's event model, are derived
from them. The table's DDL is history (``holon.ledger.sqlite.migrations``); ``tests/test_migrations.py``
checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from holon.ledger.events import Authority, Payload

__all__ = [
    "EVENT_FIELDS",
    "GENESIS_HASH",
    "HEADER_FIELDS",
    "Event",
    "Header",
    "NewEvent",
    "header_of",
    "header_values",
    "new_event",
]

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


_new = object.__new__
_set = object.__setattr__


def new_event(
    seq: int, id: str, agent_id: str, type: str, version: int, ts_us: int, origin: str, authority: Authority,
    turn_id: str | None, work_item_id: str | None, task_id: str | None, episode_id: str | None,
    idempotency_key: str | None, payload: Payload, hash: str,
) -> Event:  # fmt: skip
    """``Event(...)`` for the append path: the same object, its fields set without the frozen
    dataclass ``__init__``'s global lookup per field (2.2 -> 1.7 us per event; issue 18, step 5).
    The parameters are ``Event``'s fields in order (checked below, at import)."""
    e = _new(Event)
    _set(e, "seq", seq)
    _set(e, "id", id)
    _set(e, "agent_id", agent_id)
    _set(e, "type", type)
    _set(e, "version", version)
    _set(e, "ts_us", ts_us)
    _set(e, "origin", origin)
    _set(e, "authority", authority)
    _set(e, "turn_id", turn_id)
    _set(e, "work_item_id", work_item_id)
    _set(e, "task_id", task_id)
    _set(e, "episode_id", episode_id)
    _set(e, "idempotency_key", idempotency_key)
    _set(e, "payload", payload)
    _set(e, "hash", hash)
    return e


EVENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Event))
if new_event.__code__.co_varnames[: new_event.__code__.co_argcount] != EVENT_FIELDS:  # pragma: no cover
    raise RuntimeError("new_event's parameters must be Event's fields, in order")
"""The envelope's fields in column order: ``seq, id, agent_id, ..., payload, hash``."""

HEADER_FIELDS: tuple[str, ...] = tuple(f for f in EVENT_FIELDS if f not in ("payload", "hash"))
"""The fields the chain hash covers as its header (all but the payload text and the hash itself)."""

_CARRIED: tuple[str, ...] = tuple(f for f in HEADER_FIELDS if f in {g.name for g in fields(NewEvent)})
"""Header fields a ``NewEvent`` carries as they are; the ledger assigns the others."""
_carried = attrgetter(*_CARRIED)


def header_of(new: NewEvent, *, seq: int, event_id: str, ts_us: int) -> dict[str, Any]:
    """The header (``HEADER_FIELDS`` by name) of ``new`` stored at ``seq`` with id ``event_id`` at ``ts_us``."""
    header: dict[str, Any] = dict(zip(_CARRIED, _carried(new)))  # noqa: B905  # attrgetter gives one per name
    payload = new.payload
    header["seq"] = seq
    header["id"] = event_id
    header["type"] = payload.type
    header["version"] = type(payload).VERSION
    header["ts_us"] = ts_us
    return header


Header = tuple[int, str, str, str, int, int, str, Authority, str | None, str | None, str | None, str | None, str | None]
"""A header's values in ``HEADER_FIELDS`` order (``header_values``)."""


def header_values(new: NewEvent, *, seq: int, event_id: str, ts_us: int) -> Header:
    """``header_of`` as a tuple in ``HEADER_FIELDS`` order, built without a dict (the append path)."""
    payload = new.payload
    return (
        seq, event_id, new.agent_id, payload.type, type(payload).VERSION, ts_us, new.origin, new.authority,
        new.turn_id, new.work_item_id, new.task_id, new.episode_id, new.idempotency_key,
    )  # fmt: skip
