"""Crash recovery: settle what a dead process left half-done, so nothing is lost or silently re-run.

Run once when a host starts (and only by the one host that holds the home's lock):

* a turn that started but never settled gets ``turn.settled(interrupted)``, which re-queues its
  inputs; the next turn sees the interrupted turn's recorded rounds and a note;
* unless its final answer is already recorded (a ``model.responded`` without tool calls or error,
  written by a holon that committed it apart from the settle): that turn is settled
  ``completed`` with that reply, and the model is not asked again (exactly-once answers);
* a ``tool.called`` without a ``tool.resulted`` gets a result with status ``interrupted``: the
  call may have had effects, so it is reported, never re-run automatically;
* a command the dead process started (``command.started``: foreground in the unsettled turn, or a
  background task still marked running) is stopped if that very process still runs; a background
  task gets ``task.resulted``: its real result (state and exit code, from the files its runner
  leaves under ``<home>/tasks/<task_id>/``) when it finished while holon was dead, else
  ``interrupted``; and its agent gets that result as an input, like any task result.
  (A graceful stop kills its tasks itself and sends the same input, ``interrupted_task_input``,
  before it exits.)
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState, TaskProjection
from holon.runtime.inputs import input_events
from holon.runtime.tasks import finished_result, remove_task_files, stop_orphan
from holon.runtime.turn import rejection_brief

_PROCESS = re.compile(r"process (\d+:\d+:[\w-]+)")

__all__ = ["RecoveryReport", "interrupted_task_input", "recover", "reject_unstarted", "settle_unfinished_turn"]

INTERRUPTED_TOOL = (
    "interrupted: holon stopped while this tool call was running. It may have had effects (files "
    "written, commands started). Check the current state before running it again."
)


@dataclass
class RecoveryReport:
    turns: list[str] = field(default_factory=list)
    tool_calls: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)


def _recover_turn(store: Store, agent: AgentState, report: RecoveryReport) -> None:
    report.tool_calls += settle_unfinished_turn(store, agent)
    assert agent.current_turn_id is not None
    report.turns.append(agent.current_turn_id)


def settle_unfinished_turn(
    store: Store,
    agent: AgentState,
    *,
    outcome: ev.TurnOutcome = "interrupted",
    reason: str | None = None,
    requeue: bool = True,
    origin: str = "runtime:recovery",
) -> list[str]:
    """Settle the agent's unsettled turn (nothing runs it any more): in-flight tool calls get an
    ``interrupted`` result, the turn a ``turn.settled``. Returns the interrupted call ids.

    Recovery uses the defaults (re-queue the inputs); an operator's abort settles it ``failed``
    without re-queueing, its inputs ``rejected`` with the reason. A turn whose final answer is
    already recorded is settled ``completed`` with it, whatever the caller asked."""
    assert agent.current_turn_id is not None and agent.current_turn_seq is not None
    turn_id = agent.current_turn_id
    events = list(store.ledger.read(agent.current_turn_seq - 1, agent_id=agent.agent_id))
    answered = _answered(events, turn_id)
    if answered is not None:
        store.append(NewEvent(agent.agent_id, answered, origin=origin, authority="runtime", turn_id=turn_id))
        return []
    called: dict[str, ev.ToolCalled] = {}
    resulted: set[str] = set()
    phase = "before its first model call"
    for e in events:
        p = e.payload
        if isinstance(p, ev.ToolCalled):
            called[p.call_id] = p
        elif isinstance(p, ev.ToolResulted):
            resulted.add(p.call_id)
        if isinstance(p, ev.ModelRequested):
            phase = "during a model call"
        elif isinstance(p, ev.ModelResponded | ev.ToolCalled | ev.ToolResulted):
            phase = "between tool calls"
    in_flight = [c for cid, c in called.items() if cid not in resulted]
    out = []
    for c in in_flight:
        phase = f"during tool call {c.tool} ({c.call_id})"
        out.append(
            NewEvent(
                agent.agent_id,
                ev.ToolResulted(call_id=c.call_id, tool=c.tool, status="interrupted", output=INTERRUPTED_TOOL),
                origin=origin,
                authority="runtime",
                turn_id=turn_id,
            )
        )
    why = reason or f"holon stopped {phase}"
    rejected = list(agent.current_inputs) if not requeue and outcome == "failed" else []
    settled: list[ev.Payload] = [
        ev.TurnSettled(turn_id=turn_id, outcome=outcome, reason=why, requeue=requeue, rejected=rejected)
    ]
    if rejected:
        settled.append(rejection_brief(rejected, why))
    out += [NewEvent(agent.agent_id, p, origin=origin, authority="runtime", turn_id=turn_id) for p in settled]
    store.append(*out)
    return [c.call_id for c in in_flight]


def reject_unstarted(store: Store, agent: AgentState, *, reason: str, origin: str) -> None:
    """A run cancelled by the operator before its turn started (the turn waited for its model
    process to start, to learn the model's window): the inputs it would have taken (the oldest,
    at most ``max_inputs_per_turn``) get the turn it never started, settled ``failed`` with them
    rejected, as an abort a moment later would have settled it. Nothing pending: nothing to do."""
    inputs = list(agent.pending_inputs)[: store.settings.runtime.max_inputs_per_turn]
    if not inputs:
        return
    turn_id = new_id("turn")
    started = ev.TurnStarted(turn_id=turn_id, inputs=inputs, node=store.settings.node.name or None)
    store.append(NewEvent(agent.agent_id, started, origin=origin, authority="runtime", turn_id=turn_id))
    fresh = store.agent(agent.agent_id)
    settle_unfinished_turn(store, fresh, outcome="failed", reason=reason, requeue=False, origin=origin)


def _answered(events: list[Event], turn_id: str) -> ev.TurnSettled | None:
    """The settle of a turn whose last model round is a final answer already recorded, or ``None``.

    Only a ``model.responded`` of this turn with no tool calls and no error, after which nothing
    but its own bookkeeping happened, is a final answer: the turn's rounds, tool calls and usage
    are summed from its events, as the runner would have settled it."""
    rounds = [e.payload for e in events if isinstance(e.payload, ev.ModelResponded) and e.payload.turn_id == turn_id]
    if not rounds:
        return None
    last = rounds[-1]
    if last.error or last.tool_calls:
        return None
    # Nothing of this turn after the answer (a later model.requested would mean it went on).
    after = [e for e in events if e.turn_id == turn_id and isinstance(e.payload, ev.ModelRequested | ev.ToolCalled)]
    if after and after[-1].seq > max(e.seq for e in events if e.payload is last):
        return None
    ok = [r for r in rounds if not r.error]
    usage = ev.Usage(
        prompt_tokens=sum(r.usage.prompt_tokens for r in ok),
        completion_tokens=sum(r.usage.completion_tokens for r in ok),
        total_tokens=sum(r.usage.total_tokens for r in ok),
        cached_tokens=sum(r.usage.cached_tokens for r in ok),
    )
    costs = [r.cost_usd for r in ok if r.cost_usd is not None]
    return ev.TurnSettled(
        turn_id=turn_id,
        outcome="completed",
        reason="recovered: the final answer was recorded before holon stopped",
        rounds=len(rounds),
        tool_calls=sum(1 for e in events if isinstance(e.payload, ev.ToolCalled) and e.turn_id == turn_id),
        reply=last.content if last.content is not None else "",
        usage=usage,
        cost_usd=round(sum(costs), 8) if costs else None,
    )


def interrupted_task_input(store: Store, task: TaskProjection, note: str, *, tail: str = "") -> list[NewEvent]:
    """The input that tells an agent its task was interrupted (resolving its waits on the task).

    The same after a crash (recovery, here) and after a graceful stop (``AgentHost.close``), so an
    agent reads one message whichever way holon went down; ``tail`` adds the last output lines
    when they are known."""
    text = f"Task {task.task_id} ({task.title}) ended: interrupted. {note}"
    if tail:
        text += f"\nLast lines of its output:\n{tail}"
    return input_events(
        store, task.agent_id, text, origin=f"task:{task.task_id}", authority="tool", sender="task",
        channel="task", wakes=("task", task.task_id), task_id=task.task_id,
    )  # fmt: skip


def _task_input(store: Store, task: TaskProjection, output: str) -> list[NewEvent]:
    result = NewEvent(
        task.agent_id,
        ev.TaskResulted(task_id=task.task_id, state="interrupted", output=output),
        origin="runtime:recovery",
        authority="runtime",
        task_id=task.task_id,
    )
    return [result, *interrupted_task_input(store, task, output)]


def _stop_turn_commands(store: Store, agent: AgentState) -> None:
    """Stop the commands the agent's unsettled turn started (a foreground ``run_command`` has no
    task, only its ``command.started``) and drop their files; their tool calls are reported
    interrupted with the turn."""
    assert agent.current_turn_seq is not None
    for e in store.ledger.read(agent.current_turn_seq - 1, agent_id=agent.agent_id):
        if isinstance(e.payload, ev.CommandStarted) and store.task(e.payload.task_id) is None:
            if e.payload.process:
                stop_orphan(e.payload.process)
            remove_task_files(store.paths.root / "tasks", e.payload.task_id)


def _finished_task(store: Store, task: TaskProjection, code: int, output: str) -> list[NewEvent]:
    """A background task that ended while holon was dead: its real result, and the input telling its agent."""
    state: Literal["succeeded", "failed"] = "succeeded" if code == 0 else "failed"
    result = NewEvent(
        task.agent_id,
        ev.TaskResulted(task_id=task.task_id, state=state, output=output, exit_code=code),
        origin="runtime:recovery",
        authority="runtime",
        task_id=task.task_id,
    )
    tail = "\n".join(output.splitlines()[-40:])
    text = (
        f"Background task {task.task_id} ({task.title}) ended: {state}, exit code {code} "
        f"(it finished while holon was stopped).\nLast lines of its output:\n{tail}"
    )
    return [result, *input_events(
        store, task.agent_id, text, origin=f"task:{task.task_id}", authority="tool", sender="task",
        channel="task", wakes=("task", task.task_id), task_id=task.task_id,
    )]  # fmt: skip


def recover(store: Store, *, agents: Collection[str] | None = None, tasks: bool = True) -> RecoveryReport:
    """Settle what a process that stopped (crashed, killed) left half-done: every agent's unsettled
    turn (``interrupted``, inputs re-queued) and background tasks. ``agents``: only theirs (a node
    taking agents over from a dead one recovers each as it takes it, RFC 0008). ``tasks=False``:
    the turn only (a turn that met a lost database, while this process's tasks still run)."""
    report = RecoveryReport()
    for agent in store.agents():
        if agents is not None and agent.agent_id not in agents:
            continue
        if agent.current_turn_id is not None:
            _stop_turn_commands(store, agent)
            _recover_turn(store, agent, report)
    for task in store.tasks(status="running") + store.tasks(status="pending") if tasks else []:
        if agents is not None and task.agent_id not in agents:
            continue
        if task.kind == "child_agent":
            continue  # a child agent's task ends when the child's turn does; the child is recovered above
        # Commands run in a session of their own and outlive a killed holon: stop the very process
        # recorded at start (pid, start time and boot id must all match, so a reused pid is safe).
        found = _PROCESS.search(task.detail or "")
        stopped = stop_orphan(found.group(1)) if found else False
        tasks_dir = store.paths.root / "tasks"
        done = None if stopped else finished_result(tasks_dir, task.task_id)
        if done is not None:
            store.append(*_finished_task(store, task, *done))
        else:
            what = "its leftover processes were stopped" if stopped else "its process had already ended"
            store.append(*_task_input(store, task, f"holon stopped while the task was running; {what}."))
        remove_task_files(tasks_dir, task.task_id)
        report.tasks.append(task.task_id)
    return report
