"""``Daemon``: one home's agents, hosted for as long as the process lives (implements ``DaemonPort``).

A thin facade over the daemon's rooms (``holon.daemon.wiring.build_daemon`` makes them; each is a
small module with its collaborators named):

* **Ports** (``holon.daemon.ports``): what the HTTP API calls. Inputs are ledger events before
  anything acknowledges them (``submit`` appends, then wakes).
* **Wakes** (``holon.daemon.wakes``): the host's gate and the watcher, which follows the ledger
  head (inputs appended by other processes are seen too), publishes notices and wakes agents.
  Turns run through one ``AgentHost`` (one turn at a time per agent, agents concurrently); an idle
  agent costs nothing.
* **Timers** (``holon.daemon.timers``, ``holon.daemon.firing``) append ``timer.fired`` and deliver
  the timer's prompt as an input; **maintenance** (``holon.daemon.maintenance``) rechecks waits,
  indexes and drains evolve jobs every ``[daemon] tick_s``.
* **Notices** (``holon.daemon.notices``) fan out to ``subscribe``rs; **status**
  (``holon.daemon.status``) reports.

One asyncio loop runs everything; blocking work goes to a thread in small slices. Its one lifespan
(``holon.daemon.lifespan``): ``async with daemon.running():``, or ``await start()`` then
``await stop(grace_s=...)``, which enter and leave the same lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from holon.api.port import Notice, Spending
from holon.clock import Clock
from holon.daemon.lifespan import Lifespan
from holon.daemon.wakes import IDLE_POLL_S, watch_interval
from holon.daemon.wiring import build_daemon
from holon.ledger import Event
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection, WaitProjection
from holon.runtime.ingress import InputSpec
from holon.runtime.status import AgentStatus
from holon.runtime.tools import ToolRegistry
from holon.runtime.turn import ProviderResolver, TurnLimits

__all__ = ["IDLE_POLL_S", "Daemon", "watch_interval"]


class Daemon:
    def __init__(
        self,
        store: Store,
        *,
        resolver: ProviderResolver | None = None,
        clock: Clock | None = None,
        registry: ToolRegistry | None = None,
        limits: TurnLimits | None = None,
        sleep: Callable[[float], Any] | None = None,
        poll_s: float = 0.05,
    ) -> None:
        rooms = build_daemon(
            store, resolver=resolver, clock=clock, registry=registry, limits=limits, sleep=sleep, poll_s=poll_s
        )
        self.rooms = rooms
        self.store = store
        self.clock = rooms.clock
        self.settings = store.settings.daemon
        self.host = rooms.host
        self.budgets = rooms.budgets
        self.timers = rooms.timers
        self.index = rooms.index
        self.evolver = rooms.evolver
        self.tracer = rooms.tracer
        self.poll_s = poll_s
        self._owned_resolver = rooms.resolver

    # --- the lifespan -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(
        self, *, grace_s: float | None = None, warm_after: asyncio.Event | None = None
    ) -> AsyncIterator[Daemon]:
        """The lifespan; ``warm_after``: start the background imports once it is set (``Warmth``)."""
        async with Lifespan(self.rooms, grace_s=grace_s, warm_after=warm_after):
            yield self

    async def until_idle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until no agent has a runnable input or a running turn (tests, benchmarks)."""
        await self.rooms.wakes.until_idle(timeout_s=timeout_s)

    # --- state the API and tests read ------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.rooms.phase.pid

    @property
    def started_us(self) -> int | None:
        return self.rooms.phase.started_us

    @property
    def accepting(self) -> bool:
        return self.rooms.phase.accepting

    @property
    def models_starting(self) -> set[str]:
        return self.rooms.notices.models_starting

    @property
    def index_error(self) -> str | None:
        return self.rooms.maintenance.index_error

    @property
    def evolve_error(self) -> str | None:
        return self.rooms.maintenance.evolve_error

    @property
    def _subscribers(self) -> list[tuple[str | None, Any]]:
        return self.rooms.notices.subscribers

    # --- the port (holon.api.port.DaemonPort) ----------------------------------------------

    def submit(self, agent: str, spec: InputSpec | str, **fields: Any) -> Event:
        """An input (``InputSpec``, or its text with the other fields by keyword), durable, then woken."""
        return self.rooms.ports.submit(agent, spec, **fields)

    async def submit_input(self, agent: str, spec: InputSpec) -> Event:
        """An input through the group commit (the HTTP API's path): durable when this returns."""
        return await self.rooms.ports.submit_input(agent, spec)

    def create_agent(
        self, name: str, *, template: str = "assistant", workspace: str | None = None, schedule: str | None = None,
        prompt: str | None = None, settings: dict[str, Any] | None = None,
    ) -> AgentState:  # fmt: skip
        return self.rooms.ports.create_agent(
            name, template=template, workspace=workspace, schedule=schedule, prompt=prompt, settings=settings
        )

    def configure_agent(self, agent: str, changes: dict[str, Any], *, unset: list[str] | None = None) -> AgentState:
        return self.rooms.ports.configure_agent(agent, changes, unset=unset)

    def pause(self, agent: str) -> AgentState:
        return self.rooms.ports.pause(agent)

    def resume(self, agent: str) -> AgentState:
        return self.rooms.ports.resume(agent)

    def delete(self, agent: str) -> None:
        self.rooms.ports.delete(agent)

    def add_timer(self, agent: str, schedule: str, *, prompt: str | None = None) -> TimerProjection:
        return self.rooms.ports.add_timer(agent, schedule, prompt=prompt)

    def cancel_timer(self, agent: str, timer_id: str) -> TimerProjection:
        return self.rooms.ports.cancel_timer(agent, timer_id)

    def abort(self, agent: str) -> bool:
        return self.rooms.ports.abort(agent)

    async def abort_anywhere(self, agent: str) -> bool:
        return await self.rooms.ports.abort_anywhere(agent)

    def spending(self, agent: AgentState) -> Spending:
        owner = self.budgets.owner(agent)
        if owner is None:
            spent = self.budgets.spent(agent.agent_id)
            return Spending(spent.turns, spent.tokens, spent.cost_usd)
        spent = self.budgets.spent(owner.agent_id)
        turns, tokens, cost = self.budgets.limits(owner)
        return Spending(spent.turns, spent.tokens, spent.cost_usd, owner.name, turns, tokens, cost)

    def external_token(self, agent: str) -> str:
        return self.rooms.ports.external_token(agent)

    def rotate_external_token(self, agent: str) -> str:
        return self.rooms.ports.rotate_external_token(agent)

    def agent_for_token(self, token: str) -> AgentState | None:
        return self.rooms.ports.agent_for_token(token)

    def subscribe(self, agent_id: str | None = None) -> AsyncIterator[Notice]:
        return self.rooms.notices.subscribe(agent_id)

    def agent_status(
        self, agent: AgentState, *, waits: list[WaitProjection] | None = None,
        timers: list[TimerProjection] | None = None,
    ) -> AgentStatus:  # fmt: skip
        return self.rooms.status.agent_status(agent, waits=waits, timers=timers)

    def agent_entries(self, agents: list[AgentState]) -> list[dict[str, Any]]:
        return self.rooms.status.entries(agents)

    def status_key(self) -> tuple[Any, ...]:
        return self.rooms.status.key()

    def status(self) -> dict[str, Any]:
        return self.rooms.status.status()
