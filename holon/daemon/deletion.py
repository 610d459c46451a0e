"""Deleting an agent and what it started: shared by the daemon (``Daemon.delete``, behind
``DELETE /v1/agents/{agent}``) and ``holon agent delete`` when no daemon runs.

The daemon first aborts the agent's running turn and kills its background tasks (only it has
them); the rest is the same in both places and is here: the agent's child agents go first
(deepest first), then for each one, in one transaction, its unfinished tasks cancelled, its
pending waits and timers cancelled and ``agent.deleted``; its home and hook token removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from holon.daemon.hooks import hook_tokens
from holon.errors import NotFoundError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = ["REASON", "delete_offline", "delete_records", "descendants"]

REASON = "its agent was deleted by the operator"


def descendants(store: Store, agent_id: str) -> list[AgentState]:
    """The agent's child agents, theirs, and so on: the deepest first (deleted before their parents)."""
    children: dict[str, list[AgentState]] = {}
    for a in store.agents():
        if a.parent_id is not None:
            children.setdefault(a.parent_id, []).append(a)
    out: list[AgentState] = []

    def walk(parent: str, seen: frozenset[str]) -> None:
        for child in children.get(parent, []):
            if child.agent_id not in seen:
                walk(child.agent_id, seen | {child.agent_id})
                out.append(child)

    walk(agent_id, frozenset({agent_id}))
    return out


def delete_records(store: Store, state: AgentState, *, origin: str) -> None:
    """One agent's deletion in the ledger (one transaction), then its home and hook token."""
    agent_id = state.agent_id
    open_tasks = [t for s in ("running", "pending") for t in store.tasks(agent_id=agent_id, status=s)]
    waits = store.waits(agent_id=agent_id, status="pending")
    timers = store.timers(agent_id=agent_id, status="scheduled")
    store.append(
        *[NewEvent(agent_id, ev.TaskResulted(task_id=t.task_id, state="cancelled", output=REASON), origin=origin, authority="operator", task_id=t.task_id) for t in open_tasks],
        *[NewEvent(agent_id, ev.WaitResolved(wait_id=w.wait_id, resolution="cancelled"), origin=origin, authority="operator") for w in waits],
        *[NewEvent(agent_id, ev.TimerCancelled(timer_id=t.timer_id), origin=origin, authority="operator") for t in timers],
        NewEvent(agent_id, ev.AgentDeleted(reason="deleted by the operator"), origin=origin, authority="operator"),
    )  # fmt: skip
    home = Path(state.home).resolve()
    agents = store.paths.agents.resolve()
    if home.is_relative_to(agents) and home != agents:
        shutil.rmtree(home, ignore_errors=True)
    hook_tokens(store).forget(agent_id)


def delete_offline(store: Store, agent: str, *, origin: str = "operator:cli") -> tuple[AgentState, list[AgentState]]:
    """``holon agent delete`` without a daemon: nothing of the agent runs, so only the records go;
    a deleted child's parent is told, as the daemon's host tells it (its next turn reads it).
    Returns the agent and the children deleted with it."""
    state = store.agent(agent)
    line = descendants(store, state.agent_id)
    for member in [*line, state]:
        delete_records(store, member, origin=origin)
    _tell_parent(store, state)
    return state, line


def _tell_parent(store: Store, child: AgentState) -> None:
    """The parent's task on a deleted child ends ``cancelled`` and it gets the news as an input."""
    from holon.runtime.inputs import input_events
    from holon.runtime.settings import read_settings

    task_id = read_settings(child.settings).settings.parent_task_id
    if child.parent_id is None or task_id is None:
        return
    if getattr(store.task(task_id), "state", None) != "running":
        return
    try:
        store.agent(child.parent_id)
    except NotFoundError:
        return
    text = f"Child agent {child.name} (task {task_id}) was deleted by the operator before it finished; no answer will come."
    store.append(
        NewEvent(child.parent_id, ev.TaskResulted(task_id=task_id, state="cancelled", output="the child agent was deleted by the operator"), origin="runtime:host", authority="runtime", task_id=task_id)
    )  # fmt: skip
    store.append(
        *input_events(store, child.parent_id, text, origin=f"task:{task_id}", authority="tool", sender="task", channel="task", wakes=("task", task_id), task_id=task_id)
    )  # fmt: skip
