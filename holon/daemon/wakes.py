"""Wakes: which agents may have work, the host's gate, and the watcher that follows the ledger.

Inputs appended by this process wake their agent at once (``Wakes.wake``: the agent is marked
dirty and the watcher kicked); inputs appended by other processes (``holon agent create
--schedule``, scripts) are seen by the watcher, which follows the ledger head, publishes every new
event as a notice, keeps the timer jobs in line with timer events and wakes the agents whose
events arrived. A dirty agent is scheduled on the host when the gate (``may_run``) lets it run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from holon.daemon.budget import Budgets
from holon.daemon.notices import Notices
from holon.errors import NotFoundError, StorageUnavailable
from holon.ledger import EventQuery
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection
from holon.runtime.settings import read_settings

if TYPE_CHECKING:
    from holon.daemon.timers import Timers
    from holon.runtime.host import AgentHost

__all__ = ["IDLE_POLL_S", "LOST_BACKOFF_S", "PUBLISH_BATCH", "Phase", "Wakes", "watch_interval"]

log = get_logger("holon.daemon")

#: Event types that may give an agent something to do.
WAKING = frozenset({"message.received", "agent.configured", "turn.settled"})
#: The watcher's slowest poll of the ledger head, reached while nothing happens (``Wakes.watch``).
LOST_BACKOFF_S = (0.5, 30.0)
"""The watcher's retry delay while the database is lost: from the first to the cap, doubling and
jittered (RFC 0008 section 6); any kick (an input this daemon committed) retries at once."""
IDLE_POLL_S = 0.5
#: Events published per watcher pass at most (the next pass takes the rest).
PUBLISH_BATCH = 5000
_TIMER_EVENTS = (ev.TimerScheduled, ev.TimerFired, ev.TimerCancelled)
#: Other event types whose payload the watcher reads (it reads envelopes only otherwise).
_READ_TYPES = frozenset({"evolve.model_used", "turn.abort_requested"})


def watch_interval(current: float, *, busy: bool, poll_s: float, idle_s: float = IDLE_POLL_S) -> float:
    """The watcher's next wait: ``poll_s`` after a pass that saw news or agents in play, else double
    the last wait, up to ``idle_s`` (never below ``poll_s``)."""
    return poll_s if busy else max(poll_s, min(current * 2, idle_s))


@dataclass(slots=True)
class Phase:
    """Where the daemon is in its lifespan, shared by its rooms."""

    accepting: bool = False
    """Taking input (the API's changes): from the end of start to the beginning of stop."""
    draining: bool = False
    """Stopping: no new turns, timer firings or evolve jobs."""
    started_us: int | None = None
    pid: int = field(default_factory=os.getpid)


class Wakes:
    """The dirty set, the kick, the host's gate and the watcher. ``bind`` gives it the host and the
    timers, made after it (the host takes its gate and wake)."""

    def __init__(
        self, store: Store, *, budgets: Budgets, notices: Notices, phase: Phase, poll_s: float,
        on_agents_changed: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        self.store = store
        self.budgets = budgets
        self.notices = notices
        self.phase = phase
        self.poll_s = poll_s
        self.on_agents_changed = on_agents_changed
        """Called when an agent is created or configured (its model warms then)."""
        self.ready: Callable[[], bool] = lambda: True
        """Whether turns may be scheduled yet (the model library is loaded)."""
        self.seen = 0
        self.dirty: set[str] = set()
        self.aborting: set[str] = set()
        self.kick = asyncio.Event()
        self._host: AgentHost | None = None
        self._timers: Timers | None = None
        self.owns: Callable[[str], bool] | None = None
        """A node of several (RFC 0008): may this node run the agent's turns (it holds the lease)?"""
        self.on_abort_request: Callable[[str, str], None] | None = None
        """Called with (agent, turn) for each ``turn.abort_requested`` read (another node's API asked
        to abort a turn: ``Ports.abort_requested`` aborts it if it runs here)."""
        self.idle_poll_s = IDLE_POLL_S
        """The watcher's slowest poll; on PostgreSQL the listener's notifications kick it, and its
        own catch-up covers a lost one, so the watcher only looks every ``CATCH_UP_S`` itself."""

    def bind(self, host: AgentHost, timers: Timers) -> None:
        self._host, self._timers = host, timers

    @property
    def host(self) -> AgentHost:
        assert self._host is not None, "Wakes.bind first"
        return self._host

    # --- waking and the gate ----------------------------------------------------------------

    def wake(self, agent_id: str) -> None:
        self.dirty.add(agent_id)
        self.kick.set()

    def wake_pending(self) -> None:
        """Mark every agent holding inputs dirty (at start, and when a new budget day begins)."""
        self.dirty.update(a.agent_id for a in self.store.agents() if a.pending_inputs)

    def may_run(self, agent_id: str) -> bool:
        """The host's gate: checked before every turn."""
        if self.phase.draining or agent_id in self.aborting:
            return False
        if self.owns is not None and not self.owns(agent_id):
            return False  # another node's agent (or none's yet): its owner runs the turn
        try:
            agent = self.store.agent(agent_id)
        except NotFoundError:
            return False
        settings = read_settings(agent.settings).settings  # total: {"paused": "no"} is not paused
        if settings.paused or settings.diagnostic:
            return False  # a diagnostic agent runs only under `holon diagnose`, with its own tools
        reason = self.budgets.exhausted(agent)
        if reason is not None:
            if agent.pending_inputs:
                self.budgets.brief(agent, reason)
            return False
        return True

    def runnable(self, agent: AgentState) -> bool:
        host = self.host
        return bool(agent.pending_inputs) and not host.is_stalled(agent.agent_id) and self.may_run(agent.agent_id)

    def schedule_dirty(self) -> None:
        if not self.ready():
            return  # the model library is still loading; the watcher comes back in poll_s
        host = self.host
        for agent_id in list(self.dirty):
            if host.is_running(agent_id):
                continue  # looked at again once the run ends
            self.dirty.discard(agent_id)
            try:
                agent = self.store.agent(agent_id)
            except NotFoundError:
                continue
            if self.runnable(agent):
                host.schedule(agent_id)
                self.dirty.add(agent_id)

    # --- the watcher ------------------------------------------------------------------------

    async def watch(self) -> None:
        """Follow the ledger head: publish notices, wake agents, keep timers in line.

        Polls every ``poll_s`` while the ledger moves or agents are in play, and backs off (doubling)
        to ``IDLE_POLL_S`` while nothing happens, so an idle daemon sleeps. This process's own
        inputs, settles and rechecks kick it at once; only appends by other processes wait longer."""
        interval = self.poll_s
        lost = 0.0  # while the database is lost (RFC 0008 section 6): the backoff, else 0
        while True:
            seen = self.seen
            try:
                self.publish_new()
                self.schedule_dirty()
                if lost:
                    log.info("daemon.storage_back")
                    lost = 0.0
            except StorageUnavailable as e:  # retried with backoff (0.5 s doubling to 30 s, jittered)
                if not lost:
                    log.warning("daemon.storage_lost", error=e.message)
                lost = min(max(lost * 2, LOST_BACKOFF_S[0]), LOST_BACKOFF_S[1])
            except Exception as e:  # the watcher must outlive one bad read; the next pass retries
                log.error("daemon.watch_failed", error=str(e))
            self.kick.clear()
            busy = self.seen != seen or bool(self.dirty)
            interval = watch_interval(interval, busy=busy, poll_s=self.poll_s, idle_s=self.idle_poll_s)
            if lost:
                interval = lost * random.uniform(0.5, 1.0)
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self.kick.wait()
            if self.kick.is_set():
                interval = self.poll_s

    def publish_new(self) -> None:
        """Every event after ``seen``: a notice each, the agents it wakes, the timer jobs it changes.

        Reads the envelope only (``find_keys``); the few events whose payload matters here (timer
        events, evolve model calls) are read decoded, through the codec's upcasting."""
        ledger = self.store.ledger
        if ledger.head() <= self.seen:
            return
        keys = ledger.find_keys(EventQuery(after=self.seen, limit=PUBLISH_BATCH))
        wanted = [k.seq for k in keys if k.type.startswith("timer.") or k.type in _READ_TYPES]
        payloads = {e.seq: e.payload for e in ledger.get_many(wanted)} if wanted else {}
        for key in keys:
            self.seen = key.seq
            if key.type in WAKING:
                self.dirty.add(key.agent_id)
            payload = payloads.get(key.seq)
            if isinstance(payload, _TIMER_EVENTS) and not self.phase.draining and self._timers is not None:
                timer = self.store.timer(payload.timer_id)
                self._timers.sync(timer if isinstance(timer, TimerProjection) else None, payload.timer_id)
            if key.type in ("agent.created", "agent.configured"):
                self.on_agents_changed()  # a new agent, or one given the local model: its model warms now
            if isinstance(payload, ev.EvolveModelUsed):
                self.budgets.record_evolve(key.agent_id, key.seq, payload)
            if isinstance(payload, ev.TurnAbortRequested) and self.on_abort_request is not None:
                self.on_abort_request(key.agent_id, payload.turn_id)
            self.notices.event(key.agent_id, key.seq)

    async def until_idle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until no agent has a runnable input or a running turn (tests, benchmarks)."""
        host = self.host
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            self.publish_new()
            busy = [a for a in self.store.agents() if host.is_running(a.agent_id) or self.runnable(a)]
            if not busy and not host.tasks.running:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"agents still busy after {timeout_s} s: {[a.name for a in busy]}")
            await asyncio.sleep(0.02)
