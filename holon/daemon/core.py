"""``Daemon``: one home's agents, hosted for as long as the process lives (implements ``DaemonPort``).

One asyncio loop runs everything; blocking work (search indexing, embeddings) goes to a thread in
small slices so that turns are never held up for long.

* **Inputs** are ledger events before anything acknowledges them (``submit`` appends, then wakes).
  Inputs appended by other processes (``holon agent create --schedule``, scripts) are seen too: a
  watcher follows the ledger head and wakes the agents whose events arrived.
* **Turns** run through one ``AgentHost`` (its per-agent locks: one turn at a time per agent,
  agents concurrently). The host's gate keeps paused, aborting and over-budget agents from starting
  turns; an idle agent costs nothing (no model call without an input).
* **Timers** (``holon.daemon.timers``) append ``timer.fired`` and deliver the timer's prompt as an
  input; **waits** are rechecked by ``AgentHost.tick`` every ``[daemon] tick_s``.
* **Notices** fan out to ``subscribe``rs: every new ledger event (by seq) and the text deltas of
  replies being generated.

Lifecycle: ``await start()`` (host lock, recovery, timers reconciled, watcher and maintenance
tasks), then ``await stop(grace_s=...)`` (no new input or turns; running turns get the grace
period; whatever is still running then is cancelled and settled ``interrupted``, so it is re-queued
on the next start). ``async with daemon.running():`` does both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from holon.api.port import Notice
from holon.clock import Clock, SystemClock
from holon.daemon.budget import Budgets
from holon.daemon.deletion import REASON, delete_records, descendants
from holon.daemon.hooks import HookTokens
from holon.daemon.timers import Timers, add_timer, cancel_timer, due_firings, next_after
from holon.errors import ConflictError, NotFoundError
from holon.evolve.model_extract import ModelAnswer, model_extractor
from holon.evolve.worker import Evolver
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.logs import get_logger
from holon.memory.durable_views import render_all
from holon.memory.index import SearchIndex
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection, WaitProjection
from holon.runtime.agents import configure_or_create_default, create_agent
from holon.runtime.inputs import input_events
from holon.runtime.recovery import settle_unfinished_turn
from holon.runtime.run import limits_from
from holon.runtime.secrets import KeyLookup
from holon.runtime.settings import read_settings, settings_problem
from holon.runtime.status import ABORTED_REASON, AgentStatus, Live, decide, is_internal, model_label, status_entry
from holon.runtime.tools import ToolRegistry
from holon.runtime.turn import ProviderResolver, TurnLimits, TurnObserver, TurnResult

__all__ = ["Daemon"]

log = get_logger("holon.daemon")

_WAKING = {"message.received", "agent.configured", "turn.settled"}
_QUEUE_LIMIT = 10_000
#: The watcher's slowest poll of the ledger head, reached while nothing happens (``Daemon._watch``).
IDLE_POLL_S = 0.5
#: Evolve jobs run per maintenance tick (each is a handful of reads and one small transaction).
EVOLVE_JOBS_PER_TICK = 8


def watch_interval(current: float, *, busy: bool, poll_s: float) -> float:
    """The watcher's next wait: ``poll_s`` after a pass that saw news or agents in play, else double
    the last wait, up to ``IDLE_POLL_S`` (never below ``poll_s``)."""
    return poll_s if busy else max(poll_s, min(current * 2, IDLE_POLL_S))


class _Observer(TurnObserver):
    """Streams reply text to subscribers and counts what background agents spend."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def on_text(self, agent_id: str, fragment: str) -> None:
        self.daemon._delta(agent_id, fragment)

    def on_settled(self, agent_id: str, result: TurnResult) -> None:
        self.daemon._settled(agent_id, result)


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
        from holon.runtime.host import AgentHost

        self.store = store
        self.clock = clock or SystemClock()
        self.settings = store.settings.daemon
        self._owned_resolver: Any = None
        if resolver is None:
            resolver = self._owned_resolver = self._make_resolver()
        default_limits, retry = limits_from(store)
        window_of = None
        if self._owned_resolver is not None:
            from holon.runtime.providers.litellm_provider import known_context_window

            window_of = known_context_window
        self.host = AgentHost(
            store,
            resolver,
            clock=self.clock,
            registry=registry,
            limits=limits or default_limits,
            retry=retry,
            observer=_Observer(self),
            sleep=sleep,
            window_of=window_of,
            gate=self._may_run,
            wake=self._wake,
        )
        self.budgets = Budgets(store, self.clock, self.settings)
        self.timers = Timers(store.paths.db, self._fire_timer)
        self.index = SearchIndex(store)
        self.evolver: Evolver | None = None
        if store.settings.evolve.enabled:
            extractor = None
            if store.settings.evolve.model_extraction:
                extractor = model_extractor(self._model_call, store.settings.evolve.min_confidence)
            self.evolver = Evolver(store, clock=self.clock, model_extractor=extractor)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._warm: asyncio.Task[Any] | None = None
        self._warm_models: asyncio.Task[None] | None = None
        self.models_starting: set[str] = set()
        """Model children starting now (``model process``, ``local model``): told to new subscribers."""
        self.tracer: Any = None
        if store.settings.trace.otlp_endpoint:
            from holon.trace.live import start_live_export

            self.tracer = start_live_export(store, store.settings.trace)  # None (and a warning) if it cannot start
        self.evolve_error: str | None = None
        self.poll_s = poll_s
        self.pid = os.getpid()
        self.started_us: int | None = None
        self.accepting = False
        self._draining = False
        self._seen = 0
        self._dirty: set[str] = set()
        self._aborting: set[str] = set()
        self._subscribers: list[tuple[str | None, asyncio.Queue[Notice]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._evolve_task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._embedder: Any = None
        self.index_error: str | None = None

    def _make_resolver(self) -> Any:
        """The daemon's own ``ModelResolver``: model calls in child processes (``[daemon]
        model_process``), whose starts, like the local model server's, are told to ``_model_state``."""
        from holon.runtime.models import ModelResolver

        settings = self.store.settings
        provider = None
        if settings.daemon.model_process:
            from holon.runtime.providers.model_process import ProcessProvider

            d = settings.daemon
            provider = ProcessProvider(
                env=KeyLookup(self.store.paths.root, who="the daemon"),  # keys read at each call (RFC 0002)
                processes=d.model_processes,
                idle_s=d.model_process_idle_s,
                on_state=self._model_state,
            )
        return ModelResolver(
            settings.model, self.store.paths.logs, provider=provider, local_idle_s=settings.local.idle_stop_s,
            on_state=self._model_state, home=self.store.paths.root, who="the daemon",
        )  # fmt: skip

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the home's host lock, recover, restore timers, start the watcher and maintenance."""
        before = self.store.ledger.head()
        report = self.host.start()
        if self.tracer is not None and report.turns:
            self.tracer.settled_since(before)  # the turns recovery just settled (queued, sent off the loop)
        self._loop = asyncio.get_running_loop()
        # Durable-memory views are rebuilt from the ledger: repairs a crash between an append and
        # its render, a view edited or deleted by hand (cheap: only changed bytes are written).
        await asyncio.to_thread(render_all, self.store)
        if self._owned_resolver is not None:
            # Import litellm off the loop, in the background: imported by the first turn it would
            # stall every agent and timer for seconds, and awaited here it would keep the API
            # (health, status, inputs) closed for as long. Turns wait for it (``_schedule_dirty``).
            from holon.runtime.providers.litellm_provider import known_context_window

            self._warm = asyncio.create_task(asyncio.to_thread(known_context_window, "gpt-4o-mini"))
            self._warm_model()
        self.started_us = self.clock.now_us()
        self._seen = self.store.ledger.head()
        self._dirty.update(a.agent_id for a in self.store.agents() if a.pending_inputs)
        scheduled = self.store.rows("timer", status="scheduled")
        for timer in scheduled:  # missed while down: one coalesced firing each
            if timer.next_fire_us is not None and timer.next_fire_us <= self.clock.now_us():
                await self._fire_timer(timer.timer_id)
        self.timers.start(self.store.rows("timer", status="scheduled"))
        self._embedder = self._make_embedder()
        self._tasks = [
            asyncio.create_task(self._watch(), name="daemon:watch"),
            asyncio.create_task(self._maintain(), name="daemon:maintain"),
        ]
        self.accepting = True
        log.info("daemon.started", pid=self.pid, head=self._seen, recovered_turns=len(report.turns),
                 recovered_tasks=len(report.tasks), timers=self.timers.jobs())  # fmt: skip

    async def stop(self, *, grace_s: float | None = None) -> None:
        """Stop taking input and starting turns; let running turns finish for ``grace_s``; settle the rest."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        self.accepting = False
        self._draining = True
        self.timers.stop()
        runs = self.host.active_runs()
        if runs:
            log.info("daemon.draining", running=len(runs), grace_s=grace)
            _done, pending = await asyncio.wait(runs, timeout=grace)
            for run in pending:
                run.cancel()
            for run in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await run
            for agent in self.store.agents():
                if agent.current_turn_id is not None:
                    settle_unfinished_turn(self.store, agent, reason="holon shut down before the turn finished")
        if self._warm is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._warm
        if self._warm_models is not None:  # a start still under way is not waited for
            self._warm_models.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._warm_models
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._stop_evolve(grace)
        self._publish_new()
        await self.host.close()
        if self.tracer is not None:
            await asyncio.to_thread(self.tracer.close)
        if self._owned_resolver is not None:
            await self._owned_resolver.aclose()
        log.info("daemon.stopped", head=self.store.ledger.head())

    @contextlib.asynccontextmanager
    async def running(self, *, grace_s: float | None = None) -> AsyncIterator[Daemon]:
        await self.start()
        try:
            yield self
        finally:
            await self.stop(grace_s=grace_s)

    async def until_idle(self, *, timeout_s: float = 30.0) -> None:
        """Wait until no agent has a runnable input or a running turn (tests, benchmarks)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            self._publish_new()
            busy = [a for a in self.store.agents() if self.host.is_running(a.agent_id) or self._runnable(a)]
            if not busy and not self.host.tasks.running:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"agents still busy after {timeout_s} s: {[a.name for a in busy]}")
            await asyncio.sleep(0.02)

    # --- inputs and agents (DaemonPort) -----------------------------------------------------

    def _check_open(self) -> None:
        if not self.accepting:
            raise ConflictError("the daemon is not taking input (it is starting or shutting down)")

    def submit(
        self, agent: str, text: str, *, origin: str, authority: Authority, sender: str, channel: str,
        event: str | None = None, idempotency_key: str | None = None,
    ) -> Event:  # fmt: skip
        self._check_open()
        stored = self.host.submit(
            agent, text, origin=origin, authority=authority, sender=sender, channel=channel, event=event,
            idempotency_key=idempotency_key,
        )  # fmt: skip
        self._wake(stored.agent_id)
        return stored

    def create_agent(
        self,
        name: str,
        *,
        template: str = "assistant",
        workspace: str | None = None,
        schedule: str | None = None,
        prompt: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> AgentState:
        agent = create_agent(
            self.store, name, template=template, settings=settings, workspace=workspace, schedule=schedule,
            prompt=prompt, now_us=self.clock.now_us(),
        )  # fmt: skip
        self._publish_new()
        return agent

    def configure_agent(self, agent: str, changes: dict[str, Any], *, unset: list[str] | None = None) -> AgentState:
        # The default agent is created by its first configure (before `holon chat` made it).
        state, _created = configure_or_create_default(self.store, agent, changes, unset=unset or [])
        self._wake(state.agent_id)
        return state

    def pause(self, agent: str) -> AgentState:
        return self.configure_agent(agent, {"paused": True})

    def resume(self, agent: str) -> AgentState:
        return self.configure_agent(agent, {}, unset=["paused"])

    def delete(self, agent: str) -> None:
        """Delete the agent with everything it started: its child agents first (recursively), then
        itself; each one's running turn is aborted, its background tasks killed, its waits, tasks
        and timers ended, its home and token removed (``_delete_one``). Nothing it started keeps
        running or spending. A deleted child's parent is told its task will get no answer."""
        state = self.store.agent(agent)
        line = descendants(self.store, state.agent_id)
        for member in [*line, state]:
            self._delete_one(member)
        self.host.child_deleted(state)
        self._publish_new()
        log.info("agent.deleted", agent=state.name, agent_id=state.agent_id, children=[a.name for a in line])

    def _delete_one(self, state: AgentState) -> None:
        """Abort the agent's turn, kill its background tasks (``task.resulted(cancelled)``), then
        the rest of its deletion as ``holon agent delete`` does it without a daemon
        (``deletion.delete_records``)."""
        self.abort(state.agent_id)
        killed = self.host.tasks.cancel_agent(state.agent_id, REASON)
        delete_records(self.store, state, origin="operator:daemon")
        if killed:
            log.info("agent.tasks_killed", agent=state.name, tasks=killed)

    # --- timers (DaemonPort) ----------------------------------------------------------------

    def add_timer(self, agent: str, schedule: str, *, prompt: str | None = None) -> TimerProjection:
        now = self.clock.now_us()
        timer = add_timer(self.store, agent, schedule, now_us=now, prompt=prompt, origin="operator:daemon")
        self._publish_new()  # its job is made now, not on the watcher's next pass
        return timer

    def cancel_timer(self, agent: str, timer_id: str) -> TimerProjection:
        timer = cancel_timer(self.store, agent, timer_id, origin="operator:daemon")
        self._publish_new()  # its job goes now: it cannot fire again
        return timer

    def abort(self, agent: str) -> bool:
        agent_id = self.store.agent(agent).agent_id
        run = self.host.active_run(agent_id)
        if run is None:
            return False
        self._aborting.add(agent_id)
        run.cancel()
        asyncio.get_running_loop().create_task(self._settle_abort(agent_id, run), name=f"abort:{agent_id}")
        return True

    async def _settle_abort(self, agent_id: str, run: asyncio.Task[list[TurnResult]]) -> None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run
        try:
            agent = self.store.agent(agent_id)
            if agent.current_turn_id is not None:
                settle_unfinished_turn(
                    self.store, agent, outcome="failed", reason=ABORTED_REASON, requeue=False,
                    origin="operator:daemon",
                )  # fmt: skip
        except NotFoundError:
            pass
        finally:
            self._aborting.discard(agent_id)
            self._wake(agent_id)

    # --- external events --------------------------------------------------------------------

    def external_token(self, agent: str) -> str:
        """Kept in ``<home>/run/external_tokens.json`` (mode 0600), never in the ledger."""
        return HookTokens(self.store.paths.root).token(self.store.agent(agent).agent_id)

    def rotate_external_token(self, agent: str) -> str:
        """A new capability token; the agent's old URL is refused from now on."""
        return HookTokens(self.store.paths.root).rotate(self.store.agent(agent).agent_id)

    def agent_for_token(self, token: str) -> AgentState | None:
        found = HookTokens(self.store.paths.root).agent_for(token)
        if found is None:
            return None
        try:
            return self.store.agent(found)
        except NotFoundError:
            return None

    # --- running ----------------------------------------------------------------------------

    def _may_run(self, agent_id: str) -> bool:
        """The host's gate: checked before every turn."""
        if self._draining or agent_id in self._aborting:
            return False
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

    def _runnable(self, agent: AgentState) -> bool:
        return bool(agent.pending_inputs) and not self.host.is_stalled(agent.agent_id) and self._may_run(agent.agent_id)

    def _wake(self, agent_id: str) -> None:
        self._dirty.add(agent_id)
        self._kick.set()

    def _schedule_dirty(self) -> None:
        if self._warm is not None and not self._warm.done():
            return  # the model library is still loading; the watcher comes back in poll_s
        for agent_id in list(self._dirty):
            if self.host.is_running(agent_id):
                continue  # looked at again once the run ends
            self._dirty.discard(agent_id)
            try:
                agent = self.store.agent(agent_id)
            except NotFoundError:
                continue
            if self._runnable(agent):
                self.host.schedule(agent_id)
                self._dirty.add(agent_id)

    async def _watch(self) -> None:
        """Follow the ledger head: publish notices, wake agents, keep timers in line.

        Polls every ``poll_s`` while the ledger moves or agents are in play, and backs off (doubling)
        to ``IDLE_POLL_S`` while nothing happens, so an idle daemon sleeps. This process's own
        inputs, settles and rechecks kick it at once; only appends by other processes wait longer."""
        interval = self.poll_s
        while True:
            seen = self._seen
            try:
                self._publish_new()
                self._schedule_dirty()
            except Exception as e:  # the watcher must outlive one bad read; the next pass retries
                log.error("daemon.watch_failed", error=str(e))
            self._kick.clear()
            interval = watch_interval(interval, busy=self._seen != seen or bool(self._dirty), poll_s=self.poll_s)
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._kick.wait()
            if self._kick.is_set():
                interval = self.poll_s

    def _publish_new(self) -> None:
        head = self.store.ledger.head()
        if head <= self._seen:
            return
        rows = self.store.ledger.query(
            "SELECT seq, agent_id, type, payload FROM events WHERE seq > ? ORDER BY seq LIMIT 5000", (self._seen,)
        )
        for seq, agent_id, type_, payload in rows:
            self._seen = seq
            if type_ in _WAKING:
                self._dirty.add(agent_id)
            if type_.startswith("timer.") and not self._draining:
                timer_id = json.loads(payload)["timer_id"]
                self.timers.sync(self.store.state("timer", timer_id), timer_id)  # type: ignore[arg-type]
            if type_ in ("agent.created", "agent.configured"):
                self._warm_model()  # a new agent, or one given the local model: its model warms now
            if type_ == "evolve.model_used":
                self.budgets.record_evolve(agent_id, seq, payload)
            self._notify(Notice(kind="event", agent_id=agent_id, seq=seq))

    async def _maintain(self) -> None:
        """Every ``tick_s``: wait rechecks, the day's budget reset, a slice of search indexing, and
        an evolve drain started in the background (never awaited here)."""
        day = self.budgets.today()
        while True:
            await asyncio.sleep(self.settings.tick_s)
            try:
                if self.host.tick():
                    self._kick.set()
                if self.budgets.today() != day:
                    day = self.budgets.today()
                    self._dirty.update(a.agent_id for a in self.store.agents() if a.pending_inputs)
                    self._kick.set()
                if self._owned_resolver is not None:
                    await asyncio.to_thread(self._owned_resolver.maintain)  # the local model's idle stop
                await asyncio.to_thread(self.index.catch_up, max_events=500)
                if self._embedder is not None:
                    from holon.memory.vectors import embed_pending

                    await asyncio.to_thread(embed_pending, self.index, self._embedder, limit=64)
                self.index_error = None
            except Exception as e:
                self.index_error = str(e)
                log.error("daemon.maintenance_failed", error=str(e))
            self._start_evolve()

    def _model_call(self, agent_id: str, messages: list[dict[str, Any]]) -> ModelAnswer:
        """For model-assisted extraction, from the evolve thread: the agent's own model, on the daemon's loop."""
        from holon.runtime.providers.base import ModelRequest

        assert self._loop is not None
        provider, settings = self.host.runner.resolve_provider(self.store.agent(agent_id))
        request = ModelRequest(messages=messages, settings=settings)
        future = asyncio.run_coroutine_threadsafe(provider.complete(request), self._loop)
        reply = future.result(timeout=settings.timeout_s + 30)
        return ModelAnswer(reply.content or "", model=reply.model, usage=reply.usage, cost_usd=reply.cost_usd)

    def _start_evolve(self) -> None:
        """Start draining evolve jobs in the background unless a drain is running (one at a time).

        Never awaited by the maintenance loop: a slow job (a model call for extraction may take
        the model's whole timeout) must not hold up wait rechecks, budget resets or indexing."""
        if self.evolver is None or self._draining:
            return
        if self._evolve_task is None or self._evolve_task.done():
            self._evolve_task = asyncio.create_task(self._evolve(), name="daemon:evolve")

    async def _stop_evolve(self, grace_s: float) -> None:
        """Let a running drain finish its current job (``_draining`` stops it taking another) for up
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
        if self.evolver is None or self._draining:
            return
        try:
            await asyncio.to_thread(self.evolver.drain, max_jobs=EVOLVE_JOBS_PER_TICK, stop=lambda: self._draining)
            self.evolve_error = None
        except Exception as e:  # a job's own failure is recorded on the job; this is the queue failing
            self.evolve_error = str(e)
            log.error("daemon.evolve_failed", error=str(e))

    def _make_embedder(self) -> Any:
        try:
            from holon.runtime.embedders import embedder_from_settings

            return embedder_from_settings(self.store.settings)
        except Exception as e:
            log.warning("embeddings unavailable; lexical search only", error=str(e))
            return None

    # --- timers -----------------------------------------------------------------------------

    async def _fire_timer(self, timer_id: str) -> None:
        """Record a firing (coalescing missed ones) and deliver it to the agent as an input.

        While an input of this timer is still undelivered (the agent is paused, over budget or
        busy), the firing is recorded with every due time counted as ``missed`` but adds no input:
        the agent gets one prompt however long it could not run, not one per firing."""
        timer = self.store.state("timer", timer_id)
        if not isinstance(timer, TimerProjection) or timer.status != "scheduled":
            return
        last, count = due_firings(timer, self.clock.now_us() + 50_000)  # APScheduler may run a hair early
        if count == 0:
            return
        queued = self._timer_input_pending(timer)
        missed = count if queued else count - 1
        nxt = next_after(timer.kind, timer.spec, last)
        key = f"timer:{timer_id}:{last}"
        note = f" ({missed} earlier firings were missed while holon was down.)" if missed else ""
        text = (timer.prompt or f"Timer {timer_id} fired.") + note
        inputs = input_events(
            self.store, timer.agent_id, text, origin=f"timer:{timer_id}", authority="timer", sender="timer",
            channel="timer", wakes=("timer", timer_id),
        )  # fmt: skip
        if queued:
            inputs = inputs[:-1]  # only the waits it resolves; the queued input carries the prompt
        keyed = [
            NewEvent(e.agent_id, e.payload, origin=e.origin, authority=e.authority, idempotency_key=f"{key}:{i}")
            for i, e in enumerate(inputs)
        ]
        try:
            self.store.append(
                NewEvent(timer.agent_id, ev.TimerFired(timer_id=timer_id, scheduled_for_us=last, missed=missed, next_fire_us=nxt), origin=f"timer:{timer_id}", authority="timer", idempotency_key=key),
                *keyed,
            )  # fmt: skip
        except NotFoundError:
            return
        if queued:  # the agent is paused or out of budget: expected, not worth a warning each time
            log.info("timer.coalesced_into_queued_input", timer_id=timer_id, missed=missed)
        elif missed:
            log.warning("timer.missed_coalesced", timer_id=timer_id, missed=missed)
        self._wake(timer.agent_id)

    def _timer_input_pending(self, timer: TimerProjection) -> bool:
        """Does the agent hold an input of this timer that no turn has taken yet?"""
        try:
            pending = set(self.store.agent(timer.agent_id).pending_inputs)
        except NotFoundError:
            return False
        if not pending:
            return False
        rows = self.store.ledger.query(
            "SELECT seq FROM events WHERE agent_id = ? AND type = 'message.received' AND seq >= ? AND origin = ?",
            (timer.agent_id, min(pending), f"timer:{timer.timer_id}"),
        )
        return any(seq in pending for (seq,) in rows)

    # --- warm model path (RFC 0005) ---------------------------------------------------------

    def _warm_model(self) -> None:
        """Start the model children the home's agents will call, in the background (the API is up
        meanwhile): never for a home without agents, the local server only for agents that use it."""
        if self._owned_resolver is None or not self.settings.warm_model or self._draining:
            return
        if self._warm_models is not None and not self._warm_models.done():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # called off the loop (a thread): the next pass on the loop warms
            return
        agents = [a for a in self.store.agents() if not read_settings(a.settings).settings.diagnostic]
        if agents:
            self._warm_models = asyncio.create_task(self._owned_resolver.warm(agents), name="daemon:warm-model")

    def _model_state(self, what: str, state: str) -> None:
        """A model child is ``starting``, ``ready`` or ``failed``: a live notice to every stream."""
        if state == "starting":
            self.models_starting.add(what)
        else:
            self.models_starting.discard(what)
        self._notify(Notice(kind="model", agent_id="", text=what, state=state))

    # --- notices ----------------------------------------------------------------------------

    def _notify(self, notice: Notice) -> None:
        for wanted, queue in self._subscribers:
            if wanted is None or wanted == notice.agent_id or notice.kind == "model":
                with contextlib.suppress(asyncio.QueueFull):  # a stalled reader catches up from the ledger
                    queue.put_nowait(notice)

    def _delta(self, agent_id: str, fragment: str) -> None:
        if not self._subscribers:
            return
        # The turn's id from its projection (set when the turn started, before any model call): the
        # watcher's view lags, and a copy of it was seen a turn behind. ``seq``: the ledger head as
        # this text is written; the watcher publishes events by polling, so a stream sends the
        # events up to it first (a tool's result before the next round's text).
        turn_id = self.store.agent(agent_id).current_turn_id
        head = self.store.ledger.head()
        self._notify(Notice(kind="delta", agent_id=agent_id, seq=head, text=fragment, turn_id=turn_id))

    def _settled(self, agent_id: str, result: TurnResult) -> None:
        if self.tracer is not None:
            self.tracer.turn_settled(agent_id, result.turn_id)
        agent = self.store.agent(agent_id)
        if read_settings(agent.settings).settings.background:
            self.budgets.record(agent_id, result.usage.total_tokens, result.cost_usd)
            reason = self.budgets.exhausted(agent)
            if reason is not None:
                self.budgets.brief(agent, reason)
        self._kick.set()

    async def subscribe(self, agent_id: str | None = None) -> AsyncIterator[Notice]:  # type: ignore[override]
        queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=_QUEUE_LIMIT)
        if agent_id is not None:
            with contextlib.suppress(NotFoundError):  # a name is fine too; an unknown id may appear later
                agent_id = self.store.agent(agent_id).agent_id
        entry = (agent_id, queue)
        self._subscribers.append(entry)
        for what in sorted(self.models_starting):  # a start under way: the newcomer hears of it too
            queue.put_nowait(Notice(kind="model", agent_id="", text=what, state="starting"))
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(entry)

    # --- status -----------------------------------------------------------------------------

    def agent_status(
        self, agent: AgentState, *, waits: list[WaitProjection] | None = None,
        timers: list[TimerProjection] | None = None,
    ) -> AgentStatus:  # fmt: skip
        """One agent's state for ``status``, decided by ``holon.runtime.status.decide`` (the one
        function every view uses) from its projection and what this daemon knows live: whether a
        turn runs, whether it is held back until a retry time, whether its budget is used up.
        ``waits``/``timers``: the agent's pending waits and scheduled timers when the caller read
        them already (``status`` reads them for all agents in two queries)."""
        if waits is None:
            waits = self.store.rows("wait", agent_id=agent.agent_id, status="pending")
        if timers is None:
            timers = self.store.rows("timer", agent_id=agent.agent_id, status="scheduled")
        live = Live(running=self.host.is_running(agent.agent_id), retry_at_us=self.host.retry_at(agent.agent_id))
        return decide(
            agent, now_us=self.clock.now_us(), waits=waits, timers=timers, live=live,
            budget=lambda: self.budgets.exhausted(agent), problem=settings_problem(agent.settings, self.store.settings.model),
        )  # fmt: skip

    def _status_entry(
        self, agent: AgentState, waits: list[WaitProjection], timers: list[TimerProjection]
    ) -> dict[str, Any]:
        """``agent_status`` as JSON (``holon.runtime.status.status_entry``), with its model."""
        model = model_label(agent, self.store.settings.model.model)
        entry = status_entry(self.agent_status(agent, waits=waits, timers=timers), waits, model=model)
        entry["internal"] = is_internal(agent)  # views hide these unless asked for all
        return entry

    def _evolve_status(self) -> dict[str, Any]:
        if self.evolver is None:
            return {"enabled": False}
        queue = self.evolver.queue
        dead = [{"job": j.key, "agent_id": j.agent_id, "attempts": j.attempts, "error": j.last_error}
                for j in queue.jobs(status="dead", limit=20)]  # fmt: skip
        pending = len(self.store.rows("proposal", status="pending"))
        return {"enabled": True, "jobs": queue.counts(), "dead": dead, "error": self.evolve_error,
                "pending_proposals": pending}  # fmt: skip

    def status_key(self) -> tuple[Any, ...]:
        """What ``status`` follows, cheaply (two small queries): it changes whenever the status may
        have, but for time passing (``uptime_s``) and evolve job counts. ``holon serve`` rebuilds
        the status file (a few queries per agent) only when this changes, so an idle daemon with
        many agents sleeps instead of re-reading every agent each second."""
        cursors = tuple(self.store.ledger.query("SELECT name, seq FROM projection_cursors ORDER BY name", ()))
        return (self.store.ledger.head(), cursors, self.accepting, len(self.host.active_runs()),
                self.index_error, self.evolve_error, self.budgets.today())  # fmt: skip

    def status(self) -> dict[str, Any]:
        head = self.store.ledger.head()
        cursors = dict(self.store.ledger.query("SELECT name, seq FROM projection_cursors", ()))
        now = self.clock.now_us()
        waits: dict[str, list[WaitProjection]] = {}
        for w in self.store.rows("wait", status="pending"):
            waits.setdefault(w.agent_id, []).append(w)
        timers: dict[str, list[TimerProjection]] = {}
        for t in self.store.rows("timer", status="scheduled"):
            timers.setdefault(t.agent_id, []).append(t)
        return {
            "pid": self.pid,
            "accepting": self.accepting,
            "started_us": self.started_us,
            "uptime_s": round((now - self.started_us) / 1e6, 3) if self.started_us else 0.0,
            "ledger_head": head,
            "projection_lag": {name: head - seq for name, seq in sorted(cursors.items())},
            "index_error": self.index_error,
            "commands": {"sandbox": self.host.tasks.sandbox.mode, "warning": self.host.tasks.sandbox.warning},
            "evolve": self._evolve_status(),
            "timers": self.timers.jobs() if self.timers.scheduler.running else 0,
            "agents": [
                self._status_entry(a, waits.get(a.agent_id, []), timers.get(a.agent_id, []))
                for a in self.store.agents()
            ],
        }
