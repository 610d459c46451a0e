"""Folding events into projection states: routing, the fold itself, views and derivations.

``fold(states, events)`` is the whole projector as a pure function over a mapping from
``(kind, key)`` to state. The live projector passes a mapping that loads rows on demand; replay
and the property tests pass a plain dict. Either way the same reducers see the same events in the
same order, so ``fold(fold({}, prefix), suffix) == fold({}, prefix + suffix)``.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from holon.ledger import Event, NewEvent
from holon.ledger.codec import canonical_json
from holon.ledger import events as ev
from holon.projections import reducers as r
from holon.projections.state import (
    AgentState,
    State,
    TaskProjection,
    TimerProjection,
    WaitProjection,
    WorkingMemory,
    WorkingMemoryBaseline,
    WorkItemState,
)

__all__ = [
    "KINDS",
    "Key",
    "Kind",
    "derive",
    "fold",
    "fold_event",
    "routes",
    "row_columns",
    "state_json",
    "working_memory_view",
]

Key = tuple[str, str]
"""(kind, key) of one projection row."""


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    model: type[State]
    reducer: r.Reducer


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("agent", AgentState, r.apply_agent),  # type: ignore[arg-type]
        Kind("working_memory", WorkingMemory, r.apply_working_memory),  # type: ignore[arg-type]
        Kind("wm_baseline", WorkingMemoryBaseline, r.apply_baseline),  # type: ignore[arg-type]
        Kind("work_item", WorkItemState, r.apply_work_item),  # type: ignore[arg-type]
        Kind("task", TaskProjection, r.apply_task),  # type: ignore[arg-type]
        Kind("wait", WaitProjection, r.apply_wait),  # type: ignore[arg-type]
        Kind("timer", TimerProjection, r.apply_timer),  # type: ignore[arg-type]
    )
}

_AGENT_TYPES = {"agent.created", "agent.configured", "turn.started", "turn.settled"}
_WM_TYPES = {
    "agent.created",
    "work_item.opened",
    "work_item.picked",
    "work_item.completed",
    "work_item.updated",
    "constraint.changed",
    "decision.recorded",
    "follow_up.changed",
    "file.touched",
    "wait.registered",
    "wait.resolved",
    "turn.settled",
}


def routes(event: Event) -> list[Key]:
    """The projection rows an event may change."""
    t = event.type
    p: Any = event.payload  # narrowed by ``t``; each branch reads a field its types all have
    out: list[Key] = []
    if t in _AGENT_TYPES:
        out.append(("agent", event.agent_id))
    if t in _WM_TYPES:
        out.append(("working_memory", event.agent_id))
    if t.startswith("work_item.") or t == "todo.changed":
        if p.work_item_id is not None:
            out.append(("work_item", p.work_item_id))
    elif t.startswith("task."):
        out.append(("task", p.task_id))
    elif t.startswith("wait."):
        out.append(("wait", p.wait_id))
    elif t.startswith("timer."):
        out.append(("timer", p.timer_id))
    elif t == "working_memory.delta":
        out.append(("wm_baseline", event.agent_id))
    return out


def fold_event(states: MutableMapping[Key, State | None], event: Event) -> list[Key]:
    """Apply one event; returns the keys whose state changed."""
    changed = []
    for key in routes(event):
        old = states.get(key)
        new = KINDS[key[0]].reducer(old, event)
        if new is not old:
            states[key] = new
            changed.append(key)
    return changed


def fold(states: MutableMapping[Key, State | None], events: Iterable[Event]) -> MutableMapping[Key, State | None]:
    for event in events:
        fold_event(states, event)
    return states


def state_json(state: State) -> str:
    """The stored form of a state: canonical JSON, so dict key order never changes the bytes."""
    return canonical_json(state.model_dump(mode="json")).decode("utf-8")


def row_columns(kind: str, state: State) -> tuple[str, str | None, str | None]:
    """(agent_id, status, label) columns of a projection row, for indexed queries."""
    s: Any = state  # every state model has agent_id; the rest depends on the kind
    match kind:
        case "agent":
            return s.agent_id, s.status, s.name
        case "work_item" | "wait" | "timer":
            return s.agent_id, s.status, None
        case "task":
            return s.agent_id, s.state, None
    return s.agent_id, None, None


def working_memory_view(wm: WorkingMemory | None, item: WorkItemState | None) -> dict[str, Any]:
    """Working memory as an agent sees it: agent-level fields plus the active work item's details."""
    base = wm.model_dump(mode="json", exclude={"agent_id"}) if wm is not None else {}
    if item is not None and wm is not None and wm.active_work_item == item.work_item_id:
        base.update(
            objective=item.objective,
            delivery_target=item.delivery_target,
            plan=list(item.plan),
            todos=[t.model_dump(mode="json") for t in item.todos],
            work_item_title=item.title,
            work_item_constraints=list(item.constraints),
        )
    else:
        base.update(objective="", delivery_target=None, plan=[], todos=[], work_item_title=None, work_item_constraints=[])
    return dict(sorted(base.items()))


def derive(states: MutableMapping[Key, State | None], events: Iterable[Event]) -> list[NewEvent]:
    """Events the projector derives after folding ``events``: a working-memory delta per settled turn."""
    out: list[NewEvent] = []
    for event in events:
        p = event.payload
        if not isinstance(p, ev.TurnSettled):
            continue
        agent = event.agent_id
        wm = states.get(("working_memory", agent))
        assert wm is None or isinstance(wm, WorkingMemory)
        item = states.get(("work_item", wm.active_work_item)) if wm and wm.active_work_item else None
        assert item is None or isinstance(item, WorkItemState)
        view = working_memory_view(wm, item)
        base = states.get(("wm_baseline", agent))
        old = base.view if isinstance(base, WorkingMemoryBaseline) else {}
        changes = {k: v for k, v in view.items() if old.get(k) != v}
        if changes:
            out.append(
                NewEvent(
                    agent_id=agent,
                    payload=ev.WorkingMemoryDelta(turn_id=p.turn_id, changes=changes),
                    origin="runtime:projector",
                    authority="runtime",
                    turn_id=p.turn_id,
                )
            )
    return out
