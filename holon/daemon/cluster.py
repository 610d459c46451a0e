"""Several daemons on one PostgreSQL ledger: this node's heartbeat, spreading, takeover and wakes.

RFC 0008 sections 3-4, steps 9-11. ``holon serve --node NAME`` (``[node] name``) makes a
``Cluster`` beside the daemon's rooms; the lifespan (``holon.daemon.lifespan``) claims the name
before anything else, runs the two loops below while the daemon runs, and releases every lease
at a clean stop, after the turns were drained.

* **Heartbeat** every ``lease_s / 3``, off the event loop: renews all of this node's live leases
  in one statement. An agent not renewed (expired, taken over) is lost at once: its running turn
  is cancelled and its timers leave this node's scheduler. A lost connection is reconnected with
  backoff and the name claimed again (``NodeSession.claim``). Beside it, in a thread of its own
  (an append waiting on the ledger lock can block the event loop), the ledger lock's watchdog ends
  any session frozen inside an append for ``lease_s / 2`` (it would stall every node:
  ``holon.ledger.pg.stall``).
* **Spreading** every ``SCAN_S``: the policy (``plan``) in one sentence: *each agent belongs to the
  live node with the highest ``sha256(node, agent)`` (rendezvous hashing), a node whose lease
  expired is no candidate for it, and a lease expired for more than ``GRACE_S`` is taken by any
  node that sees it*. A node acquires the free or expired leases it is preferred for (and the
  ones expired past the grace whoever is preferred), and releases, between turns, the agents that
  now prefer another live node (about 1/N of them move when a node joins; only the dead node's
  agents move when one leaves). A node never acquires an agent it still has a turn running for
  under an older token: that turn is cancelled first. Each planned take is checked again when it
  runs (the takes before it wait on the database): an agent already held here, or whose turn
  started here meanwhile, is not taken, so a node never "takes over" its own running turn.
* **Takeover** = single-node recovery for that agent (``holon.runtime.recovery.recover``): an
  unsettled turn of the dead node is settled ``interrupted`` (its inputs re-queued), by the new
  owner, fenced with its new token; then its timers join this node's scheduler (missed firings
  coalesced, each recorded once cluster-wide by its idempotency key) and the agent is woken.
* **Self-fencing** (a loop of its own, woken at the earliest deadline, no database call): past an
  agent's local deadline (its last renewal *sent* + 80% of ``lease_s``) the node stops acting for
  it (the turn cancelled, its background tasks killed) before any other node can take it over;
  ``NodeSession.fence_of`` refuses its appends locally and the database refuses them anyway.
* **Wakes across nodes** (``start_listener``): a ``Listener`` on a connection of its own kicks the
  watcher at every other node's commit (``pg_notify``), with a catch-up read every 2 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holon.errors import HolonError, NodeNameTaken
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import TimerProjection
from holon.runtime.agents import ensure_home
from holon.runtime.recovery import recover

if TYPE_CHECKING:
    from holon.daemon.firing import TimerFiring
    from holon.daemon.timers import Timers
    from holon.daemon.wakes import Phase, Wakes
    from holon.ledger.pg.node import ClusterView, NodeSession
    from holon.ledger.pg.notify import Listener
    from holon.ledger.pg.stall import LockWatch
    from holon.runtime.host import AgentHost

__all__ = ["GRACE_S", "SCAN_S", "Cluster", "Plan", "plan", "preferred", "start_listener"]

log = get_logger("holon.daemon.cluster")

SCAN_S = 1.0
"""How often a node looks for free, expired and misplaced leases."""
GRACE_S = 2.0
"""How long past its expiry a lease waits for its preferred node before any node takes it."""
FENCE_SLACK_S = 0.01
"""The self-fencing loop wakes this long after a deadline, so that the deadline has passed."""


def preferred(agent_id: str, nodes: Iterable[str]) -> str | None:
    """The node ``agent_id`` belongs to among ``nodes``: the highest ``sha256(node NUL agent)``
    (rendezvous hashing: removing a node moves only its agents; adding one moves about 1/N)."""
    best: tuple[bytes, str] | None = None
    for node in nodes:
        score = (hashlib.sha256(f"{node}\0{agent_id}".encode()).digest(), node)
        if best is None or score > best:
            best = score
    return None if best is None else best[1]


@dataclass(frozen=True, slots=True)
class Plan:
    acquire: tuple[str, ...] = ()
    release: tuple[str, ...] = ()


def plan(
    me: str,
    agents: Iterable[str],
    *,
    live: Collection[str],
    owners: dict[str, tuple[str, bool, float]],
    busy: Collection[str] = (),
    held: Collection[str] | None = None,
    grace_s: float = GRACE_S,
) -> Plan:
    """What node ``me`` should take and give up (pure: the policy of the module docstring).

    ``live``: the nodes seen within ``lease_s`` (``me`` included); ``owners``: agent -> (node,
    live, remaining_s) for every lease row; ``busy``: agents with a turn running on this node;
    ``held``: the agents this node acts for (``None``: every live lease of its own). A live lease
    of its own it does not act for (dropped by self-fencing during an outage, while its heartbeat,
    back in time, kept the row alive) is taken again: nobody else may take it while it lives."""
    candidates = set(live) | {me}
    take: list[str] = []
    give: list[str] = []
    for agent in agents:
        owner = owners.get(agent)
        if owner is not None and owner[1]:  # a live lease
            node = owner[0]
            if node == me and held is not None and agent not in held and agent not in busy:
                take.append(agent)
            elif node == me and agent not in busy:
                pref = preferred(agent, candidates)
                if pref != me and pref in live:
                    give.append(agent)
            continue
        if agent in busy:
            continue  # a turn under an older token still runs here: it is being cancelled first
        pool = candidates - {owner[0]} if owner is not None and owner[0] != me else candidates
        if preferred(agent, pool) == me or (owner is not None and owner[2] < -grace_s):
            take.append(agent)
    return Plan(tuple(take), tuple(give))


class Cluster:
    """This daemon as one node: the loops of the module docstring over a ``NodeSession``."""

    def __init__(
        self, session: NodeSession, store: Store, *, host: AgentHost, wakes: Wakes, timers: Timers,
        firing: TimerFiring, phase: Phase,
    ) -> None:  # fmt: skip
        self.session = session
        self.store = store
        self.host = host
        self.wakes = wakes
        self.timers = timers
        self.firing = firing
        self.phase = phase
        self.name = session.name
        self.lease_s = session.lease_s
        self.view: ClusterView | None = None
        """The last scan's view of nodes and leases (for status)."""
        self.taken = 0
        self.lost = 0
        self.last_error: str | None = None
        self.watch: LockWatch | None = None
        self.schema_error: str | None = None
        """Set when another node migrated the database past this code: this node stops acting."""
        self._beats = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"heartbeat-{self.name}")
        """The heartbeat's own thread: under load the default executor is busy with the turns'
        blocking calls, and a beat queued behind them arrives late (agents given up for nothing)."""
        self._taking: set[str] = set()
        """Agents being acquired and recovered: not this node's to run yet. Without it the watcher
        started a turn as soon as the lease was held, and the recovery that followed settled that
        very turn ``interrupted`` as the previous owner's, re-queueing inputs the running turn then
        answered too (answered twice; found by the chaos test)."""

    def owns(self, agent_id: str) -> bool:
        return self.schema_error is None and agent_id not in self._taking and self.session.holds(agent_id)

    def owned(self) -> list[str]:
        return [a for a in self.session.held() if self.owns(a)]

    # --- start and stop -------------------------------------------------------------------------

    async def claim(self) -> None:
        """Claim the name (``NodeNameTaken``: another live node has it) and fence every append of
        this process with the node's leases."""
        info = await asyncio.to_thread(self.session.claim)
        self.store.ledger.engine.fencer = self.session.fence_of  # type: ignore[attr-defined]  # PgEngine's
        log.info("node.claimed", node=info.name, host=info.host, pid=info.pid, lease_s=self.lease_s)
        self.watch = self.session.lock_watch().start()

    async def close(self) -> None:
        if self.watch is not None:
            await asyncio.to_thread(self.watch.stop)
        released = await asyncio.to_thread(self.session.close)
        self._beats.shutdown(wait=False)
        log.info("node.stopped", node=self.name, released=len(released))

    # --- the heartbeat --------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """Every ``lease_s / 3`` until cancelled; reconnects (and claims the name again) with
        backoff when the connection is lost."""
        every = self.lease_s / 3
        delay = 0.5
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                lost = await loop.run_in_executor(self._beats, self.session.beat)
                delay = 0.5
            except HolonError as e:
                self.last_error = e.message
                log.warning("node.heartbeat_failed", node=self.name, error=e.message, retry_s=delay)
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, every)
                await self._reclaim()
                continue
            for agent_id in lost:
                self._lose(agent_id, why="its lease was not renewed (expired or taken over)")
            await self._check_schema()
            # every ``every`` from the last beat's start, not after it: a slow beat (a loaded machine)
            # must not push the next one towards the self-fencing deadline (80% of lease_s)
            await asyncio.sleep(max(0.0, every - (loop.time() - began)))

    async def _check_schema(self) -> None:
        """Stop acting (no turn, every lease given up between turns) once the database's schema
        is newer than this code's (RFC 0008, "Schema versions")."""
        if self.schema_error is not None:
            return
        try:
            error = await asyncio.to_thread(self.session.schema_ahead)
        except HolonError as e:  # the next beat tells whether the server is lost
            log.warning("node.schema_check_failed", node=self.name, error=e.message)
            return
        if error is not None:
            self.schema_error = error
            log.error("node.schema_newer", node=self.name, error=error)

    async def _reclaim(self) -> None:
        """A new connection and the name won again; meanwhile (and if another process took the
        name) this node acts for no agent past its deadlines: the spreading loop drops them."""
        try:
            await asyncio.to_thread(self.session.claim)
        except NodeNameTaken as e:
            self.last_error = e.message
            log.error("node.name_taken", node=self.name, error=e.message)
        except HolonError as e:
            self.last_error = e.message

    # --- spreading and takeover -----------------------------------------------------------------

    async def spread(self) -> None:
        """Every ``SCAN_S`` until cancelled: self-fence, then take and give up leases (``plan``)."""
        while True:
            try:
                await self.scan_once()
            except HolonError as e:
                self.last_error = e.message
                log.warning("node.scan_failed", node=self.name, error=e.message)
            except Exception as e:  # a bug must not end the node's spreading: logged, retried
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("node.scan_failed", node=self.name)
            await asyncio.sleep(SCAN_S)

    async def self_fence(self) -> None:
        """Until cancelled: stop acting for each agent at its local deadline (``fence_once``), woken
        at the earliest deadline rather than at the next scan. A loop of its own, with no database
        call in it: the scan waits on the database (a view read, a takeover), which is exactly what
        may be lost, and at a short lease the 20% margin (0.6 s at ``lease_s`` 3) is less than one
        scan. So the turn is cancelled, its commands and background tasks killed, before the lease
        can expire for the other nodes."""
        while True:
            self.fence_once()
            left = self.session.next_deadline_in()
            await asyncio.sleep(SCAN_S if left is None else min(SCAN_S, max(left, 0.0) + FENCE_SLACK_S))

    def fence_once(self) -> None:
        """Drop every agent past this node's deadline for it (self-fencing): ``_lose``."""
        for agent_id in self.session.held():
            if not self.session.holds(agent_id):  # past this node's deadline: stop before anyone takes it
                self.session.forget(agent_id)
                self._lose(agent_id, why="its lease ran past this node's deadline (self-fencing)")

    async def scan_once(self) -> Plan:
        self.fence_once()
        view = await asyncio.to_thread(self.session.view)
        self.view = view
        if self.schema_error is not None:
            for agent_id in self.session.held():
                if not self.host.is_running(agent_id):  # a running turn ends first (``owns`` is false)
                    self._lose(agent_id, why="the database schema is newer than this holon", cancel=False)
                    await asyncio.to_thread(self.session.release, agent_id, reason="schema newer")
            return Plan()
        if self.phase.draining or not self.phase.accepting:
            return Plan()
        live = {n.name for n in view.nodes if n.seen_s_ago < self.lease_s}
        owners = {o.agent_id: (o.node, o.live, o.remaining_s) for o in view.owners}
        busy = {a.agent_id for a in self.store.agents() if self.host.is_running(a.agent_id)}
        agents = [a.agent_id for a in self.store.agents()]
        for agent_id in sorted(set(self.session.held()) - set(agents) - busy):  # deleted: stop renewing
            self._lose(agent_id, why="the agent was deleted", cancel=False)
            await asyncio.to_thread(self.session.release, agent_id, reason="deleted")
        held = [a for a in self.session.held() if self.session.holds(a)]
        todo = plan(self.name, agents, live=live, owners=owners, busy=busy, held=held)
        for agent_id in todo.acquire:
            if self.session.token(agent_id) is not None or self.host.is_running(agent_id):
                # Re-checked at the take, not only when planning: the takes before this one wait on
                # the database, and meanwhile the agent may have been taken (and its turn started)
                # or its lease renewed. Acquiring a live lease of its own keeps the token, so its
                # "takeover" would settle this node's own running turn ``interrupted`` and re-queue
                # inputs that turn answers anyway (answered twice; the five-minute chaos run).
                continue
            self._taking.add(agent_id)
            try:
                token = await asyncio.to_thread(self.session.acquire, agent_id)
                if token is not None:
                    await self._took(agent_id, token)
            finally:
                self._taking.discard(agent_id)
        for agent_id in todo.release:
            if self.host.is_running(agent_id):
                continue  # between turns only
            self._lose(agent_id, why="another live node is preferred for it", cancel=False)
            await asyncio.to_thread(self.session.release, agent_id, reason="rebalanced")
        return todo

    async def _took(self, agent_id: str, token: int) -> None:
        """A lease just acquired: install the agent's home if this machine lacks it (created on
        another machine: ``ensure_home``), settle what the previous owner left (single-node
        recovery for this agent), take its timers over, and wake it."""
        if self.host.is_running(agent_id):
            # Never settle as ``interrupted`` a turn this process runs (``scan_once`` does not take
            # such an agent; this is the last line). Given back: taken again once the run ended,
            # and recovered then if it left its turn open.
            log.error("node.take_while_running", node=self.name, agent_id=agent_id, lease_token=token)
            await asyncio.to_thread(self.session.release, agent_id, reason="a turn runs here")
            return
        self.taken += 1
        try:
            agent = self.store.agent_state(agent_id)
            if agent is not None and ensure_home(self.store, agent):  # made on another machine
                log.info("node.home_installed", node=self.name, agent_id=agent_id, home=agent.home)
            report = recover(self.store, agents={agent_id})
        except Exception:  # not left held half-recovered: given back, taken again at a later scan
            log.exception("node.recovery_failed", node=self.name, agent_id=agent_id)
            await asyncio.to_thread(self.session.release, agent_id, reason="recovery failed")
            return
        log.info("node.acquired", node=self.name, agent_id=agent_id, lease_token=token, recovered_turns=report.turns)
        self._taking.discard(agent_id)  # recovered: this node's to run now (its timers check ``owns``)
        await self._take_timers(agent_id)
        self.wakes.wake(agent_id)

    async def _take_timers(self, agent_id: str) -> None:
        timers = [t for t in self.store.timers(agent_id=agent_id, status="scheduled") if isinstance(t, TimerProjection)]
        now = self.firing.clock.now_us()
        for timer in timers:
            if timer.next_fire_us is not None and timer.next_fire_us <= now:
                await self.firing.fire(timer.timer_id)  # missed meanwhile: one coalesced firing
        if self.timers.running:
            for timer in self.store.timers(agent_id=agent_id, status="scheduled"):
                self.timers.sync(timer if isinstance(timer, TimerProjection) else None, timer.timer_id)

    def fenced_out(self, agent_id: str) -> None:
        """A turn of ``agent_id`` stopped on ``FencedOut`` (``AgentHost.on_fenced``): give the agent
        up here. The turn is left open for the next owner's recovery, and that needs a new token:
        had this node kept the lease (its deadline passed while its heartbeat was late, then the
        heartbeat renewed it), nobody would ever settle the turn or answer its inputs (found by the
        chaos test). Forgotten, the lease is not renewed, expires, and is taken with a new token."""
        self.session.forget(agent_id)
        self._lose(agent_id, why="a turn was fenced out", cancel=False)

    def _lose(self, agent_id: str, *, why: str, cancel: bool = True) -> None:
        """Stop acting for ``agent_id``: cancel its running turn, kill its background tasks, drop its
        timers' jobs."""
        self.lost += 1
        run = self.host.active_run(agent_id)
        if cancel and run is not None:
            run.cancel()
        killed = self.host.tasks.drop_agent(agent_id)  # its background tasks: the new owner reports them
        jobs = self.timers.drop_agent(agent_id)  # no database read: it may be the thing lost
        log.warning(
            "node.lost", node=self.name, agent_id=agent_id, reason=why, turn_cancelled=run is not None,
            tasks_killed=len(killed), timer_jobs=jobs,
        )  # fmt: skip

    # --- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """This node, the nodes it sees and which node owns which agent (``holon daemon status``)."""
        view = self.view
        names = {a.agent_id: a.name for a in self.store.agents()}
        nodes = [] if view is None else [
            {"name": n.name, "host": n.host, "pid": n.pid, "url": n.url, "seen_s_ago": round(n.seen_s_ago, 1),
             "live": n.seen_s_ago < self.lease_s, "agents": sum(1 for o in view.owners if o.node == n.name and o.live)}
            for n in view.nodes
        ]  # fmt: skip
        owners = [] if view is None else [
            {"agent_id": o.agent_id, "agent": names.get(o.agent_id, o.agent_id), "node": o.node, "token": o.token,
             "live": o.live, "remaining_s": round(o.remaining_s, 1)}
            for o in view.owners if o.agent_id in names
        ]  # fmt: skip
        return {"node": self.name, "lease_s": self.lease_s, "owned": len(self.owned()), "taken": self.taken,
                "lost": self.lost, "error": self.last_error, "schema_error": self.schema_error,
                "nodes": nodes, "owners": owners}  # fmt: skip

    def status_key(self) -> tuple[Any, ...]:
        view = self.view
        owners = () if view is None else tuple((o.agent_id, o.node, o.token, o.live) for o in view.owners)
        return (tuple(self.owned()), owners, self.schema_error)


def start_listener(store: Store, kick: asyncio.Event) -> Listener:
    """A ``Listener`` that kicks the daemon's watcher (``Wakes.kick``) at every commit of any
    node, and every 2 s when the head moved unnoticed (RFC 0008, "Wakes")."""
    from holon.ledger.pg.connect import connect
    from holon.ledger.pg.notify import Listener

    storage = store.settings.storage
    loop = asyncio.get_running_loop()

    def advanced(_advance: object) -> None:
        loop.call_soon_threadsafe(kick.set)

    listener = Listener(
        lambda: connect(storage.url, timeout_s=storage.connect_timeout_s), advanced, after=store.ledger.head()
    )
    return listener.start()
