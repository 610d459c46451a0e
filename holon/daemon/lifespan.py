"""The daemon's one lifespan: an async context manager over an ``AsyncExitStack``.

``holon serve`` (``holon.daemon.process``) and the tests (``Daemon.running``) all run it. Each step of the start pushes its own undoing, so the stop is the
start in reverse, and a start that fails half-way undoes exactly what it did:

1. the daemon's own resources (its model resolver, the live trace exporter): closed last;
2. the host (``AgentHost.start``: the home's host lock, recovery of what a crash left): closed;
3. durable-memory views rebuilt from the ledger (repairs a crash between an append and its render);
4. the warm model path (``Warmth``; with ``warm_after``, once that event is set: ``holon serve``
   sets it when its API listens): its start awaited or cancelled;
5. timers: missed firings coalesced (one each), then the scheduler (with ``warm_after``, once
   that event is set): stopped;
6. the watcher and maintenance tasks: cancelled; a running evolve drain gets the grace period;
7. turns may run: at stop, running turns get the grace period, then are cancelled and settled
   ``interrupted`` (re-queued on the next start);
8. input is accepted: at stop, no more input, turns or timer firings (``Phase.draining``).

The grace period (``[daemon] grace_s`` unless given) is read when the stop begins
(``Lifespan.grace_s``), so a caller holding the ``Lifespan`` can name it late.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

from holon.daemon.wiring import Rooms
from holon.logs import get_logger
from holon.memory.durable_views import render_all
from holon.runtime.recovery import settle_unfinished_turn

__all__ = ["Lifespan", "lifespan"]

log = get_logger("holon.daemon")


class Lifespan:
    """One run of the daemon's rooms, start to stop (``async with``)."""

    def __init__(self, rooms: Rooms, *, grace_s: float | None = None, warm_after: asyncio.Event | None = None) -> None:
        self.rooms = rooms
        self.grace_s = grace_s
        self.warm_after = warm_after
        self._stack: AsyncExitStack | None = None

    def grace(self) -> float:
        return self.rooms.store.settings.daemon.grace_s if self.grace_s is None else self.grace_s

    async def __aenter__(self) -> Rooms:
        async with AsyncExitStack() as stack:
            await self._start(stack)
            self._stack = stack.pop_all()
        return self.rooms

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        log.info("daemon.stopped", head=self.rooms.store.ledger.head())

    async def _start(self, stack: AsyncExitStack) -> None:
        r = self.rooms
        stack.push_async_callback(self._close_resources)
        if r.cluster is not None:  # the name first: a second node of the same name does nothing at all
            await r.cluster.claim()
            stack.push_async_callback(r.cluster.close)  # after the turns drained and the host closed
        before = r.store.ledger.head()
        report = r.host.start(recover_all=r.cluster is None)  # a node recovers each agent it takes
        stack.push_async_callback(r.host.close)
        if r.tracer is not None and report.turns:
            r.tracer.settled_since(before)  # the turns recovery just settled (queued, sent off the loop)
        r.model_calls.loop = asyncio.get_running_loop()
        await asyncio.to_thread(render_all, r.store)
        r.warmth.start(after=self.warm_after)
        stack.push_async_callback(r.warmth.stop)
        r.phase.started_us = r.clock.now_us()
        r.wakes.seen = r.store.ledger.head()
        r.wakes.wake_pending()
        await self._start_timers(stack)
        r.maintenance.load_embedder()
        if r.store.ledger.engine.dialect == "postgresql":  # other nodes' commits wake the watcher
            from holon.daemon.cluster import start_listener
            from holon.ledger.pg.notify import CATCH_UP_S

            listener = start_listener(r.store, r.wakes.kick)
            stack.callback(listener.stop)
            r.wakes.idle_poll_s = CATCH_UP_S
        tasks = [
            asyncio.create_task(r.wakes.watch(), name="daemon:watch"),
            asyncio.create_task(r.maintenance.run(), name="daemon:maintain"),
        ]
        if r.cluster is not None:  # cancelled after the turns drained: leases live through the grace
            tasks += [
                asyncio.create_task(r.cluster.heartbeat(), name="daemon:heartbeat"),
                asyncio.create_task(r.cluster.spread(), name="daemon:spread"),
                asyncio.create_task(r.cluster.self_fence(), name="daemon:self-fence"),
            ]
        stack.push_async_callback(self._stop_tasks, tasks)
        stack.push_async_callback(self._drain_turns)
        r.phase.accepting = True
        stack.callback(self._stop_input)
        log.info("daemon.started", pid=r.phase.pid, head=r.wakes.seen, recovered_turns=len(report.turns),
                 recovered_tasks=len(report.tasks))  # fmt: skip

    async def _start_timers(self, stack: AsyncExitStack) -> None:
        """Fire what was missed and start the scheduler: at once, or (``warm_after``) once the API
        is up, since loading APScheduler is start-up time no input needs."""
        stack.callback(self.rooms.timers.stop)
        if self.warm_after is None:
            await self._fire_missed_and_schedule()
            return
        task = asyncio.create_task(self._after(self.warm_after, self._load_timers), name="daemon:timers")
        stack.push_async_callback(_cancel, task)

    async def _load_timers(self) -> None:
        await asyncio.to_thread(self.rooms.timers.load)  # off the loop, which serves the first requests
        await self._fire_missed_and_schedule()

    async def _fire_missed_and_schedule(self) -> None:
        r = self.rooms
        now = r.clock.now_us()
        for timer in r.store.timers(status="scheduled"):  # missed while down: one coalesced firing each
            if timer.next_fire_us is not None and timer.next_fire_us <= now:
                await r.firing.fire(timer.timer_id)
        r.timers.start(r.store.timers(status="scheduled"))
        log.info("daemon.timers_started", timers=r.timers.jobs())

    @staticmethod
    async def _after(event: asyncio.Event, step: Callable[[], Awaitable[None]]) -> None:
        await event.wait()
        await step()

    def _stop_input(self) -> None:
        """No new input, turns, timer firings or evolve jobs from now on."""
        self.rooms.phase.accepting = False
        self.rooms.phase.draining = True

    async def _drain_turns(self) -> None:
        """Running turns get the grace period; what still runs then is cancelled and settled."""
        r, grace = self.rooms, self.grace()
        runs = r.host.active_runs()
        if not runs:
            return
        log.info("daemon.draining", running=len(runs), grace_s=grace)
        _done, pending = await asyncio.wait(runs, timeout=grace)
        for run in pending:
            run.cancel()
        for run in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
        for agent in r.store.agents():
            if agent.current_turn_id is not None and (r.cluster is None or r.cluster.owns(agent.agent_id)):
                settle_unfinished_turn(r.store, agent, reason="holon shut down before the turn finished")

    async def _stop_tasks(self, tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.rooms.maintenance.stop_evolve(self.grace())
        self.rooms.wakes.publish_new()

    async def _close_resources(self) -> None:
        r = self.rooms
        if r.tracer is not None:
            await asyncio.to_thread(r.tracer.close)
        if r.resolver is not None:
            await r.resolver.aclose()


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


@contextlib.asynccontextmanager
async def lifespan(
    rooms: Rooms, *, grace_s: float | None = None, warm_after: asyncio.Event | None = None
) -> AsyncIterator[Rooms]:
    """``async with lifespan(rooms):`` the daemon runs; on exit it stops (see the module docstring)."""
    async with Lifespan(rooms, grace_s=grace_s, warm_after=warm_after) as running:
        yield running
