"""The agent host: runs turns for many agents in one asyncio loop.

* Turns of one agent run one at a time (a lock per agent); different agents run concurrently.
* Inputs are ledger events before anything acts on them (``submit``), so an acknowledged input is
  never lost: at worst it is still pending after a crash, and recovery re-queues a half-done turn.
* Background tasks and child agents report back as inputs that also resolve the waits on them;
  ``tick`` wakes agents whose waits reached their recheck time.
* No agent stalls while inputs are queued and nothing is wrong: after a turn that completed, or
  failed and rejected its inputs, the next turn runs at once. Only a failure that re-queues its
  inputs (a transient model failure, or no usable model: none configured, key variable unset)
  holds the agent back, until ``tick`` finds its retry time (a backoff that doubles per failure in
  a row, ``RETRY_BASE_S`` up to ``RETRY_MAX_S``, with jitter) or a new input arrives. The log
  notes the first failure and each change of cause, not every retry.
* One host per home: ``start`` takes an exclusive lock on ``<home>/run/host.lock`` and runs
  recovery, which is only safe when no other process is running turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from holon.clock import Clock
from holon.errors import ConflictError, FencedOut, NotFoundError, StorageUnavailable, TurnAlreadySettled
from holon.ids import new_id
from holon.ledger import Event, NewEvent, Transaction
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import AgentState, TaskProjection
from holon.runtime.agents import create_agent
from holon.runtime.ingress import InputSpec, deliver_input
from holon.runtime.inputs import input_events, wakes_of
from holon.runtime.providers.retry import RetryPolicy
from holon.runtime.recovery import RecoveryReport, interrupted_task_input, recover
from holon.runtime.sandbox import harden_process
from holon.runtime.settings import read_settings
from holon.runtime.tasks import TaskManager
from holon.runtime.tools.services import TaskServices

if TYPE_CHECKING:
    from holon.runtime.tools import ToolRegistry
    from holon.runtime.turn import ProviderResolver, TurnLimits, TurnObserver, TurnResult, TurnRunner

__all__ = ["RETRY_BASE_S", "RETRY_MAX_S", "AgentHost", "retry_delay"]

log = get_logger("holon.host")

#: First delay before an agent whose turn failed transiently (inputs re-queued) runs again.
RETRY_BASE_S = 5.0
#: Longest such delay.
RETRY_MAX_S = 300.0


def retry_delay(failures: int, jitter: float) -> float:
    """Seconds before retry number ``failures`` (1, 2, ...): doubling from ``RETRY_BASE_S``, capped
    at ``RETRY_MAX_S``, then spread over its upper half by ``jitter`` in [0, 1) so agents that failed
    together (one provider down) do not retry in lockstep."""
    cap = min(RETRY_BASE_S * 2 ** min(failures - 1, 32), RETRY_MAX_S)
    return cap * (0.5 + 0.5 * min(max(jitter, 0.0), 1.0))


class AgentHost:
    def __init__(
        self,
        store: Store,
        resolve_provider: ProviderResolver,
        *,
        clock: Clock,
        registry: ToolRegistry | None = None,
        limits: TurnLimits | None = None,
        retry: RetryPolicy | None = None,
        observer: TurnObserver | None = None,
        sleep: Callable[[float], Any] | None = None,
        gate: Callable[[str], bool] | None = None,
        wake: Callable[[str], None] | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.jitter = jitter
        """A number in [0, 1) that spreads retry delays (tests pass a constant)."""
        self.gate = gate
        """May this agent run a turn now? (The daemon's pause and daily budgets.) ``None``: always."""
        self.wake = wake
        """Called by ``tick`` for an agent whose retry time came (the daemon's scheduler); ``None``:
        ``schedule`` it here."""
        self.on_fenced: Callable[[str], None] | None = None
        """Called when a turn of the agent stops on ``FencedOut`` (a node of a cluster: it gives the
        agent up, so that whoever takes the lease next, with a new token, settles that turn)."""
        self.clock = clock
        self.tasks = TaskManager.for_store(store, clock, on_done=self._task_done)
        self.services = TaskServices(self.tasks, spawn=self.spawn_child)
        """What this host's tools may ask of it (``ToolServices``)."""
        self._runner_args = (registry, resolve_provider, limits, retry, observer, sleep)
        self._runner: TurnRunner | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._runs: dict[str, asyncio.Task[list[TurnResult]]] = {}
        self._stalled: dict[str, int] = {}
        """Agents held back after a transient failure: the clock time (µs) they may run again."""
        self._failures: dict[str, int] = {}
        self._interrupted: set[str] = set()
        """Agents whose turn met a lost database: their next run recovers that turn first."""
        """Transient failures in a row, per agent (the backoff's exponent)."""
        self._fail_reason: dict[str, str | None] = {}
        """The reason of each held-back agent's last failure: logged when it first comes or changes."""
        self._lock_file: TextIO | None = None
        self.finished: list[TurnResult] = []
        """Every turn this host ran, in the order they settled."""

    @property
    def runner(self) -> TurnRunner:
        """The turn runner, made (and the turn machinery imported) for the first turn: a daemon
        takes input before it has loaded context assembly and the tools (RFC 0005)."""
        if self._runner is None:
            from holon.runtime.tools import builtin_registry
            from holon.runtime.turn import TurnRunner

            registry, resolve_provider, limits, retry, observer, sleep = self._runner_args
            self._runner = TurnRunner(
                self.store, registry or builtin_registry(), resolve_provider, clock=self.clock,
                services=self.services, limits=limits, retry=retry, observer=observer, sleep=sleep,
            )  # fmt: skip
        return self._runner

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, *, recover_all: bool = True) -> RecoveryReport:
        """Take the home's host lock and recover what a previous process left half-done
        (``recover_all=False``: nothing now; a node of several recovers each agent as it takes
        its lease, ``holon.daemon.cluster``)."""
        run_dir = self.store.paths.root / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        fh = (run_dir / "host.lock").open("a+", encoding="utf-8")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            fh.close()
            raise ConflictError(f"another holon process (pid {owner}) is running agents in this home") from e
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_file = fh
        harden_process()  # commands of the same user cannot read this process's environment
        if (warning := self.tasks.sandbox.warning) is not None:
            log.warning("commands unconfined", reason=warning)
        report = recover(self.store) if recover_all else RecoveryReport()
        if report.turns or report.tasks:
            log.warning("recovered", turns=report.turns, tool_calls=report.tool_calls, tasks=report.tasks)
        return report

    async def close(self) -> None:
        for run in list(self._runs.values()):
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
        for task_id in await self.tasks.shutdown():
            self._report_interrupted(task_id)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _report_interrupted(self, task_id: str) -> None:
        """Tell the agent that a task the shutdown killed was interrupted, as recovery would after a
        crash; the input waits in the ledger for the next start (nothing is scheduled now)."""
        task = self.store.task(task_id)
        if not isinstance(task, TaskProjection):
            return
        output = self.store.ledger.resolve(task.output)
        body = output if isinstance(output, str) or output is None else (output.text or output.preview)
        tail = "\n".join((body or "").splitlines()[-40:])
        note = "holon stopped while the task was running; its process was stopped."
        self.store.append(*interrupted_task_input(self.store, task, note, tail=tail))

    # --- inputs -----------------------------------------------------------------------------

    def submit(self, agent_ref: str, spec: InputSpec | str, **fields: Any) -> Event:
        """Record an input for an agent (durable before this returns). Returns its event.

        ``spec``: the input (``InputSpec``), or its text with the other fields by keyword
        (``host.submit("alice", "hi", authority="external")``).

        The input resolves the waits it answers, judged by its authority: an operator's input the
        agent's ``operator`` waits, an external event its ``external`` waits (only those on
        ``event`` when the event is named; an unnamed event answers any of them). With an
        ``idempotency_key`` a retry returns the first call's event (``holon.runtime.ingress``)."""
        if isinstance(spec, str):
            spec = InputSpec(spec, **fields)
        elif fields:
            raise TypeError("submit takes an InputSpec or a text with keyword fields, not both")
        return self.deliver(agent_ref, spec)

    def deliver(self, agent_ref: str, spec: InputSpec, tx: Transaction | None = None) -> Event:
        """``submit``'s work, inside ``tx`` when given (the daemon's group commit), else in a
        transaction of its own. Safe to run again after a rollback."""
        agent = self.store.agent(agent_ref)
        stored, _ = deliver_input(
            self.store,
            agent.agent_id,
            spec.text,
            origin=spec.origin,
            authority=spec.authority,
            sender=spec.sender,
            channel=spec.channel,
            wakes=wakes_of(spec.authority, spec.event),
            idempotency_key=spec.idempotency_key,
            tx=tx,
        )
        self._stalled.pop(agent.agent_id, None)
        return stored

    # --- running turns ----------------------------------------------------------------------

    async def run_agent(self, agent_id: str) -> list[TurnResult]:
        """Run turns for one agent until it has no pending input (or a turn fails and re-queues)."""
        lock = self._locks.setdefault(agent_id, asyncio.Lock())
        results: list[TurnResult] = []
        async with lock:
            while self.may_run(agent_id):
                try:
                    if agent_id in self._interrupted:  # its last turn met a lost database
                        recover(self.store, agents={agent_id}, tasks=False)  # settled interrupted, inputs re-queued
                        self._interrupted.discard(agent_id)
                    result = await self.runner.run(agent_id)
                except FencedOut as e:  # another node owns the agent now (or will): it settles the turn
                    log.warning("turn fenced out", agent_id=agent_id, reason=e.message)
                    if self.on_fenced is not None:
                        self.on_fenced(agent_id)
                    break
                except StorageUnavailable as e:
                    self._storage_lost(agent_id, e)
                    break
                except TurnAlreadySettled as e:  # recovery settled it, its inputs re-queued: a later run answers
                    log.error("turn settled twice refused", agent_id=agent_id, turn_id=e.turn_id, reason=e.message)
                    break
                if result is None:
                    break
                results.append(result)
                self.finished.append(result)
                await self._after_turn(agent_id, result)
                if self._hold_back(agent_id, result):
                    break
        return results

    def _storage_lost(self, agent_id: str, e: StorageUnavailable) -> None:
        """The database was lost under a turn (RFC 0008 section 6): the turn fails retryably. Held
        back with the failure backoff; its next run first settles the unsettled turn
        ``interrupted`` (``recover``, as after a crash), which re-queues its inputs, then runs."""
        self._interrupted.add(agent_id)
        n = self._failures[agent_id] = self._failures.get(agent_id, 0) + 1
        delay = retry_delay(n, self.jitter())
        self._stalled[agent_id] = self.clock.now_us() + int(delay * 1_000_000)
        reason = f"storage unavailable: {e.message}"
        if self._fail_reason.get(agent_id) != reason:
            self._fail_reason[agent_id] = reason
            log.warning("agent held back after a failure", agent_id=agent_id, reason=reason, retry_in_s=round(delay, 1))

    def _hold_back(self, agent_id: str, result: TurnResult) -> bool:
        """After a transient failure (inputs re-queued), hold the agent back for a backoff: retrying
        at once would spin. Any other settle lets the next turn run at once."""
        requeued = result.outcome == "failed" and result.requeued
        if not requeued:
            self._failures.pop(agent_id, None)
            if self._fail_reason.pop(agent_id, None) is not None:
                log.info("agent recovered", agent_id=agent_id)
            return False
        n = self._failures[agent_id] = self._failures.get(agent_id, 0) + 1
        delay = retry_delay(n, self.jitter())
        self._stalled[agent_id] = self.clock.now_us() + int(delay * 1_000_000)
        if self._fail_reason.get(agent_id) != result.reason:
            # The first failure and each change of cause; retries for the same cause stay quiet.
            self._fail_reason[agent_id] = result.reason
            log.warning(
                "agent held back after a failure", agent_id=agent_id, reason=result.reason, retry_in_s=round(delay, 1)
            )
        return True

    def may_run(self, agent_id: str) -> bool:
        return self.gate is None or self.gate(agent_id)

    def is_running(self, agent_id: str) -> bool:
        run = self._runs.get(agent_id)
        return run is not None and not run.done()

    def is_stalled(self, agent_id: str) -> bool:
        """A transient failure re-queued its inputs; it runs again at its retry time (``tick``), on
        its next input or on a wait recheck."""
        return agent_id in self._stalled

    def retry_at(self, agent_id: str) -> int | None:
        """When an agent held back after a transient failure runs again (clock µs), else None."""
        return self._stalled.get(agent_id)

    def is_failing(self, agent_id: str) -> bool:
        """Its last turn failed transiently and no turn has settled well since (held back, or its
        retry about to start)."""
        return agent_id in self._fail_reason

    def held_back(self) -> tuple[tuple[str, int | None], ...]:
        """Every failing agent and its retry time (``None``: retrying now), for status keys."""
        return tuple(sorted((a, self._stalled.get(a)) for a in self._fail_reason))

    def active_runs(self) -> list[asyncio.Task[list[TurnResult]]]:
        return [run for run in self._runs.values() if not run.done()]

    def active_run(self, agent_id: str) -> asyncio.Task[list[TurnResult]] | None:
        run = self._runs.get(agent_id)
        return run if run is not None and not run.done() else None

    def schedule(self, agent_id: str) -> None:
        """Run the agent's pending turns in the background (no-op if already running or gated)."""
        if self.is_running(agent_id) or not self.may_run(agent_id):
            return
        task = asyncio.create_task(self.run_agent(agent_id), name=f"agent:{agent_id}")
        self._runs[agent_id] = task
        task.add_done_callback(self._run_done)

    def _run_done(self, task: asyncio.Task[list[TurnResult]]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("agent run failed", error=str(task.exception()), task=task.get_name())

    async def run_until_idle(self, *, timeout_s: float | None = None) -> None:
        """Run every agent with pending inputs, and whatever they start, until all is quiet."""
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        while True:
            self.tick()
            for agent in self.store.agents():
                if agent.pending_inputs and agent.agent_id not in self._stalled and self.may_run(agent.agent_id):
                    self.schedule(agent.agent_id)
            active = [t for t in self._runs.values() if not t.done()]
            if not active and not self.tasks.running:
                return
            if deadline is not None and asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("agents still busy when the time ran out")
            if active:
                await asyncio.wait(active, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(0.02)

    def tick(self) -> int:
        """Wake agents whose waits reached their recheck time, and let agents held back after a
        transient failure run again once their retry time came. Returns how many were woken."""
        now = self.clock.now_us()
        woken = 0
        for agent_id, retry_at in list(self._stalled.items()):
            if retry_at <= now:
                if agent_id in self._interrupted and not self.may_run(agent_id):
                    # gated for now (a node renewing its lease after the outage): nothing else would
                    # wake it, since its unsettled turn keeps it from being runnable; look again soon
                    self._stalled[agent_id] = now + 1_000_000
                    continue
                del self._stalled[agent_id]
                if self.wake is not None and agent_id not in self._interrupted:  # a wake sees a turn in flight
                    self.wake(agent_id)
                else:
                    self.schedule(agent_id)
                woken += 1
        for wait in self.store.waits(status="pending"):
            if wait.recheck_at_us > now:
                continue
            what = f"{wait.on} {wait.target}" if wait.target else wait.on
            text = (
                f"Recheck: you were waiting on {what}" + (f" ({wait.reason})" if wait.reason else "")
                + ". Nothing has resolved it yet; look again and decide what to do."
            )  # fmt: skip
            self.store.append(
                NewEvent(wait.agent_id, ev.WaitResolved(wait_id=wait.wait_id, resolution="recheck"), origin="timer:wait", authority="timer"),
                NewEvent(wait.agent_id, ev.MessageReceived(text=text, sender="timer", channel="timer"), origin=f"timer:{wait.wait_id}", authority="timer"),
            )  # fmt: skip
            self._stalled.pop(wait.agent_id, None)
            woken += 1
        return woken

    # --- tasks and child agents -------------------------------------------------------------

    async def _task_done(self, agent_id: str, task_id: str) -> None:
        task = self.store.task(task_id)
        state = getattr(task, "state", "?")
        output = self.store.ledger.resolve(getattr(task, "output", None))
        body = output if isinstance(output, str) or output is None else (output.text or output.preview)
        tail = "\n".join((body or "").splitlines()[-40:])
        text = (
            f"Background task {task_id} ({getattr(task, 'title', '')}) ended: {state}, exit code "
            f"{getattr(task, 'exit_code', None)}.\nLast lines of its output:\n{tail}"
        )
        self._deliver_task_result(agent_id, task_id, text)

    def _deliver_task_result(self, agent_id: str, task_id: str, text: str) -> None:
        events = input_events(
            self.store, agent_id, text, origin=f"task:{task_id}", authority="tool", sender="task", channel="task",
            wakes=("task", task_id), task_id=task_id,
        )  # fmt: skip
        self.store.append(*events)
        self._stalled.pop(agent_id, None)
        self.schedule(agent_id)

    # --- child agents (the ``spawn`` of this host's ``TaskServices``) ------------------------

    async def spawn_child(self, parent_id: str, task_text: str, name: str | None, template: str) -> tuple[str, str]:
        parent = self.store.agent(parent_id)
        child_name = name or f"{parent.name}-child-{new_id('c')[-6:]}"
        task_id = new_id("task")
        workspace = _child_workspace(parent, self.store.paths.agent_home(child_name))
        child = create_agent(
            self.store,
            child_name,
            template=template,
            origin=f"agent:{parent_id}",
            settings={**read_settings(parent.settings).settings.as_dict(), "parent_task_id": task_id},
            workspace=workspace,
            parent_id=parent_id,
            internal=True,
        )
        self.store.append(
            NewEvent(parent_id, ev.TaskCreated(task_id=task_id, kind="child_agent", title=task_text[:200], spec={"child_agent_id": child.agent_id, "child": child.name}), origin=f"agent:{parent_id}", authority="agent", task_id=task_id),
            NewEvent(parent_id, ev.TaskStateChanged(task_id=task_id, state="running", detail=f"child agent {child.name}"), origin="runtime:host", task_id=task_id),
            NewEvent(child.agent_id, ev.MessageReceived(text=task_text, sender=parent.name, channel="parent"), origin=f"agent:{parent_id}", authority="agent", task_id=task_id),
        )  # fmt: skip
        self.schedule(child.agent_id)
        return child.name, task_id

    def child_deleted(self, child: AgentState) -> None:
        """The operator deleted a child agent before it answered: its parent's task on it ends
        ``cancelled`` and the parent is told, as with any task result (its waits on it resolve)."""
        task_id = read_settings(child.settings).settings.parent_task_id
        if child.parent_id is None or task_id is None:
            return
        if getattr(self.store.task(task_id), "state", None) != "running":
            return
        try:
            self.store.agent(child.parent_id)
        except NotFoundError:  # deleted too: nobody to tell
            return
        self.store.append(
            NewEvent(child.parent_id, ev.TaskResulted(task_id=task_id, state="cancelled", output="the child agent was deleted by the operator"), origin="runtime:host", authority="runtime", task_id=task_id)
        )  # fmt: skip
        text = f"Child agent {child.name} (task {task_id}) was deleted by the operator before it finished; no answer will come."
        self._deliver_task_result(child.parent_id, task_id, text)

    async def _after_turn(self, agent_id: str, result: TurnResult) -> None:
        """A child agent's settled turn answers its parent's task."""
        if result.outcome not in ("completed", "failed"):
            return
        agent = self.store.agent(agent_id)
        task_id = read_settings(agent.settings).settings.parent_task_id
        if agent.parent_id is None or task_id is None:
            return
        task = self.store.task(task_id)
        if task is None or getattr(task, "state", None) != "running":
            return
        answer = result.reply if result.outcome == "completed" else f"the child agent failed: {result.reason}"
        state: Literal["succeeded", "failed"] = "succeeded" if result.outcome == "completed" else "failed"
        self.store.append(
            NewEvent(agent.parent_id, ev.TaskResulted(task_id=task_id, state=state, output=answer or ""), origin=f"agent:{agent_id}", authority="agent", task_id=task_id)
        )  # fmt: skip
        text = f"Child agent {agent.name} finished task {task_id} ({state}). Its answer:\n{answer or ''}"
        self._deliver_task_result(agent.parent_id, task_id, text)


def _child_workspace(parent: AgentState, child_home: Path) -> str | None:
    """A git worktree of the parent's workspace when it is a git repository; else the child's home."""
    workspace = Path(parent.workspace or parent.home)
    probe = subprocess.run(
        ["git", "-C", str(workspace), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0 or probe.stdout.strip() != "true":
        return None
    target = child_home.parent / f".{child_home.name}-worktree"
    made = subprocess.run(
        ["git", "-C", str(workspace), "worktree", "add", "--detach", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        log.warning("git worktree failed; the child works in its home", error=made.stderr.strip()[:300])
        return None
    return str(target)
