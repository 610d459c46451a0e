"""Wiring: ``build_daemon`` makes the daemon's collaborators (its rooms) and connects them.

Nothing here runs: the lifespan (``holon.daemon.lifespan``) starts and stops what is built here.
Each room gets the few collaborators it uses, by keyword:

* ``Notices`` (``notices``): live notices to streams;
* ``Wakes`` (``wakes``): dirty agents, the host's gate, the watcher;
* ``TimerFiring`` (``firing``): a timer's firing, recorded then delivered;
* ``Maintenance`` (``maintenance``): the periodic tick, indexing, evolve drains;
* ``Warmth`` (``warmth``): the model library and model children, readied in the background;
* ``StatusView`` (``status``): what ``status`` reports;
* ``Ports`` (``ports``): what the HTTP API calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from holon.clock import Clock, SystemClock
from holon.daemon.budget import Budgets
from holon.daemon.firing import TimerFiring
from holon.daemon.group_commit import GroupCommit
from holon.daemon.maintenance import Maintenance, ModelCalls
from holon.daemon.notices import Notices
from holon.daemon.ports import Ports
from holon.daemon.status import StatusView
from holon.daemon.timers import Timers
from holon.daemon.wakes import Phase, Wakes
from holon.daemon.warm import Warmth
from holon.errors import ConfigError
from holon.evolve.model_extract import model_extractor
from holon.evolve.worker import Evolver
from holon.memory.index import SearchIndex
from holon.projections import Store
from holon.runtime.host import AgentHost
from holon.runtime.run import limits_from
from holon.runtime.secrets import KeyLookup
from holon.runtime.settings import read_settings
from holon.runtime.tools import ToolRegistry
from holon.runtime.turn import ProviderResolver, TurnLimits, TurnObserver, TurnResult

if TYPE_CHECKING:
    from holon.daemon.cluster import Cluster

__all__ = ["Rooms", "build_daemon"]


@dataclass(frozen=True, slots=True)
class Rooms:
    """The daemon's collaborators, as ``build_daemon`` made them."""

    store: Store
    clock: Clock
    phase: Phase
    host: AgentHost
    budgets: Budgets
    timers: Timers
    index: SearchIndex
    evolver: Evolver | None
    notices: Notices
    wakes: Wakes
    firing: TimerFiring
    maintenance: Maintenance
    model_calls: ModelCalls
    warmth: Warmth
    status: StatusView
    ports: Ports
    resolver: Any
    """The daemon's own ``ModelResolver`` (closed at stop), or ``None`` with one given from outside."""
    tracer: Any
    """The live trace exporter (``holon.trace.live``), or ``None``."""
    cluster: Cluster | None = None
    """This daemon as one node of several (``[node] name``, RFC 0008), or ``None``."""


class _Observer(TurnObserver):
    """Streams reply text to subscribers and counts what background agents spend."""

    def __init__(self, notices: Notices, settled: Callable[[str, TurnResult], None]) -> None:
        self.notices = notices
        self.settled = settled

    def on_text(self, agent_id: str, fragment: str) -> None:
        self.notices.delta(agent_id, fragment)

    def on_settled(self, agent_id: str, result: TurnResult) -> None:
        self.settled(agent_id, result)


def _own_resolver(store: Store, notices: Notices) -> Any:
    """The daemon's own ``ModelResolver``: model calls in child processes (``[daemon]
    model_process``), whose starts, like the local model server's, are told to ``notices``."""
    from holon.runtime.models import ModelResolver

    settings = store.settings
    provider = None
    if settings.daemon.model_process:
        from holon.runtime.providers.model_process import ProcessProvider

        d = settings.daemon
        provider = ProcessProvider(
            env=KeyLookup(store.paths.root, who="the daemon"),  # keys read at each call (RFC 0002)
            processes=d.model_processes,
            idle_s=d.model_process_idle_s,
            on_state=notices.model_state,
        )
    return ModelResolver(
        settings.model, store.paths.logs, provider=provider, local_idle_s=settings.local.idle_stop_s,
        on_state=notices.model_state, home=store.paths.root, who="the daemon",
    )  # fmt: skip


