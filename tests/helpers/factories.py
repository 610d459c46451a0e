"""Small builders for events, so tests read as the history they describe."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import encode_payload
from holon.ledger.events import PayloadBase


def make_event(agent_id: str, payload: PayloadBase, **envelope: object) -> NewEvent:
    """A ``NewEvent`` for ``agent_id`` (envelope fields such as ``turn_id`` as keywords)."""
    return NewEvent(agent_id=agent_id, payload=payload, **envelope)  # type: ignore[arg-type]


def agent_created(agent_id: str, name: str, **fields: object) -> NewEvent:
    return make_event(agent_id, ev.AgentCreated(name=name, home=f"/homes/{name}", **fields))  # type: ignore[arg-type]


def as_events(new: Iterable[NewEvent], *, start_seq: int = 1, start_us: int = 1_000_000) -> list[Event]:
    """Turn ``NewEvent`` s into stored-looking ``Event`` s without a ledger (for pure folds).

    Payloads go through the codec exactly as the ledger would store them (large text stays
    inline: the threshold is huge), so the events equal what a ledger read would give.
    """
    out = []
    for i, ne in enumerate(new):
        enc = encode_payload(ne.payload, blob_threshold=1 << 40, preview_chars=10)
        seq = start_seq + i
        out.append(
            Event(
                seq=seq,
                id=f"evt_{seq:08d}",
                agent_id=ne.agent_id,
                type=ne.payload.type,  # type: ignore[attr-defined]
                version=type(ne.payload).VERSION,
                ts_us=start_us + i * 10,
                origin=ne.origin,
                authority=ne.authority,
                turn_id=ne.turn_id,
                work_item_id=ne.work_item_id,
                task_id=ne.task_id,
                episode_id=ne.episode_id,
                idempotency_key=ne.idempotency_key,
                payload=enc.payload,
                hash=hashlib.sha256(str(seq).encode()).hexdigest(),
            )
        )
    return out
