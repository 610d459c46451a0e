"""One node's hold on the cluster: its name, its lease connection, its leases (RFC 0008 sections 3-4).

``NodeSession`` is what ``holon serve --node NAME`` keeps for its lifetime, synchronous (the
daemon calls it off its event loop, ``holon.daemon.cluster``):

* ``claim``: a connection of its own (autocommit, never pooled), the name's session advisory lock
  and the ``nodes`` row (``holon.ledger.pg.nodes.claim``; ``NodeNameTaken`` when a live node has
  it), and a ``Leases`` on that connection. After a lost connection ``claim`` runs again on a new
  one: the name must be won again (the old lock died with the old backend), while the leases are
  rows that outlive it, still this node's until they expire, so their tokens are kept.
* ``beat``: one heartbeat; returns the agents this node lost (not renewed: expired or taken over).
* ``view``: the live nodes and every lease, read in one round trip each, for the spreading policy.
* ``acquire``/``release``: one append transaction each, under the ledger lock.
* ``lock_watch``: the ledger lock's watchdog, a thread of its own (``holon.ledger.pg.stall``).
* ``fence_of``: the fence the engine sends with an append's rows (``PgEngine.fencer``): the tokens
  of the agents this node holds among them; ``FencedOut`` before anything is sent for one whose
  self-fencing deadline passed. Agents it does not hold are left out: the database then refuses
  their fenced events when another node holds (or held) their lease, and lets through an agent no
  node ever leased.

Every call but ``fence_of`` holds the session's lock: the heartbeat and the spreading run in
different threads, on one connection. ``fence_of`` takes no lock (it runs inside the ledger's
append, which may wait on a takeover this session is making).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg

from holon.errors import FencedOut, StorageUnavailable
from holon.ledger.pg.append import translated
from holon.ledger.pg.connect import connect
from holon.ledger.pg.fence import Fence
from holon.ledger.pg.leases import Leases, Owner
from holon.ledger.pg.migrations import latest_version
from holon.ledger.pg.nodes import NodeInfo, claim, list_nodes, unclaim
from holon.ledger.pg.stall import LockWatch

__all__ = ["ClusterView", "NodeSession"]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the spreading policy looks at: every node that registered and every lease row."""

    nodes: tuple[NodeInfo, ...]
    owners: tuple[Owner, ...]


