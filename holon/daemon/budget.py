"""Per-day budgets of background agents: turns, tokens and dollars per UTC day.

A background agent (``background: true`` in its settings) may take at most
``budget_turns_per_day`` turns and spend ``budget_tokens_per_day`` tokens and
``budget_cost_per_day_usd`` dollars per day (its own settings, else the ``[daemon]`` defaults).
Budgets are checked before a turn starts (the host's gate), so an exhausted agent spends nothing
more that day; its inputs stay queued until the next day. The operator gets one
``brief.delivered`` of kind ``budget`` per agent and day (idempotency key).

What was spent today is read once per agent and day from its ``turn.settled`` events of that day
(an index walk over the agent's settled turns, newest first, stopping at midnight) and its
``evolve.model_used`` events (model calls of durable-memory extraction: tokens and cost, no turn),
then kept up to date from the turns this daemon settles and the evolve calls its watcher sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from holon.clock import Clock
from holon.config import DaemonSettings
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState

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

    def today(self) -> int:
        return day_of(self.clock.now_us())

    def limits(self, agent: AgentState) -> tuple[int, int, float | None]:
        s, d = agent.settings, self.defaults
        cost = s.get("budget_cost_per_day_usd", d.budget_cost_per_day_usd)
        return (
            int(s.get("budget_turns_per_day", d.budget_turns_per_day)),
            int(s.get("budget_tokens_per_day", d.budget_tokens_per_day)),
            None if cost is None else float(cost),
        )

    def spent(self, agent_id: str) -> Spent:
        day = self.today()
        cached = self._spent.get(agent_id)
        if cached is None or cached.day != day:
            cached = self._spent[agent_id] = self._read(agent_id, day)
        return cached

    def _read(self, agent_id: str, day: int) -> Spent:
        spent = Spent(day, read_to=self.store.ledger.head())
        for type_ in ("turn.settled", "evolve.model_used"):
            rows = self.store.ledger.query(
                "SELECT ts_us, payload FROM events WHERE agent_id = ? AND type = ? AND seq <= ? ORDER BY seq DESC",
                (agent_id, type_, spent.read_to),
            )
            for ts_us, payload in rows:
                if day_of(ts_us) != day:
                    break
                data = json.loads(payload)
                spent.turns += type_ == "turn.settled"
                spent.tokens += int(data.get("usage", {}).get("total_tokens", 0))
                spent.cost_usd += float(data.get("cost_usd") or 0.0)
        return spent

    def record(self, agent_id: str, tokens: int, cost_usd: float | None) -> None:
        spent = self.spent(agent_id)
        spent.turns += 1
        spent.tokens += tokens
        spent.cost_usd += cost_usd or 0.0

    def record_evolve(self, agent_id: str, seq: int, payload: str) -> None:
        """Count an ``evolve.model_used`` event the watcher saw (unless the day's read counted it)."""
        spent = self.spent(agent_id)
        if seq <= spent.read_to:
            return
        data = json.loads(payload)
        spent.tokens += int(data.get("usage", {}).get("total_tokens", 0))
        spent.cost_usd += float(data.get("cost_usd") or 0.0)

    def exhausted(self, agent: AgentState) -> str | None:
        """Why the agent may not run more today, or ``None`` (always ``None`` for foreground agents)."""
        if not agent.settings.get("background"):
            return None
        turns, tokens, cost = self.limits(agent)
        spent = self.spent(agent.agent_id)
        if spent.turns >= turns:
            return f"{spent.turns} of {turns} turns per day used"
        if spent.tokens >= tokens:
            return f"{spent.tokens} of {tokens} tokens per day used"
        if cost is not None and spent.cost_usd >= cost:
            return f"${spent.cost_usd:.4f} of ${cost:.2f} per day spent"
        return None

    def brief(self, agent: AgentState, reason: str) -> None:
        """Tell the operator, once per agent and day, that the agent stopped for the day."""
        day = self.today()
        text = (
            f"Background agent {agent.name} reached its daily budget ({reason}). It runs no more turns "
            f"until the next UTC day; inputs wait until then. Raise it with 'holon agent configure "
            f"{agent.name} --budget-turns-per-day N' (or tokens / cost)."
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
