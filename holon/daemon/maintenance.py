"""Maintenance: the daemon's slow, periodic work, off the turns' path.

Every ``[daemon] tick_s``: wait rechecks (``AgentHost.tick``), the day's budget reset, the local
model's idle stop, a slice of search indexing and embeddings (in a thread, in small slices), and an
evolve drain started in the background (never awaited by the tick: a slow job, a model call for
extraction, must not hold up the rest). Failures are kept for ``status`` (``index_error``,
``evolve_error``) and retried on the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from holon.config import DaemonSettings
from holon.daemon.budget import Budgets
from holon.daemon.wakes import Phase, Wakes
from holon.evolve.model_extract import ModelAnswer
from holon.evolve.worker import Evolver
from holon.logs import get_logger
from holon.memory.index import SearchIndex
from holon.projections import Store

if TYPE_CHECKING:
    from holon.runtime.host import AgentHost

__all__ = ["EVOLVE_JOBS_PER_TICK", "Maintenance", "ModelCalls"]

log = get_logger("holon.daemon")

#: Evolve jobs run per maintenance tick (each is a handful of reads and one small transaction).
EVOLVE_JOBS_PER_TICK = 8


class ModelCalls:
    """For model-assisted extraction, from the evolve thread: the agent's own model, on the
    daemon's loop (``loop`` is set when the daemon starts)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.host: AgentHost | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, agent_id: str, messages: list[dict[str, Any]]) -> ModelAnswer:
        from holon.runtime.providers.base import ModelRequest

        assert self.loop is not None and self.host is not None
        provider, settings = self.host.runner.resolve_provider(self.store.agent(agent_id))
        request = ModelRequest(messages=messages, settings=settings)
        future = asyncio.run_coroutine_threadsafe(provider.complete(request), self.loop)
        reply = future.result(timeout=settings.timeout_s + 30)
        return ModelAnswer(reply.content or "", model=reply.model, usage=reply.usage, cost_usd=reply.cost_usd)


class Maintenance:
    def __init__(
        self, store: Store, *, settings: DaemonSettings, host: AgentHost, wakes: Wakes, budgets: Budgets,
        index: SearchIndex, evolver: Evolver | None, resolver: Any, phase: Phase,
    ) -> None:  # fmt: skip
        """``resolver``: the daemon's own ``ModelResolver`` (``None`` with one given from outside)."""
        self.store = store
        self.settings = settings
        self.host = host
        self.wakes = wakes
        self.budgets = budgets
        self.index = index
        self.evolver = evolver
        self.resolver = resolver
        self.phase = phase
        self.embedder: Any = None  # an ``Embedder`` or None: lexical search only
        self.index_error: str | None = None
        self.evolve_error: str | None = None
        self._evolve_task: asyncio.Task[None] | None = None

    def load_embedder(self) -> None:
        try:
            from holon.runtime.embedders import embedder_from_settings

            self.embedder = embedder_from_settings(self.store.settings)
        except Exception as e:
            log.warning("embeddings unavailable; lexical search only", error=str(e))
            self.embedder = None

    async def run(self) -> None:
        """The tick loop (a task of the lifespan, cancelled at stop)."""
        day = self.budgets.today()
        while True:
            await asyncio.sleep(self.settings.tick_s)
            try:
                if self.host.tick():
                    self.wakes.kick.set()
                if self.budgets.today() != day:
                    day = self.budgets.today()
                    self.wakes.wake_pending()
                    self.wakes.kick.set()
                if self.resolver is not None:
                    await asyncio.to_thread(self.resolver.maintain)  # the local model's idle stop
                await asyncio.to_thread(self.index.catch_up, max_events=500)
                if self.embedder is not None:
                    from holon.memory.vectors import embed_pending

                    await asyncio.to_thread(embed_pending, self.index, self.embedder, limit=64)
                self.index_error = None
            except Exception as e:
                self.index_error = str(e)
                log.error("daemon.maintenance_failed", error=str(e))
            self.start_evolve()

    # --- evolve -----------------------------------------------------------------------------

    def start_evolve(self) -> None:
        """Start draining evolve jobs in the background unless a drain is running (one at a time)."""
        if self.evolver is None or self.phase.draining:
            return
        if self._evolve_task is None or self._evolve_task.done():
            self._evolve_task = asyncio.create_task(self._evolve(), name="daemon:evolve")

    async def stop_evolve(self, grace_s: float) -> None:
        """Let a running drain finish its current job (``draining`` stops it taking another) for up
        to ``grace_s``; a job cut short is not lost: its lease expires and the next start retries it."""
        task = self._evolve_task
        if task is None or task.done():
            return
        _done, pending = await asyncio.wait({task}, timeout=grace_s)
        if pending:
            log.warning("daemon.evolve_job_cut_short", grace_s=grace_s)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _evolve(self) -> None:
        """A few evolve jobs, in a thread: turns never wait on durable memory."""
        if self.evolver is None or self.phase.draining:
            return
        phase = self.phase
        try:
            await asyncio.to_thread(self.evolver.drain, max_jobs=EVOLVE_JOBS_PER_TICK, stop=lambda: phase.draining)
            self.evolve_error = None
        except Exception as e:  # a job's own failure is recorded on the job; this is the queue failing
            self.evolve_error = str(e)
            log.error("daemon.evolve_failed", error=str(e))

    def evolve_status(self) -> dict[str, Any]:
        if self.evolver is None:
            return {"enabled": False}
        queue = self.evolver.queue
        dead = [{"job": j.key, "agent_id": j.agent_id, "attempts": j.attempts, "error": j.last_error}
                for j in queue.jobs(status="dead", limit=20)]  # fmt: skip
        pending = len(self.store.proposals(status="pending"))
        return {"enabled": True, "jobs": queue.counts(), "dead": dead, "error": self.evolve_error,
                "pending_proposals": pending}  # fmt: skip
