"""Running one input to settlement in-process (``holon run``), without a daemon."""

from __future__ import annotations

from holon.clock import SystemClock
from holon.errors import ConflictError
from holon.projections import Store
from holon.runtime.host import AgentHost
from holon.runtime.models import ModelResolver
from holon.runtime.providers.retry import RetryPolicy
from holon.runtime.settings import read_settings
from holon.runtime.turn import TurnLimits, TurnObserver, TurnResult

__all__ = ["limits_from", "run_input"]


def limits_from(store: Store) -> tuple[TurnLimits, RetryPolicy]:
    rt = store.settings.runtime
    limits = TurnLimits(
        max_rounds=rt.max_rounds,
        max_tokens=rt.max_tokens_per_turn,
        max_cost_usd=rt.max_cost_per_turn_usd,
        max_tool_errors=rt.max_tool_errors,
    )
    return limits, RetryPolicy(max_attempts=rt.retry_attempts)


def _paused(store: Store, agent_id: str) -> bool:
    """A paused agent takes no turn here either (as in the daemon): its input stays queued."""
    return bool(read_settings(store.agent(agent_id).settings).settings.paused)


async def run_input(
    store: Store,
    agent_ref: str,
    text: str,
    *,
    observer: TurnObserver | None = None,
    until_idle: bool = False,
    resolver: ModelResolver | None = None,
) -> list[TurnResult]:
    """Submit ``text`` to an agent as the operator and run its turns; returns them in order."""
    agent = store.agent(agent_ref)
    resolver = resolver or ModelResolver(store.settings.model, store.paths.logs, home=store.paths.root)
    resolver(agent)  # fail before recording anything when no model can be reached
    limits, retry = limits_from(store)
    host = AgentHost(
        store,
        resolver,
        clock=SystemClock(),
        limits=limits,
        retry=retry,
        observer=observer,
        gate=lambda agent_id: not _paused(store, agent_id),
    )
    try:
        host.start()
    except ConflictError as e:
        raise ConflictError(
            f"{e}; it serves no HTTP API for holon run to go through (started with --no-http?): "
            "restart it with HTTP, or stop it"
        ) from e
    try:
        host.submit(agent.agent_id, text)
        results = await host.run_agent(agent.agent_id)
        if until_idle:
            await host.run_until_idle()
            results += [r for r in host.finished if r not in results]
        return results
    finally:
        await host.close()
        resolver.close()
