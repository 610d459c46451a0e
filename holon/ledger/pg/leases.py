"""Agent leases with fencing tokens: which node owns which agent, checked by the database itself.

RFC 0008, "Leases with fencing tokens". One row per agent in ``leases`` (migration 2): the owning
node, a token that grows by one at every change of hands, and an expiry in **database time**
(``clock_timestamp()``; a node never compares its own clock with ``expires_at``).

* ``acquire`` takes a free or expired lease, or renews the node's own, inside an append
  transaction (under the ledger lock) that also appends ``lease.acquired``: takeovers are totally
  ordered with every fenced append, so either the old owner's append commits first or it is
  refused. A takeover waits for an append the old owner has open.
* ``heartbeat`` renews the live leases this process holds (agent and token) in one UPDATE (and its ``nodes.seen_at``);
  an expired lease is never revived.
* ``release`` ends a lease the node still holds and appends ``lease.released``.
* Every append that acts as an agent's owner carries the node's ``Fence`` (``fence_for``, or
  ``fence()`` inside a transaction of one's own); the trigger refuses a fenced event whose
  agent's live lease the fence does not name, as ``FencedOut``.
* **Self-fencing**: the database's refusal covers events only; effects outside it (a command, an
  HTTP call) are bounded by the node. It keeps, per agent, a local deadline counted on its
  monotonic clock from the moment it *sent* the last successful acquire or heartbeat
  (``self_fence_deadline``): the database's expiry is that statement's execution time + lease_s,
  later still, so a node past its deadline stops before any other node can take over, as long as
  the two clocks' rates agree within the margin (20%: the RFC's ``lease_s - 3 s`` at the default
  15 s). ``fence_for`` refuses locally past the deadline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from holon.errors import FencedOut
from holon.ledger import events as ev
from holon.ledger.envelope import NewEvent
from holon.ledger.pg.append import Conn, begin_append_with, insert_and_commit, rollback_quietly, translated
from holon.ledger.pg.fence import FENCE_SETTING, Fence
from holon.ledger.pg.rows import rows_for

__all__ = [
    "DEFAULT_LEASE_S",
    "SELF_FENCE_MARGIN",
    "Leases",
    "Owner",
    "fence",
    "lease_acquired",
    "lease_released",
    "self_fence_deadline",
]

DEFAULT_LEASE_S = 15.0
SELF_FENCE_MARGIN = 0.2
"""The share of ``lease_s`` a node gives up at the end of each lease: its deadline is 80% of the
way, so clocks whose rates differ by up to 20% still stop the old owner first."""

ACQUIRE = f"""
WITH l AS (
  INSERT INTO leases AS l (agent_id, node, token, expires_at)
  VALUES (%(agent)s, %(node)s, 1, clock_timestamp() + make_interval(secs => %(lease_s)s))
  ON CONFLICT (agent_id) DO UPDATE
    SET node = excluded.node,
        token = CASE WHEN l.node = excluded.node AND l.expires_at > clock_timestamp() THEN l.token ELSE l.token + 1 END,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= clock_timestamp() OR l.node = excluded.node
  RETURNING token
)
SELECT token, set_config('{FENCE_SETTING}',
                         json_build_object('node', %(node)s::text, 'tokens', json_build_object(%(agent)s::text, token))::text, true)
FROM l
"""
"""Take a free or expired lease (a new token), or renew the node's own live one (same token; its
own expired one gets a new token, since a turn under the old one may still be running); and set
the transaction's fence to the lease, for its ``lease.acquired`` event. No row: another node
holds a live lease."""

HEARTBEAT = """
WITH seen AS (UPDATE nodes SET seen_at = clock_timestamp() WHERE name = %(node)s)
UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s)
FROM unnest(%(agents)s::text[], %(tokens)s::bigint[]) AS mine(agent_id, token)
WHERE leases.node = %(node)s AND leases.expires_at > clock_timestamp()
  AND leases.agent_id = mine.agent_id AND leases.token = mine.token
RETURNING leases.agent_id, leases.token
"""
"""Renew the live leases this process holds (agent and token), not every lease under its name: a
node restarted under its name within ``lease_s`` of its death would otherwise keep the dead
process's leases alive without acting for those agents (no recovery, no turns: their inputs
waited forever; found by the chaos test). Left to expire, they are taken at the next scans with a
new token and recovered like any other."""

RELEASE = """
UPDATE leases SET expires_at = least(expires_at, clock_timestamp())
WHERE agent_id = %(agent)s AND node = %(node)s AND token = %(token)s
RETURNING token
"""
"""End the lease if it is still this token's (live, or expired with no one else in since)."""

