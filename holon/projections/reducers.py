"""Pure reducers: ``apply(state | None, event) -> state | None``.

No clock, I/O, randomness or settings here: time comes from ``event.ts_us``. A reducer returns
the *same object* when an event does not change its state, which lets the projector skip the
write. Reducers are total: an event that makes no sense for the state (a todo for an unknown work
item) leaves it unchanged rather than failing, because the ledger is history, not a request.

Each reducer names the events it reads as a closed sub-union of ``Payload`` (``AgentEvent``, ...),
returns early for any other event, and ends its ``match`` in ``assert_never``: adding a type to a
sub-union without handling it is a type error. ``fold`` routes events by the same sub-unions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from itertools import filterfalse
from typing import Any, assert_never

from holon.ledger import Event
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json
from holon.projections.state import (
    AgentState,
    FollowUp,
    State,
    TaskProjection,
    TimerProjection,
    Todo,
    WaitProjection,
    WaitSummary,
    WorkingMemory,
    WorkingMemoryBaseline,
    WorkItemState,
)

__all__ = [
    "AgentEvent",
    "RECENT_LIMIT",
    "REJECTED_LIMIT",
    "Reducer",
    "TaskEvent",
    "TimerEvent",
    "WaitEvent",
    "WorkItemEvent",
    "WorkingMemoryEvent",
    "apply_agent",
    "apply_baseline",
    "apply_task",
    "apply_timer",
    "apply_wait",
    "apply_work_item",
    "apply_working_memory",
    "value_digest",
]

#: How many recent files and decisions working memory keeps.
RECENT_LIMIT = 20
#: How many rejected inputs an agent's state lists.
REJECTED_LIMIT = 50

Reducer = Callable[[State | None, Event], State | None]

AgentEvent = (
    ev.AgentCreated | ev.AgentDeleted | ev.MessageReceived | ev.AgentConfigured | ev.TurnStarted | ev.TurnSettled
)
WorkingMemoryEvent = (
    ev.AgentCreated
    | ev.WorkItemOpened
    | ev.WorkItemPicked
    | ev.WorkItemCompleted
    | ev.WorkItemUpdated
    | ev.ConstraintChanged
    | ev.DecisionRecorded
    | ev.FollowUpChanged
    | ev.FileTouched
    | ev.WaitRegistered
    | ev.WaitResolved
    | ev.TurnSettled
)
WorkItemEvent = ev.WorkItemOpened | ev.WorkItemUpdated | ev.WorkItemCompleted | ev.TodoChanged | ev.WorkItemPicked
TaskEvent = ev.TaskCreated | ev.TaskStateChanged | ev.TaskResulted
WaitEvent = ev.WaitRegistered | ev.WaitResolved
TimerEvent = ev.TimerScheduled | ev.TimerFired | ev.TimerCancelled

_TURN_STATUS = {"completed": "idle", "waiting": "waiting", "failed": "failed", "interrupted": "interrupted"}


def apply_agent(state: AgentState | None, event: Event) -> AgentState | None:
    p = event.payload
    if not isinstance(p, AgentEvent):
        return state
    if isinstance(p, ev.AgentCreated):
        if state is not None:
            return state
        return AgentState(
            agent_id=event.agent_id,
            name=p.name,
            template=p.template,
            home=p.home,
            workspace=p.workspace,
            parent_id=p.parent_id,
            settings=dict(sorted(p.settings.items())),
            created_us=event.ts_us,
            last_event_us=event.ts_us,
        )
    if isinstance(p, ev.AgentDeleted):
        return None  # the row goes; the agent's events stay in the ledger
    if state is None:
        return None
    match p:
        case ev.MessageReceived():
            return state.model_copy(
                update={"pending_inputs": [*state.pending_inputs, event.seq], "last_event_us": event.ts_us}
            )
        case ev.AgentConfigured():
            merged = {**state.settings, **p.changes}
            settings = {k: v for k, v in sorted(merged.items()) if v is not None}
            return state.model_copy(update={"settings": settings, "last_event_us": event.ts_us})
        case ev.TurnStarted():
            taken = set(p.inputs)
            return state.model_copy(
                update={
                    "status": "running",
                    "last_turn_id": p.turn_id,
                    "current_turn_id": p.turn_id,
                    "current_turn_seq": event.seq,
                    "current_inputs": list(p.inputs),
                    "pending_inputs": list(filterfalse(taken.__contains__, state.pending_inputs)),
                    "last_event_us": event.ts_us,
                }
            )
        case ev.TurnSettled():
            return _settle(state, p, event)
        case _:
            assert_never(p)


def _settle(state: AgentState, p: ev.TurnSettled, event: Event) -> AgentState:
    requeue = p.requeue or p.outcome == "interrupted"
    pending = state.pending_inputs
    if requeue and p.turn_id == state.current_turn_id:
        back = [s for s in state.current_inputs if s not in pending]
        pending = [*back, *pending]
    if requeue:
        # The next turn on these inputs continues from this one: it sees the tool calls that
        # already ran instead of running them again.
        resume = state.resume_from_seq if state.resume_from_seq is not None else state.current_turn_seq
    else:
        resume = None
    return state.model_copy(
        update={
            "status": _TURN_STATUS[p.outcome],
            "turns": state.turns + 1,
            "last_turn_id": p.turn_id,
            "last_outcome": p.outcome,
            "last_error": p.reason if p.outcome in ("failed", "interrupted") else None,
            "pending_inputs": pending,
            "current_turn_id": None,
            "current_turn_seq": None,
            "current_inputs": [],
            "resume_from_seq": resume,
            "rejected_inputs": [*state.rejected_inputs, *p.rejected][-REJECTED_LIMIT:]
            if p.rejected
            else state.rejected_inputs,
            "tokens_total": state.tokens_total + p.usage.total_tokens,
            "cost_usd_total": round(state.cost_usd_total + (p.cost_usd or 0.0), 6),
            "last_event_us": event.ts_us,
        }
    )


def _push_recent(items: list[str], item: str, *, newest_first: bool) -> list[str]:
    rest = [x for x in items if x != item]
    out = [item, *rest] if newest_first else [*rest, item]
    return out[:RECENT_LIMIT] if newest_first else out[-RECENT_LIMIT:]


def _switch_to(wm: WorkingMemory, target: str) -> WorkingMemory:
    if wm.active_work_item == target:
        return wm
    stack = [w for w in wm.work_stack if w != target]
    if wm.active_work_item is not None:
        stack.append(wm.active_work_item)
    return wm.model_copy(update={"active_work_item": target, "work_stack": stack})


def _close_item(wm: WorkingMemory, item: str) -> WorkingMemory:
    """A completed or abandoned item leaves the stack; if it was active, return to the previous."""
    stack = [w for w in wm.work_stack if w != item]
    if wm.active_work_item == item:
        active = stack.pop() if stack else None
        return wm.model_copy(update={"active_work_item": active, "work_stack": stack})
    if stack != wm.work_stack:
        return wm.model_copy(update={"work_stack": stack})
    return wm


def apply_working_memory(state: WorkingMemory | None, event: Event) -> WorkingMemory | None:
    wm = state if state is not None else WorkingMemory(agent_id=event.agent_id)
    p = event.payload
    if not isinstance(p, WorkingMemoryEvent):
        return wm
    match p:
        case ev.AgentCreated():
            return wm
        case ev.WorkItemOpened():
            return _switch_to(wm, p.work_item_id) if p.activate else wm
        case ev.WorkItemPicked():
            if p.work_item_id is not None:
                return _switch_to(wm, p.work_item_id)
            if not wm.work_stack:
                return wm
            stack = list(wm.work_stack)
            previous = stack.pop()
            if wm.active_work_item is not None:
                stack.append(wm.active_work_item)
            return wm.model_copy(update={"active_work_item": previous, "work_stack": stack})
        case ev.WorkItemCompleted():
            return _close_item(wm, p.work_item_id)
        case ev.WorkItemUpdated():
            return _close_item(wm, p.work_item_id) if p.status == "abandoned" else wm
        case ev.ConstraintChanged():
            if p.op == "add" and p.text not in wm.constraints:
                return wm.model_copy(update={"constraints": [*wm.constraints, p.text]})
            if p.op == "remove" and p.text in wm.constraints:
                return wm.model_copy(update={"constraints": [c for c in wm.constraints if c != p.text]})
            return wm
        case ev.DecisionRecorded():
            decisions = _push_recent(wm.recent_decisions, p.text, newest_first=False)
            return wm.model_copy(update={"recent_decisions": decisions})
        case ev.FollowUpChanged():
            rest = [f for f in wm.follow_ups if f.id != p.follow_up_id]
            if p.op == "add":
                follow_up = FollowUp(id=p.follow_up_id, text=p.text or "", due_us=p.due_us)
                return wm.model_copy(update={"follow_ups": [*rest, follow_up]})
            return wm.model_copy(update={"follow_ups": rest}) if len(rest) != len(wm.follow_ups) else wm
        case ev.FileTouched():
            files = _push_recent(wm.recent_files, p.path, newest_first=True)
            return wm.model_copy(update={"recent_files": files})
        case ev.WaitRegistered():
            waits = [w for w in wm.waiting_on if w.wait_id != p.wait_id]
            wait = WaitSummary(wait_id=p.wait_id, on=p.on, target=p.target, recheck_at_us=p.recheck_at_us)
            return wm.model_copy(update={"waiting_on": [*waits, wait]})
        case ev.WaitResolved():
            waits = [w for w in wm.waiting_on if w.wait_id != p.wait_id]
            return wm.model_copy(update={"waiting_on": waits}) if len(waits) != len(wm.waiting_on) else wm
        case ev.TurnSettled():
            return wm.model_copy(update={"last_turn_id": p.turn_id, "last_outcome": p.outcome})
        case _:
            assert_never(p)


def apply_work_item(state: WorkItemState | None, event: Event) -> WorkItemState | None:
    p = event.payload
    if not isinstance(p, WorkItemEvent):
        return state
    if isinstance(p, ev.WorkItemOpened):
        if state is not None:
            return state
        return WorkItemState(
            work_item_id=p.work_item_id,
            agent_id=event.agent_id,
            title=p.title,
            objective=p.objective,
            delivery_target=p.delivery_target,
            plan=list(p.plan),
            constraints=list(p.constraints),
            opened_seq=event.seq,
            opened_us=event.ts_us,
            updated_us=event.ts_us,
        )
    if state is None:
        return None
    match p:
        case ev.WorkItemUpdated():
            fields = ("title", "objective", "delivery_target", "plan", "constraints", "status")
            update: dict[str, object] = {f: getattr(p, f) for f in fields if getattr(p, f) is not None}
            if not update:
                return state
            return state.model_copy(update={**update, "updated_us": event.ts_us})
        case ev.WorkItemCompleted():
            return state.model_copy(
                update={
                    "status": "completed",
                    "report": p.report,
                    "updated_us": event.ts_us,
                    "completed_us": event.ts_us,
                }
            )
        case ev.TodoChanged():
            return _apply_todo(state, p, event.ts_us)
        case ev.WorkItemPicked():
            return state  # picking changes working memory, not the item
        case _:
            assert_never(p)


def _apply_todo(state: WorkItemState, p: ev.TodoChanged, ts_us: int) -> WorkItemState:
    todos = list(state.todos)
    index = next((i for i, t in enumerate(todos) if t.id == p.todo_id), None)
    if p.op == "add" and index is None:
        todos.append(Todo(id=p.todo_id, text=p.text or "", status=p.status or "pending"))
    elif p.op == "update" and index is not None:
        old = todos[index]
        todos[index] = Todo(id=old.id, text=p.text if p.text is not None else old.text, status=p.status or old.status)
    elif p.op == "remove" and index is not None:
        del todos[index]
    else:
        return state
    return state.model_copy(update={"todos": todos, "updated_us": ts_us})


def apply_task(state: TaskProjection | None, event: Event) -> TaskProjection | None:
    p = event.payload
    if not isinstance(p, TaskEvent):
        return state
    if isinstance(p, ev.TaskCreated):
        if state is not None:
            return state
        return TaskProjection(
            task_id=p.task_id,
            agent_id=event.agent_id,
            kind=p.kind,
            title=p.title,
            spec=dict(sorted(p.spec.items())),
            created_us=event.ts_us,
            updated_us=event.ts_us,
        )
    if state is None:
        return None
    match p:
        case ev.TaskStateChanged():
            return state.model_copy(update={"state": p.state, "detail": p.detail, "updated_us": event.ts_us})
        case ev.TaskResulted():
            return state.model_copy(
                update={"state": p.state, "output": p.output, "exit_code": p.exit_code, "updated_us": event.ts_us}
            )
        case _:
            assert_never(p)


def apply_wait(state: WaitProjection | None, event: Event) -> WaitProjection | None:
    p = event.payload
    if not isinstance(p, WaitEvent):
        return state
    match p:
        case ev.WaitRegistered():
            return WaitProjection(
                wait_id=p.wait_id,
                agent_id=event.agent_id,
                on=p.on,
                target=p.target,
                recheck_at_us=p.recheck_at_us,
                reason=p.reason,
                registered_us=event.ts_us,
            )
        case ev.WaitResolved():
            if state is None:
                return None
            return state.model_copy(update={"status": p.resolution, "resolved_us": event.ts_us, "by_seq": p.by_seq})
        case _:
            assert_never(p)


def apply_timer(state: TimerProjection | None, event: Event) -> TimerProjection | None:
    p = event.payload
    if not isinstance(p, TimerEvent):
        return state
    match p:
        case ev.TimerScheduled():
            return TimerProjection(
                timer_id=p.timer_id,
                agent_id=event.agent_id,
                kind=p.kind,
                spec=p.spec,
                prompt=p.prompt,
                next_fire_us=p.next_fire_us,
            )
        case ev.TimerFired():
            if state is None:
                return None
            done = state.kind == "once" or p.next_fire_us is None
            return state.model_copy(
                update={
                    "status": "done" if done else state.status,
                    "next_fire_us": None if done else p.next_fire_us,
                    "fired": state.fired + 1,
                    "missed": state.missed + p.missed,
                    "last_fired_us": event.ts_us,
                }
            )
        case ev.TimerCancelled():
            if state is None:
                return None
            return state.model_copy(update={"status": "cancelled", "next_fire_us": None})
        case _:
            assert_never(p)


def apply_baseline(state: WorkingMemoryBaseline | None, event: Event) -> WorkingMemoryBaseline | None:
    p = event.payload
    if isinstance(p, ev.WorkingMemoryDelta):
        base = state.digests if state is not None else {}
        changed = {k: value_digest(v) for k, v in p.changes.items()}
        return WorkingMemoryBaseline(agent_id=event.agent_id, digests=dict(sorted({**base, **changed}.items())))
    return state


def value_digest(value: Any) -> str:
    """A short digest of a JSON value, enough to tell whether a working-memory field changed."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:16]
