"""The turn's values: its limits and result, the state it carries from step to step, and the steps.

A turn is a step machine (``holon.runtime.turn.runner``): each step is a frozen value holding the
turn's ``TurnState`` and what the step needs; running it commits what RFC 0002 says that step
commits and returns the next step. ``Settle`` is the only way out::

    (open: turn.started + the first prompt) -> Request -> Record -> RunTools -> Request ...
                                                   |          |          |
                                                   +----------+----------+--> Settle

Nothing here touches the ledger: these are the values the runner passes between its steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from holon.context.assembler import Assembly, Budget, Manifest, Section
from holon.context.tokens import TokenCounter
from holon.context.view import RoundView, TurnView
from holon.ledger import events as ev
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelReply, ModelSettings, Provider
from holon.runtime.settings import read_settings
from holon.runtime.tools.base import ToolRegistry, ToolResult

__all__ = [
    "ProviderResolver",
    "Record",
    "Request",
    "RunTools",
    "Settle",
    "Step",
    "TurnLimits",
    "TurnObserver",
    "TurnPlan",
    "TurnResult",
    "TurnState",
    "add_usage",
    "turn_limits",
]


@dataclass(frozen=True, slots=True)
class TurnLimits:
    max_rounds: int = 12
    max_tokens: int = 400_000
    """Total tokens (prompt + completion) one turn may spend."""
    max_cost_usd: float | None = None
    max_tool_errors: int = 6


@dataclass
class TurnResult:
    turn_id: str
    outcome: ev.TurnOutcome
    reply: str | None = None
    reason: str | None = None
    rounds: int = 0
    tool_calls: int = 0
    usage: ev.Usage = field(default_factory=ev.Usage)
    cost_usd: float | None = None
    requeued: bool = False
    """The turn failed transiently and put its inputs back in the queue."""
    rejected: list[int] = field(default_factory=list)
    """Inputs the failed turn settled unanswered (``turn.settled.rejected``)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "outcome": self.outcome,
            "reply": self.reply,
            "reason": self.reason,
            "rounds": self.rounds,
            "tool_calls": self.tool_calls,
            "usage": self.usage.model_dump(),
            "cost_usd": self.cost_usd,
            "requeued": self.requeued,
            "rejected": self.rejected,
        }


class TurnObserver:
    """Hooks for live display (the CLI, later the REPL). Every method is optional."""

    def on_text(self, agent_id: str, fragment: str) -> None: ...
    def on_tool_call(self, agent_id: str, name: str, arguments: str) -> None: ...
    def on_tool_result(self, agent_id: str, result: ToolResult) -> None: ...
    def on_settled(self, agent_id: str, result: TurnResult) -> None: ...


ProviderResolver = Callable[[AgentState], tuple[Provider, ModelSettings]]


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What a turn fixes when it starts and keeps to its end."""

    turn_id: str
    agent: AgentState
    provider: Provider
    settings: ModelSettings
    """The agent's model settings, with ``max_output_tokens`` set to the reply's reserve."""
    budget: Budget
    counter: TokenCounter
    registry: ToolRegistry
    """The tools as this agent sees them."""
    limits: TurnLimits
    inputs: tuple[int, ...]
    """The inputs ``turn.started`` took (what a failure rejects)."""
    view: TurnView
    """The turn's view as it started; each later round refreshes it with the rounds so far."""


