"""The daemon's status: per-agent state as every view decides it, plus the daemon's own counters.

``holon.runtime.status.decide`` is the one function every view uses; this room adds what only the
running daemon knows (a turn runs, an agent is held back until a retry time, a budget is used up)
and the daemon's counters (ledger head, projection lag, index and evolve errors, timer jobs, inputs
committed and in how many transactions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from holon.clock import Clock
from holon.daemon.budget import Budgets
from holon.daemon.group_commit import GroupCommit
from holon.daemon.maintenance import Maintenance
from holon.daemon.wakes import Phase
from holon.errors import StorageUnavailable
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection, WaitProjection
from holon.runtime.settings import settings_problem
from holon.runtime.status import AgentStatus, Live, decide, status_entries

if TYPE_CHECKING:
    from holon.daemon.cluster import Cluster
    from holon.daemon.timers import Timers
    from holon.runtime.host import AgentHost

__all__ = ["FEW", "StatusView"]

FEW = 8
"""Up to this many agents, ``entries`` reads each one's waits and timers instead of everyone's."""


class StatusView:
    def __init__(
        self, store: Store, *, clock: Clock, host: AgentHost, budgets: Budgets, timers: Timers,
        maintenance: Maintenance, phase: Phase, inputs: GroupCommit,
    ) -> None:  # fmt: skip
        self.store = store
        self.clock = clock
        self.host = host
        self.budgets = budgets
        self.timers = timers
        self.maintenance = maintenance
        self.phase = phase
        self.inputs = inputs
        self.cluster: Cluster | None = None
        """This daemon as one node of several (RFC 0008): who owns which agent, in ``status``."""

    def _live(self, agent: AgentState) -> Live:
        """What this daemon knows of ``agent`` that its projection does not."""
        agent_id = agent.agent_id
        return Live(
            running=self.host.is_running(agent_id), retry_at_us=self.host.retry_at(agent_id),
            retrying=self.host.is_failing(agent_id),
        )  # fmt: skip

    def agent_status(
        self, agent: AgentState, *, waits: list[WaitProjection] | None = None,
        timers: list[TimerProjection] | None = None,
    ) -> AgentStatus:  # fmt: skip
        """One agent's state, decided by ``holon.runtime.status.decide`` from its projection and what
        this daemon knows live (``status`` decides every agent's at once, the same way).
        ``waits``/``timers``: the agent's pending waits and scheduled timers when the caller read them."""
        if waits is None:
            waits = self.store.waits(agent_id=agent.agent_id, status="pending")
        if timers is None:
            timers = self.store.timers(agent_id=agent.agent_id, status="scheduled")
        return decide(
            agent, now_us=self.clock.now_us(), waits=waits, timers=timers, live=self._live(agent),
            budget=lambda: self.budgets.exhausted(agent), problem=settings_problem(agent.settings, self.store.settings.model),
        )  # fmt: skip

    def entries(self, agents: list[AgentState]) -> list[dict[str, Any]]:
        """``agents``' status entries (``holon.runtime.status.status_entries``: the batched
        decision), in their order: two queries for all waits and timers whatever their number, or
        two per agent for a few (the dashboard's refresh of one row)."""
        store = self.store
        if len(agents) <= FEW:
            waits = [w for a in agents for w in store.waits(agent_id=a.agent_id, status="pending")]
            timers = [t for a in agents for t in store.timers(agent_id=a.agent_id, status="scheduled")]
        else:
            waits, timers = store.waits(status="pending"), store.timers(status="scheduled")
        return status_entries(
            agents, now_us=self.clock.now_us(), waits=waits, timers=timers, live=self._live,
            budget=self.budgets.exhausted, defaults=store.settings.model,
        )  # fmt: skip

    def key(self) -> tuple[Any, ...]:
        """What ``status`` follows, cheaply (two small queries): it changes whenever the status may
        have, but for time passing (``uptime_s``) and evolve job counts. ``holon serve`` rebuilds
        the status file (a few queries per agent) only when this changes, so an idle daemon with
        many agents sleeps instead of re-reading every agent each second."""
        try:
            cursors = tuple(self.store.cursors().items())
            head = self.store.ledger.head()
        except StorageUnavailable as e:  # the database lost mid-run: status says so (``status``)
            return ("storage unavailable", e.message)
        m = self.maintenance
        cluster = () if self.cluster is None else self.cluster.status_key()
        return (head, cursors, self.phase.accepting, len(self.host.active_runs()),
                self.host.held_back(), m.index_error, m.evolve_error, self.budgets.today(), cluster)  # fmt: skip

    def status(self) -> dict[str, Any]:
        """Everything the daemon knows; while the database is lost (RFC 0008 section 6) only what it
        knows without it, with ``storage_error`` ("storage unavailable: …") saying why."""
        try:
            return self._status()
        except StorageUnavailable as e:
            now, started = self.clock.now_us(), self.phase.started_us
            return {
                "pid": self.phase.pid,
                "accepting": self.phase.accepting,
                "started_us": started,
                "uptime_s": round((now - started) / 1e6, 3) if started else 0.0,
                "storage_error": f"storage unavailable: {e.message}",
                "agents": [],
            }

    def _status(self) -> dict[str, Any]:
        head = self.store.ledger.head()
        cursors = self.store.cursors()
        now = self.clock.now_us()
        started = self.phase.started_us
        sandbox = self.host.tasks.sandbox
        out = {
            "pid": self.phase.pid,
            "accepting": self.phase.accepting,
            "started_us": started,
            "uptime_s": round((now - started) / 1e6, 3) if started else 0.0,
            "ledger_head": head,
            "projection_lag": {name: head - seq for name, seq in sorted(cursors.items())},
            "index_error": self.maintenance.index_error,
            "commands": {"sandbox": sandbox.mode, "warning": sandbox.warning},
            "evolve": self.maintenance.evolve_status(),
            "timers": self.timers.jobs(),
            "inputs": self.inputs.counters(),
            "agents": self.entries(self.store.agents()),
        }
        if self.cluster is not None:
            out["cluster"] = self.cluster.status()
        return out