OWNERS = """
SELECT agent_id, node, token, expires_at, expires_at > clock_timestamp(),
       extract(epoch FROM expires_at - clock_timestamp())::float8
FROM leases {where} ORDER BY agent_id
"""


def self_fence_deadline(sent_at: float, lease_s: float, *, margin: float = SELF_FENCE_MARGIN) -> float:
    """The local (monotonic) time past which a node must act as if it had lost a lease whose last
    successful renewal it *sent* at ``sent_at``: ``sent_at + lease_s * (1 - margin)``."""
    if lease_s <= 0 or not 0 <= margin < 1:
        raise ValueError(f"lease_s must be > 0 and margin in [0, 1) (got {lease_s}, {margin})")
    return sent_at + lease_s * (1.0 - margin)


def lease_acquired(agent_id: str, *, node: str, token: int, lease_s: float) -> NewEvent:
    """The ``lease.acquired`` event of ``acquire``'s transaction."""
    return NewEvent(
        agent_id, ev.LeaseAcquired(node=node, token=token, lease_s=lease_s), origin=f"node:{node}", authority="runtime"
    )


def lease_released(agent_id: str, *, node: str, token: int, reason: str) -> NewEvent:
    """The ``lease.released`` event of ``release``'s transaction."""
    return NewEvent(
        agent_id, ev.LeaseReleased(node=node, token=token, reason=reason), origin=f"node:{node}", authority="runtime"
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """A row of ``leases`` as the database sees it now (``live``: not expired by its clock;
    ``remaining_s`` negative once expired)."""

    agent_id: str
    node: str
    token: int
    expires_at: datetime
    live: bool
    remaining_s: float


@contextlib.contextmanager
def fence(conn: Conn, node: str, tokens: Mapping[str, int]) -> Iterator[Fence]:
    """Inside a transaction already open on ``conn``: append as ``node`` holding ``tokens``
    (agent -> token) until the block ends (``SET LOCAL holon.fence``, cleared on exit; the
    transaction's end clears it anyway). ``begin_append(conn, fence=...)`` does the same in its
    first round trip."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        raise ValueError("fence() needs an open transaction (SET LOCAL would end with the statement)")
    f = Fence(node, tokens)
    conn.execute("SELECT set_config(%s, %s, true)", (FENCE_SETTING, f.setting()))
    try:
        yield f
    finally:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
            conn.execute("SELECT set_config(%s, '', true)", (FENCE_SETTING,))


class Leases:
    """One node's leases on one connection (autocommit, not pooled: ``acquire`` and ``release``
    append). ``clock`` is the node's monotonic clock (self-fencing deadlines); ``now_us`` stamps
    the lease events."""

    def __init__(
        self,
        conn: Conn,
        node: str,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        margin: float = SELF_FENCE_MARGIN,
        clock: Callable[[], float] = time.monotonic,
        now_us: Callable[[], int] = lambda: time.time_ns() // 1000,
        notify: bool = True,
    ) -> None:
        self_fence_deadline(0.0, lease_s, margin=margin)  # validates
        self.conn = conn
        self.node = node
        self.lease_s = lease_s
        self.margin = margin
        self.clock = clock
        self.now_us = now_us
        self.notify = notify
        self.tokens: dict[str, int] = {}
        """Agent -> the token this node believes it holds."""
        self.deadlines: dict[str, float] = {}
        """Agent -> local deadline (``clock``) past which this node stops acting for it."""

    # --- taking and giving up -----------------------------------------------------------------

    def acquire(self, agent_id: str) -> int | None:
        """Take ``agent_id``'s lease if it is free, expired, or already this node's; appends
        ``lease.acquired`` in the same transaction. Returns the token, or ``None`` when another
        node holds a live lease. Waits for any open append (the ledger lock), an old owner's too."""
        sent_at = self.clock()
        params = {"agent": agent_id, "node": self.node, "lease_s": self.lease_s}
        head, (row,) = begin_append_with(self.conn, (ACQUIRE, params))
        if row is None:
            rollback_quietly(self.conn)
            return None
        token = int(row[0])
        event = lease_acquired(agent_id, node=self.node, token=token, lease_s=self.lease_s)
        rows, blobs = rows_for(head, [event], now_us=self.now_us())
        insert_and_commit(self.conn, rows, blobs, notify=self.notify)
        self.tokens[agent_id] = token
        self.deadlines[agent_id] = self_fence_deadline(sent_at, self.lease_s, margin=self.margin)
        return token

    def release(self, agent_id: str, *, reason: str = "stopped") -> bool:
        """Give ``agent_id``'s lease up (its expiry set to now) and append ``lease.released``,
        if the lease is still this node's token (live or expired with no one else in since).
        Returns whether it was; either way this node no longer acts for the agent."""
        token = self.tokens.pop(agent_id, None)
        self.deadlines.pop(agent_id, None)
        if token is None:
            return False
        params = {"agent": agent_id, "node": self.node, "token": token}
        head, (row,) = begin_append_with(self.conn, (RELEASE, params))
        if row is None:
            rollback_quietly(self.conn)
            return False
        event = lease_released(agent_id, node=self.node, token=token, reason=reason)
        rows, blobs = rows_for(head, [event], now_us=self.now_us())
        insert_and_commit(self.conn, rows, blobs, notify=self.notify)
        return True

    def heartbeat(self) -> frozenset[str]:
        """Renew every live lease this process holds in one statement (and ``nodes.seen_at``); returns
        the agents renewed. An agent whose lease was not renewed (expired, taken over) is dropped:
        this node no longer acts for it."""
        sent_at = self.clock()
        with translated(self.conn, "the heartbeat"):
            mine = sorted(self.tokens.items())
            params = {"node": self.node, "lease_s": self.lease_s, "agents": [a for a, _ in mine],
                      "tokens": [t for _, t in mine]}  # fmt: skip
            rows = self.conn.execute(HEARTBEAT, params).fetchall()
        renewed = {str(r[0]): int(r[1]) for r in rows}
        deadline = self_fence_deadline(sent_at, self.lease_s, margin=self.margin)
        for agent_id in list(self.tokens):
            if renewed.get(agent_id) == self.tokens[agent_id]:
                self.deadlines[agent_id] = deadline
            else:
                del self.tokens[agent_id]
                self.deadlines.pop(agent_id, None)
        return frozenset(a for a in renewed if a in self.tokens)

    # --- acting as the owner ------------------------------------------------------------------

    def holds(self, agent_id: str) -> bool:
        """Whether this node may still act for ``agent_id`` by its own deadline (self-fencing)."""
        deadline = self.deadlines.get(agent_id)
        return deadline is not None and self.clock() < deadline

    def fence_for(self, *agent_ids: str) -> Fence:
        """The fence of an append acting for ``agent_ids``; ``FencedOut`` (before anything is sent)
        for an agent this node does not hold or whose local deadline has passed."""
        for agent_id in agent_ids:
            if not self.holds(agent_id):
                why = "its lease ran past this node's deadline" if agent_id in self.tokens else "no lease"
                raise FencedOut(f"node {self.node} may not act for agent {agent_id}: {why}", agent_id=agent_id)
        return Fence(self.node, {a: self.tokens[a] for a in agent_ids})

    # --- reading ------------------------------------------------------------------------------

    def owner_of(self, agent_id: str) -> Owner | None:
        """``agent_id``'s lease row (live or not), or ``None`` if it never had one."""
        rows = self._owners("WHERE agent_id = %s", (agent_id,))
        return rows[0] if rows else None

    def owners(self, *, live_only: bool = False) -> list[Owner]:
        """Every lease row, by agent (``live_only``: those not expired by the database's clock)."""
        return self._owners("WHERE expires_at > clock_timestamp()" if live_only else "", ())

    def expired(self) -> list[str]:
        """Agents whose lease has expired (the takeover candidates a node's scan looks at)."""
        return [o.agent_id for o in self._owners("WHERE expires_at <= clock_timestamp()", ())]

    def _owners(self, where: str, params: tuple[Any, ...]) -> list[Owner]:
        with translated(self.conn, "the read of the leases"):
            rows = self.conn.execute(OWNERS.format(where=where), params).fetchall()
        return [Owner(str(r[0]), str(r[1]), int(r[2]), r[3], bool(r[4]), float(r[5])) for r in rows]