class NodeSession:
    """Node ``name``'s connection, name claim and leases on the database at ``url``."""

    def __init__(
        self,
        url: str,
        name: str,
        *,
        lease_s: float,
        timeout_s: float = 5.0,
        api_url: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.name = name
        self.lease_s = lease_s
        self.timeout_s = timeout_s
        self.api_url = api_url
        self.clock = clock
        self.info: NodeInfo | None = None
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._leases: Leases | None = None
        self._lock = threading.Lock()

    # --- the name -------------------------------------------------------------------------------

    def claim(self) -> NodeInfo:
        """Connect and claim the name (again, after a lost connection); ``NodeNameTaken`` when a
        live node holds it, ``StorageUnavailable`` when the server does not answer."""
        with self._lock:
            self._close_conn()
            conn = connect(self.url, timeout_s=self.timeout_s)
            try:
                info = claim(conn, self.name, schema_version=latest_version(), url=self.api_url)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            if self._leases is None:
                self._leases = Leases(conn, self.name, lease_s=self.lease_s, clock=self.clock)
            else:
                self._leases.conn = conn  # the rows (and so the tokens) outlive the connection
            self.info = info
            return info

    @property
    def leases(self) -> Leases:
        if self._leases is None:
            raise RuntimeError("NodeSession.claim first")
        return self._leases

    # --- leases ---------------------------------------------------------------------------------

    def beat(self) -> frozenset[str]:
        """One heartbeat; returns the agents lost since the last one (not renewed)."""
        with self._lock:
            before = set(self.leases.tokens)
            self.leases.heartbeat()
            return frozenset(before - set(self.leases.tokens))

    def schema_ahead(self) -> str | None:
        """The refusal when the database's schema moved past this code's (another node migrated it
        while this one runs: RFC 0008, "Schema versions"), else ``None``; one indexed read."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise self._unclaimed()
            with translated(conn, "the schema check"):
                row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        have, mine = (int(str(row[0])) if row and row[0] is not None else 0), latest_version()
        if have <= mine:
            return None
        return (
            f"the database schema v{have} is newer than this holon (v{mine}): upgrade holon on node {self.name}; "
            "it takes no more turns"
        )

    def lock_watch(self) -> LockWatch:
        """The ledger lock's watchdog for this node (``holon.ledger.pg.stall``), not started: it
        terminates any session that has held the ledger lock idle for half of ``lease_s`` (a client
        frozen inside an append, which would stall every node), checked every sixth."""
        return LockWatch(self.url, bound_s=self.lease_s / 2, every_s=self.lease_s / 6, timeout_s=self.timeout_s)

    def acquire(self, agent_id: str) -> int | None:
        with self._lock:
            return self.leases.acquire(agent_id)

    def release(self, agent_id: str, *, reason: str) -> bool:
        with self._lock:
            return self.leases.release(agent_id, reason=reason)

    def forget(self, agent_id: str) -> None:
        """Stop acting for ``agent_id`` locally (its lease ran past this node's deadline)."""
        self.leases.tokens.pop(agent_id, None)
        self.leases.deadlines.pop(agent_id, None)

    def view(self) -> ClusterView:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise self._unclaimed()
            return ClusterView(tuple(list_nodes(conn)), tuple(self.leases.owners()))

    # --- acting as the owner --------------------------------------------------------------------

    def holds(self, agent_id: str) -> bool:
        return self._leases is not None and self._leases.holds(agent_id)

    def next_deadline_in(self) -> float | None:
        """Seconds until the earliest local deadline among the held agents (``None``: none held)."""
        leases = self._leases
        if leases is None or not leases.deadlines:
            return None
        return min(leases.deadlines.values()) - leases.clock()

    def held(self) -> list[str]:
        """The agents this node believes it holds (deadline passed or not), sorted."""
        return [] if self._leases is None else sorted(self._leases.tokens)

    def token(self, agent_id: str) -> int | None:
        return None if self._leases is None else self._leases.tokens.get(agent_id)

    def fence_of(self, agents: Sequence[str]) -> Fence | None:
        """The fence for an append's fenced events of ``agents`` (``PgEngine.fencer``)."""
        leases = self._leases
        if leases is None:
            return None
        mine = [a for a in agents if a in leases.tokens]
        for agent_id in mine:
            if not leases.holds(agent_id):
                raise FencedOut(
                    f"node {self.name} may not act for agent {agent_id}: its lease ran past this node's deadline",
                    agent_id=agent_id,
                )
        return Fence(self.name, {a: leases.tokens[a] for a in mine})

    # --- the end --------------------------------------------------------------------------------

    def close(self, *, reason: str = "stopped") -> list[str]:
        """A clean stop: release every lease still held (``lease.released``), free the name, close.
        Returns the agents released. Best effort: a lost server leaves the leases to expire."""
        released: list[str] = []
        with self._lock:
            if self._leases is not None and self._conn is not None and not self._conn.closed:
                for agent_id in sorted(self._leases.tokens):
                    with contextlib.suppress(Exception):
                        if self._leases.release(agent_id, reason=reason):
                            released.append(agent_id)
                with contextlib.suppress(Exception):
                    unclaim(self._conn, self.name)
            self._close_conn()
        return released

    def _unclaimed(self) -> Exception:
        """No connection: a bug before the first ``claim``; after one, the server was lost and the
        heartbeat's ``claim`` has not reconnected yet (retryable, like any lost server)."""
        if self.info is None:
            return RuntimeError("NodeSession.claim first")
        return StorageUnavailable(f"node {self.name} is reconnecting to PostgreSQL (its connection was lost)")

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