def build_daemon(
    store: Store,
    *,
    resolver: ProviderResolver | None = None,
    clock: Clock | None = None,
    registry: ToolRegistry | None = None,
    limits: TurnLimits | None = None,
    sleep: Callable[[float], Any] | None = None,
    poll_s: float = 0.05,
) -> Rooms:
    """The rooms of one home's daemon. ``resolver``: how agents reach their models (the daemon's
    own ``ModelResolver`` when ``None``); the rest as ``AgentHost`` takes them."""
    clock = clock or SystemClock()
    settings = store.settings.daemon
    phase = Phase()
    notices = Notices(store)
    own: Any = None  # a ModelResolver (imported lazily: it loads the provider machinery)
    if resolver is None:
        resolver = own = _own_resolver(store, notices)
    budgets = Budgets(store, clock, settings)
    wakes = Wakes(store, budgets=budgets, notices=notices, phase=phase, poll_s=poll_s)
    tracer = None
    if store.settings.trace.otlp_endpoint:
        from holon.trace.live import start_live_export

        tracer = start_live_export(store, store.settings.trace)  # None (and a warning) if it cannot start

    def settled(agent_id: str, result: TurnResult) -> None:
        if tracer is not None:
            tracer.turn_settled(agent_id, result.turn_id)
        agent = store.agent(agent_id)
        # Every agent's: a foreground agent has no budget, but its day's spending is shown (the
        # dashboard's agents page) from the same cache, which must not go stale.
        budgets.record(agent_id, result.usage.total_tokens, result.cost_usd)
        if read_settings(agent.settings).settings.background:
            reason = budgets.exhausted(agent)
            if reason is not None:
                budgets.brief(agent, reason)
        wakes.kick.set()

    default_limits, retry = limits_from(store)
    host = AgentHost(
        store, resolver, clock=clock, registry=registry, limits=limits or default_limits,
        retry=retry, observer=_Observer(notices, settled), sleep=sleep, gate=wakes.may_run,
        wake=wakes.wake,
    )  # fmt: skip
    firing = TimerFiring(store, clock=clock, wakes=wakes, phase=phase)
    timers = Timers(firing.fire)
    wakes.bind(host, timers)
    model_calls = ModelCalls(store)
    model_calls.host = host
    evolver = None
    if store.settings.evolve.enabled:
        extractor = None
        if store.settings.evolve.model_extraction:
            extractor = model_extractor(model_calls, store.settings.evolve.min_confidence)
        evolver = Evolver(store, clock=clock, model_extractor=extractor)
    index = SearchIndex(store)
    maintenance = Maintenance(
        store, settings=settings, host=host, wakes=wakes, budgets=budgets, index=index, evolver=evolver,
        resolver=own, phase=phase,
    )  # fmt: skip
    warmth = Warmth(store, settings=settings, resolver=own, phase=phase)
    wakes.ready = warmth.ready
    wakes.on_agents_changed = warmth.warm
    group = GroupCommit(store.ledger, enabled=settings.group_commit)
    status = StatusView(
        store, clock=clock, host=host, budgets=budgets, timers=timers, maintenance=maintenance, phase=phase,
        inputs=group,
    )  # fmt: skip
    ports = Ports(store, clock=clock, host=host, wakes=wakes, phase=phase, group=group)
    cluster = _cluster(
        store, host=host, wakes=wakes, timers=timers, firing=firing, phase=phase, evolver=evolver, status=status,
        ports=ports,
    )  # fmt: skip
    return Rooms(
        store=store, clock=clock, phase=phase, host=host, budgets=budgets, timers=timers, index=index,
        evolver=evolver, notices=notices, wakes=wakes, firing=firing, maintenance=maintenance,
        model_calls=model_calls, warmth=warmth, status=status, ports=ports, resolver=own, tracer=tracer,
        cluster=cluster,
    )  # fmt: skip


def _cluster(
    store: Store, *, host: AgentHost, wakes: Wakes, timers: Timers, firing: TimerFiring, phase: Phase,
    evolver: Evolver | None, status: StatusView, ports: Ports,
) -> Cluster | None:  # fmt: skip
    """This daemon as node ``[node] name`` (``holon serve --node``), or ``None`` for a single
    node: turns, timers and evolve jobs then only for the agents whose leases it holds."""
    node = store.settings.node
    if not node.name:
        _check_single_node(store)
        return None
    if store.ledger.engine.dialect != "postgresql":
        raise ConfigError(
            f"node {node.name}: several nodes share a PostgreSQL ledger; set [storage] url (HOLON_STORAGE_URL) "
            "to postgresql://USER@HOST:PORT/DB, or run without --node"
        )
    from holon.daemon.cluster import Cluster
    from holon.ledger.pg.node import NodeSession

    session = NodeSession(
        store.settings.storage.url, node.name, lease_s=node.lease_s, timeout_s=store.settings.storage.connect_timeout_s
    )
    cluster = Cluster(session, store, host=host, wakes=wakes, timers=timers, firing=firing, phase=phase)
    wakes.owns = timers.owns = firing.owns = cluster.owns
    host.on_fenced = cluster.fenced_out
    status.cluster = cluster
    ports.node = node.name  # an abort of a turn another node runs is asked of it through the ledger
    wakes.on_abort_request = ports.abort_requested
    if evolver is not None:
        evolver.owned = cluster.owned
    return cluster


def _check_single_node(store: Store) -> None:
    """Refuse to run as the single node of a PostgreSQL ledger whose agents nodes have leased:
    once leased, an agent stays fenced (RFC 0008), so every turn here would be refused."""
    if store.ledger.engine.dialect != "postgresql":
        return
    [(leased,)] = store.ledger.query("SELECT count(*) FROM leases")
    if leased:
        raise ConfigError(
            f"the agents of this PostgreSQL ledger are owned through leases ({leased} agents, taken by nodes of "
            "'holon serve --node'); run this daemon as a node too: holon serve --node NAME"
        )