@dataclass(frozen=True, slots=True)
class TurnState:
    """The one value a turn carries from step to step; each step returns a new one."""

    plan: TurnPlan
    rounds: int = 0
    """Model calls made (a failed call counts)."""
    history: tuple[RoundView, ...] = ()
    """The rounds that called tools, for the next round's prompt."""
    sections: tuple[Section, ...] = ()
    """The prompt's candidate sections as the last round built them: built once, for the turn's
    first round; each later round updates only what it changed (``update_sections``)."""
    assembly: Assembly | None = None
    """The last round's prompt: the next round's layout reuses what did not change since."""
    first_record: tuple[int, Manifest] | None = None
    """The seq of the turn's first ``context.assembled`` and its manifest: a later round's
    manifest is recorded against it (``manifest_base``)."""
    tool_calls: int = 0
    tool_errors: int = 0
    usage: ev.Usage = field(default_factory=ev.Usage)
    cost_usd: float | None = None

    @property
    def turn_id(self) -> str:
        return self.plan.turn_id

    @property
    def agent_id(self) -> str:
        return self.plan.agent.agent_id

    def replied(self, reply: ModelReply) -> TurnState:
        """This state after one more model call that answered with ``reply``: its usage and cost added."""
        cost = self.cost_usd if reply.cost_usd is None else round((self.cost_usd or 0.0) + reply.cost_usd, 8)
        return dataclasses.replace(
            self, rounds=self.rounds + 1, usage=add_usage(self.usage, reply.usage), cost_usd=cost
        )

    def over_budget(self, estimate: int) -> str | None:
        """Why the next call, estimated at ``estimate`` prompt tokens, would pass a limit; else None."""
        limits = self.plan.limits
        if self.usage.total_tokens + estimate > limits.max_tokens:
            return (
                f"token limit: {self.usage.total_tokens} used + ~{estimate} for the next call would pass "
                f"the turn's limit of {limits.max_tokens}"
            )
        if limits.max_cost_usd is not None and (self.cost_usd or 0.0) >= limits.max_cost_usd:
            return f"cost limit: ${self.cost_usd:.4f} spent reaches the turn's limit of ${limits.max_cost_usd:.4f}"
        return None

    def result(
        self,
        outcome: ev.TurnOutcome,
        *,
        reply: str | None = None,
        reason: str | None = None,
        requeued: bool = False,
        rejected: tuple[int, ...] = (),
    ) -> TurnResult:
        """The turn's result, settled with ``outcome``."""
        return TurnResult(
            self.turn_id,
            outcome,
            reply=reply,
            reason=reason,
            rounds=self.rounds,
            tool_calls=self.tool_calls,
            usage=self.usage,
            cost_usd=self.cost_usd,
            requeued=requeued,
            rejected=list(rejected),
        )


# --- the steps ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """Call the model. Its prompt was assembled within the limits and recorded (``context.assembled``
    + ``model.requested``, committed with what came just before: ``turn.started``, or the last
    tool call's result)."""

    state: TurnState
    assembly: Assembly


@dataclass(frozen=True, slots=True)
class Record:
    """Record the model's reply: the final answer settles, tool calls are recorded before they run."""

    state: TurnState
    reply: ModelReply


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run the recorded calls, one transaction each (the last one's also holds the next round's
    prompt); then the next round, or settle."""

    state: TurnState
    reply: ModelReply
    called_seq: tuple[int, ...]
    """The ``tool.called`` event of each of ``reply.tool_calls``, in order."""


@dataclass(frozen=True, slots=True)
class Settle:
    """Append ``turn.settled`` (after ``answer``, the final reply, in the same transaction)."""

    state: TurnState
    outcome: ev.TurnOutcome
    reason: str | None = None
    reply: str | None = None
    requeue: bool = False
    rejected: tuple[int, ...] = ()
    answer: ev.ModelResponded | None = None
    notify: bool = False
    """Tell the operator why re-queued inputs wait (once per distinct reason)."""


Step = Request | Record | RunTools | Settle


def turn_limits(base: TurnLimits, agent: AgentState) -> TurnLimits:
    """``base`` with the agent's own settings over it."""
    # Read totally: a bad stored value (a ledger older than the checks) means the default.
    s = read_settings(agent.settings).settings
    return TurnLimits(
        max_rounds=base.max_rounds if s.max_rounds is None else s.max_rounds,
        max_tokens=base.max_tokens if s.max_tokens_per_turn is None else s.max_tokens_per_turn,
        max_cost_usd=base.max_cost_usd if s.max_cost_per_turn_usd is None else s.max_cost_per_turn_usd,
        max_tool_errors=base.max_tool_errors,
    )


def add_usage(a: ev.Usage, b: ev.Usage) -> ev.Usage:
    return ev.Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )
