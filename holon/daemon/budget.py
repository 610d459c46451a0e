"""Per-day budgets of background agents: turns, tokens and dollars per UTC day.

A background agent (``background: true`` in its settings) may take at most
``budget_turns_per_day`` turns and spend ``budget_tokens_per_day`` tokens and
``budget_cost_per_day_usd`` dollars per day (its own settings, else the ``[daemon]`` defaults).
Budgets are checked before a turn starts (the host's gate), so an exhausted agent spends nothing
more that day; its inputs stay queued until the next day. The operator gets one
``brief.delivered`` of kind ``budget`` per agent and day (idempotency key).

Child agents spend their root's budget. A child of a background agent (``spawn_agent``) copies
its parent's settings, so it is a background agent too, but it has no budget of its own: every
turn, token and dollar of the agent and its descendants counts against the budget of the topmost
background agent in its line (the *owner*, ``Budgets.owner``), and when that is used up none of
them runs. Otherwise a background agent could escape its budget by spawning children.

What was spent today is read once per owner and day from the ``turn.settled`` events of that day
of the owner and its descendants (an index walk over each agent's settled turns, newest first,
stopping at midnight) and their ``evolve.model_used`` events (model calls of durable-memory
extraction: tokens and cost, no turn), then kept up to date from the turns this daemon settles and
the evolve calls its watcher sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from holon.clock import Clock
from holon.config import DaemonSettings
from holon.errors import NotFoundError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.spend import Spend, spend_of, spent_in_window
from holon.projections.state import AgentState
from holon.runtime.settings import read_settings

__all__ = ["DAY_US", "Budgets", "Spent", "day_of"]

DAY_US = 86_400 * 1_000_000


def day_of(ts_us: int) -> int:
    """The UTC day number of a time (days since the epoch)."""
    return ts_us // DAY_US


@dataclass
class Spent:
    day: int
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    read_to: int = 0
    """The ledger head when this was read: evolve calls at or below it are already counted."""


class Budgets:
    def __init__(self, store: Store, clock: Clock, defaults: DaemonSettings) -> None:
        self.store = store
        self.clock = clock
        self.defaults = defaults
        self._spent: dict[str, Spent] = {}
        self._children_map: dict[str, list[str]] = {}
        self._children_at = -1

    def today(self) -> int:
        return day_of(self.clock.now_us())

    def owner(self, agent: AgentState) -> AgentState | None:
        """Whose budget ``agent`` spends: the topmost background agent among it and its ancestors.

        ``None`` for a foreground agent with no background ancestor (it has no budget)."""
        found, current, seen = None, agent, set()
        while current.agent_id not in seen:
            seen.add(current.agent_id)
            if read_settings(current.settings).settings.background:
                found = current
            if current.parent_id is None:
                break
            try:
                current = self.store.agent(current.parent_id)
            except NotFoundError:  # a deleted parent: the line ends here
                break
        return found

    def _owner_id(self, agent_id: str) -> str:
        """The id whose ``Spent`` an agent's spending goes to (its own for agents with no budget)."""
        try:
            owner = self.owner(self.store.agent(agent_id))
        except NotFoundError:
            return agent_id
        return agent_id if owner is None else owner.agent_id

    def _children(self) -> dict[str, list[str]]:
        """Each agent's children, read again only when the ledger moved (agents come and go by
        events): a cold read of every agent's spending (the dashboard's first page with many
        agents) walks each line from this map instead of re-reading all agents per agent."""
        head = self.store.ledger.head()
        if self._children_at != head:
            children: dict[str, list[str]] = {}
            for a in self.store.agents():
                if a.parent_id is not None:
                    children.setdefault(a.parent_id, []).append(a.agent_id)
            self._children_map, self._children_at = children, head
        return self._children_map

    def _line(self, owner_id: str) -> list[str]:
        """The owner and all its descendants (it is their owner: the topmost background agent above them)."""
        children = self._children()
        line, seen, todo = [owner_id], {owner_id}, [owner_id]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    line.append(child)
                    todo.append(child)
        return line

    def limits(self, agent: AgentState) -> tuple[int, int, float | None]:
        """The owner's per-day limits: its own settings (read totally: a bad one means the
        default), else the ``[daemon]`` defaults."""
        s, d = read_settings(agent.settings).settings, self.defaults
        return (
            d.budget_turns_per_day if s.budget_turns_per_day is None else s.budget_turns_per_day,
            d.budget_tokens_per_day if s.budget_tokens_per_day is None else s.budget_tokens_per_day,
            d.budget_cost_per_day_usd if s.budget_cost_per_day_usd is None else s.budget_cost_per_day_usd,
        )

    def spent(self, agent_id: str) -> Spent:
        day = self.today()
        cached = self._spent.get(agent_id)
        if cached is None or cached.day != day:
            cached = self._spent[agent_id] = self._read(agent_id, day)
        return cached

    def _read(self, agent_id: str, day: int) -> Spent:
        head = self.store.ledger.head()
        used = Spend()
        for member in self._line(agent_id):
            used = spent_in_window(
                self.store.ledger, member, start_us=day * DAY_US, end_us=(day + 1) * DAY_US, upto=head, base=used
            )
        return Spent(day, turns=used.turns, tokens=used.tokens, cost_usd=used.cost_usd, read_to=head)

    def record(self, agent_id: str, tokens: int, cost_usd: float | None) -> None:
        """Count a turn the daemon settled (its ``turn.settled`` is already in the ledger) to its owner."""
        owner_id = self._owner_id(agent_id)
        cached = self._spent.get(owner_id)
        if cached is None or cached.day != self.today():
            return  # the first read of today (``spent``) will hold this turn
        cached.turns += 1
        cached.tokens += tokens
        cached.cost_usd += cost_usd or 0.0

    def record_evolve(self, agent_id: str, seq: int, payload: ev.EvolveModelUsed) -> None:
        """Count the ``evolve.model_used`` event at ``seq`` the watcher saw, decoded by the ledger's
        codec (upcast, typed), unless the day's read already counted it."""
        spent = self.spent(self._owner_id(agent_id))
        if seq <= spent.read_to:
            return
        used = spend_of(payload)
        spent.tokens += used.tokens
        spent.cost_usd += used.cost_usd

    def exhausted(self, agent: AgentState) -> str | None:
        """Why the agent may not run more today, or ``None`` (always ``None`` for foreground agents)."""
        owner = self.owner(agent)
        if owner is None:
            return None
        turns, tokens, cost = self.limits(owner)
        spent = self.spent(owner.agent_id)
        if spent.turns >= turns:
            return f"{spent.turns} of {turns} turns per day used"
        if spent.tokens >= tokens:
            return f"{spent.tokens} of {tokens} tokens per day used"
        if cost is not None and spent.cost_usd >= cost:
            return f"${spent.cost_usd:.4f} of ${cost:.2f} per day spent"
        return None

    def brief(self, agent: AgentState, reason: str) -> None:
        """Tell the operator, once per owner and day, that the owner (and its children) stopped for the day."""
        agent = self.owner(agent) or agent
        day = self.today()
        text = (
            f"Background agent {agent.name} reached its daily budget ({reason}, its child agents "
            f"included). It and its child agents run no more turns until the next UTC day; inputs "
            f"wait until then. Raise it with 'holon agent configure {agent.name} "
            f"--budget-turns-per-day N' (or tokens / cost)."
        )
        self.store.append(
            NewEvent(
                agent.agent_id,
                ev.BriefDelivered(kind="budget", text=text),
                origin="runtime:daemon",
                authority="runtime",
                idempotency_key=f"budget:{agent.agent_id}:{day}",
            )
        )
