"""What the dashboard's pages show, read from the ``DaemonPort`` with the functions every view uses.

An agent's state is the daemon's own status entry (``holon.runtime.status``: ``decide`` for the
state, ``describe`` for its words), the same as ``holon agent list`` and ``GET /v1/status``; the
rest are the projections the API serves. Values here are plain data: the templates escape them
(Jinja2 autoescape), the live view's script puts them in with ``textContent``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from holon.api.port import DaemonPort, Spending
from holon.clock import format_us
from holon.errors import NotFoundError
from holon.projections.state import AgentState, TaskProjection, TimerProjection, WaitProjection, WorkItemState
from holon.runtime.schedule import describe as describe_schedule
from holon.runtime.status import describe, is_internal

__all__ = [
    "CONVERSATION_TYPES",
    "AgentDetail",
    "AgentRow",
    "agent_detail",
    "agent_rows",
    "pending_proposals",
]

CONVERSATION_TYPES = (
    "message.received", "turn.started", "model.responded", "tool.called", "tool.resulted", "turn.settled",
    "brief.delivered",
)  # fmt: skip
"""The events the live view draws (the stream carries all of the agent's; the script skips the rest)."""
HISTORY = 200
"""Conversation events the live view starts with before following the ledger."""


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One line of the agents page."""

    name: str
    agent_id: str
    state: str
    detail: str
    model: str
    work: str
    next_wake: str
    spent: str
    budget: str
    last_error: str
    paused: bool


def _when(us: int | None) -> str:
    return "" if us is None else f"{format_us(us)[:19]}Z"


def spending_text(s: Spending) -> tuple[str, str]:
    """``(spent, budget)`` as a person reads them: today's tokens and cost, and the limits (whose)."""
    spent = f"{s.tokens:,} tok · ${s.cost_usd:.4f} · {s.turns} turns"
    if s.owner is None:
        return spent, "no budget (foreground)"
    cost = "" if s.limit_cost_usd is None else f" · ${s.limit_cost_usd:.2f}"
    return spent, f"{s.limit_tokens or 0:,} tok{cost} · {s.limit_turns} turns ({s.owner})"


def _active_work(port: DaemonPort, agent_ids: Collection[str]) -> dict[str, str]:
    """What each agent works on: the title of its working memory's active work item, if open.
    Two queries whatever the number of agents (none for the second without open work)."""
    wanted = set(agent_ids)
    open_items = {w.work_item_id: w for w in port.store.work_items(status=("open", "blocked")) if w.agent_id in wanted}
    if not open_items:
        return {}
    memories = port.store.working_memory_states({w.agent_id for w in open_items.values()})
    out = {}
    for agent_id, wm in memories.items():
        item = open_items.get(wm.active_work_item) if wm.active_work_item else None
        if item is not None:
            out[agent_id] = item.title
    return out


def agent_rows(port: DaemonPort, *, everything: bool = False, names: Collection[str] | None = None) -> list[AgentRow]:
    """Every agent (holon's internal ones only with ``everything``; with ``names``, only the agents
    named, by name or id, and those whose budget they spend), by name, as the daemon sees it: the
    status entries decided at once (``DaemonPort.agent_entries``, the batched form of the daemon's
    one status decision)."""
    agents = port.store.agents() if names is None else _named(port, names)
    agents = [a for a in agents if everything or not is_internal(a)]
    entries = port.agent_entries(agents)
    work = _active_work(port, [a.agent_id for a in agents])
    return [_row(port, a, e, work.get(a.agent_id, "")) for a, e in zip(agents, entries, strict=True)]


def _named(port: DaemonPort, names: Collection[str]) -> list[AgentState]:
    """The agents ``names`` names (by name or id; unknown ones skipped) and those whose budget they
    spend (``Spending.owner``), by name: one read each, not a read of every agent."""
    found: dict[str, AgentState] = {}
    for ref in names:
        with contextlib.suppress(NotFoundError):
            agent = port.store.agent(ref)
            found[agent.agent_id] = agent
    for owner in {port.spending(a).owner for a in list(found.values())} - {None}:
        with contextlib.suppress(NotFoundError):
            agent = port.store.agent(str(owner))
            found[agent.agent_id] = agent
    return sorted(found.values(), key=lambda a: a.name)


def _row(port: DaemonPort, agent: AgentState, entry: dict[str, Any], work: str) -> AgentRow:
    """``agent``'s line from its status entry (``status_entry``: the daemon's one decision)."""
    spent, budget = spending_text(port.spending(agent))
    return AgentRow(
        name=agent.name, agent_id=agent.agent_id, state=str(entry["state"]), detail=describe(entry),
        model=str(entry.get("model") or ""), work=work, next_wake=_when(entry.get("next_wake_us")), spent=spent,
        budget=budget, last_error=agent.last_error or "", paused=entry["state"] == "paused",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class AgentDetail:
    """The live page of one agent, but for its conversation (streamed from ``after``)."""

    agent: AgentState
    row: AgentRow
    working_memory: dict[str, Any]
    """The agent's working memory as it sees it, without its empty fields."""
    work_items: list[WorkItemState]
    tasks: list[TaskProjection]
    waits: list[WaitProjection]
    timers: list[TimerProjection]
    after: int
    """The stream's cursor: just before the first of the newest ``HISTORY`` conversation events."""
    internal: bool = False
    when: dict[str, str] = field(default_factory=dict)
    """Times as text by id (timers' next fire, waits' recheck); ``spec:<timer id>``: its schedule in words."""


def _filled(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if v not in (None, "", [], {})}


def agent_detail(port: DaemonPort, ref: str) -> AgentDetail:
    """The agent named or numbered ``ref`` (``NotFoundError`` when there is none)."""
    store = port.store
    agent = store.agent(ref)
    agent_id = agent.agent_id
    items = store.work_items(agent_id=agent_id, status=("open", "blocked"))
    (entry,) = port.agent_entries([agent])
    row = _row(port, agent, entry, _active_work(port, [agent_id]).get(agent_id, ""))
    tasks = [t for t in store.tasks(agent_id=agent_id) if t.state in ("pending", "running")]
    waits = store.waits(agent_id=agent_id, status="pending")
    timers = store.timers(agent_id=agent_id, status="scheduled")
    recent = store.ledger.recent_index(agent_id, CONVERSATION_TYPES, limit=HISTORY)
    when = {t.timer_id: _when(t.next_fire_us) for t in timers} | {w.wait_id: _when(w.recheck_at_us) for w in waits}
    when |= {f"spec:{t.timer_id}": describe_schedule(t.kind, t.spec) for t in timers}
    return AgentDetail(
        agent=agent, row=row, working_memory=_filled(store.working_memory(agent_id)), work_items=items, tasks=tasks,
        waits=waits, timers=timers, after=recent[0][0] - 1 if recent else store.ledger.head(),
        internal=is_internal(agent), when=when,
    )  # fmt: skip


def pending_proposals(port: DaemonPort) -> int:
    """The proposals badge: how many wait for the operator's decision."""
    return len(port.store.proposals(status="pending"))
