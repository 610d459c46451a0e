"""What agents spent (turns, tokens, dollars), read from the ledger as typed events.

``spend_of`` is a pure reducer over the payload union: a ``turn.settled`` is a turn with its usage
and cost, an ``evolve.model_used`` a model call of durable-memory extraction (tokens and cost, no
turn). Events reach it through the ledger's codec, so an old version of either type is upcast
before it is counted: a ``turn.settled`` v2 cannot silently stop budgets from counting.

``spent_in_window`` walks one agent's spending events back from a ledger position, newest first
and a chunk at a time, and stops at the first one outside the time window: the cost depends on
how much was spent in the window, not on the agent's history.
"""

from __future__ import annotations

from dataclasses import dataclass

from holon.ledger import EventQuery, Ledger
from holon.ledger import events as ev
from holon.ledger.events import PayloadBase

__all__ = ["SPEND_TYPES", "Spend", "spend_of", "spent_in_window"]

SPEND_TYPES = ("turn.settled", "evolve.model_used")
"""The event types that spend an agent's budget."""

_CHUNK = 256


@dataclass(frozen=True, slots=True)
class Spend:
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.turns + other.turns, self.tokens + other.tokens, self.cost_usd + other.cost_usd)


NOTHING = Spend()


def spend_of(payload: PayloadBase) -> Spend:
    """What one event spent (nothing for events of other types)."""
    match payload:
        case ev.TurnSettled():
            return Spend(1, payload.usage.total_tokens, payload.cost_usd or 0.0)
        case ev.EvolveModelUsed():
            return Spend(0, payload.usage.total_tokens, payload.cost_usd or 0.0)
        case _:
            return NOTHING


def spent_in_window(
    ledger: Ledger, agent_id: str, *, start_us: int, end_us: int, upto: int, base: Spend = NOTHING
) -> Spend:
    """``base`` plus what ``agent_id`` spent in ``[start_us, end_us)`` by events at or below seq ``upto``.

    Each type is walked back from ``upto`` until its first event outside the window; amounts are
    added newest first (one order, so the dollar sum is the same float every time)."""
    total = base
    for type_ in SPEND_TYPES:
        top = upto
        while top > 0:
            q = EventQuery(types=(type_,), agent_id=agent_id, upto=top, limit=_CHUNK, newest_first=True)
            events = ledger.find(q)
            for e in events:
                if not start_us <= e.ts_us < end_us:
                    top = 0
                    break
                total += spend_of(e.payload)
            else:
                top = events[-1].seq - 1 if len(events) == _CHUNK else 0
    return total
