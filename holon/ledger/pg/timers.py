"""A timer fires once cluster-wide: the fire is claimed by its idempotency key under the ledger lock.

RFC 0008, "Wakes, timers, the API on any node". Each node's scheduler holds the timers of the
agents it owns, so a timer whose agent changes hands around its due time may be fired by two
nodes (and any node may retry a firing). ``timer.fired`` carries the idempotency key
``timer:<timer id>:<due time µs>`` (``holon.daemon.firing``'s key); ``claim_fire`` looks the key up
while holding the ledger lock, in the transaction that appends the event, so of any number of
concurrent claimers exactly one appends and the others get ``None``. The claim is the event
itself: no claim table, no conditional UPDATE (the RFC's decision). The unique index
``events_idempotency`` (migration 1) is the net for a client that skips the lookup: its INSERT
is refused.
"""

from __future__ import annotations

from holon.ledger import events as ev
from holon.ledger.envelope import NewEvent
from holon.ledger.pg.append import Conn, begin_append_with, insert_and_commit, rollback_quietly
from holon.ledger.pg.rows import rows_for

__all__ = ["claim_fire", "fire_key"]

_CLAIMED = "SELECT seq FROM events WHERE idempotency_key = %s"


def fire_key(timer_id: str, due_us: int) -> str:
    """The idempotency key of ``timer_id``'s firing for due time ``due_us``."""
    return f"timer:{timer_id}:{due_us}"


def claim_fire(
    conn: Conn, agent_id: str, fired: ev.TimerFired, *, now_us: int, origin: str | None = None, notify: bool = True
) -> int | None:
    """Append ``fired`` for ``agent_id`` unless its firing (timer id + ``scheduled_for_us``) is
    already in the ledger; returns the new event's seq, or ``None`` when another claimer won.
    Two round trips: lock, head and lookup; then the row and COMMIT (with the wake's NOTIFY)."""
    key = fire_key(fired.timer_id, fired.scheduled_for_us)
    head, (claimed,) = begin_append_with(conn, (_CLAIMED, (key,)))
    if claimed is not None:
        rollback_quietly(conn)
        return None
    event = NewEvent(
        agent_id, fired, origin=origin or f"timer:{fired.timer_id}", authority="timer", idempotency_key=key
    )
    rows, blobs = rows_for(head, [event], now_us=now_us)
    insert_and_commit(conn, rows, blobs, now_us=now_us, notify=notify)
    return int(rows[0][0])
