"""The turn: inputs -> prompt -> model -> tools -> ... -> settled.

A turn is bracketed by ``turn.started`` (which takes the agent's pending inputs) and
``turn.settled`` (completed, waiting, failed or interrupted). In between, each model round
commits in steps that keep a crash explainable:

1. ``model.requested``                          (so a crash during the call is visible)
2. ``model.responded`` + every ``tool.called``  (atomically: the calls are recorded before they run)
3. per call: its emitted events + ``tool.resulted`` (atomically)

A ``tool.called`` without a ``tool.resulted`` therefore means the call was in flight when holon
died; recovery reports it as interrupted instead of running it again. Limits (rounds, tokens,
cost, failed tool calls) are checked before anything is spent. Transient model failures re-queue
the inputs (``requeue``), so an input is never lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holon.clock import Clock
from holon.context.assembler import Assembly, Budget, ContextOverflow, assemble
from holon.context.render import with_cache_markers
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import RoundView, ToolEvidence, gather, refresh
from holon.errors import ModelError
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelRequest, ModelSettings, Provider
from holon.runtime.providers.retry import RetryPolicy, complete_with_retry
from holon.runtime.settings import read_settings
from holon.runtime.tools.base import ToolContext, ToolRegistry, ToolResult
from holon.runtime.views import AgentMemory, StoreViews

__all__ = ["TurnLimits", "TurnObserver", "TurnResult", "TurnRunner"]

MAX_OUTPUT_RESERVE = 4_096


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
        }


class TurnObserver:
    """Hooks for live display (the CLI, later the REPL). Every method is optional."""

    def on_text(self, agent_id: str, fragment: str) -> None: ...
    def on_tool_call(self, agent_id: str, name: str, arguments: str) -> None: ...
    def on_tool_result(self, agent_id: str, result: ToolResult) -> None: ...
    def on_settled(self, agent_id: str, result: TurnResult) -> None: ...


ProviderResolver = Callable[[AgentState], tuple[Provider, ModelSettings]]


class TurnRunner:
    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        resolve_provider: ProviderResolver,
        *,
        clock: Clock,
        services: Any,
        limits: TurnLimits | None = None,
        retry: RetryPolicy | None = None,
        observer: TurnObserver | None = None,
        sleep: Callable[[float], Any] | None = None,
        context: Any = None,
        window_of: Callable[[str], int | None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.resolve_provider = resolve_provider
        self.clock = clock
        self.services = services
        self.limits = limits or TurnLimits()
        self.retry = retry or RetryPolicy()
        self.observer = observer or TurnObserver()
        self._sleep = sleep
        # ``[context]`` settings: tests may pass their own; the store's config otherwise.
        self.context = context if context is not None else store.settings.context
        self._window_of = window_of
        self._counters: dict[str, TokenCounter] = {}

    # --- the turn ---------------------------------------------------------------------------

    async def run(self, agent_id: str) -> TurnResult | None:
        """Run one turn over the agent's pending inputs; ``None`` when there are none."""
        agent = self.store.agent(agent_id)
        if not agent.pending_inputs:
            return None
        provider, settings = self.resolve_provider(agent)  # raises before anything is spent
        limits = self._limits(agent)
        turn_id = new_id("turn")
        # Oldest first, at most max_inputs_per_turn: the rest stay pending for the next turn.
        inputs = list(agent.pending_inputs)[: self.store.settings.runtime.max_inputs_per_turn]
        settings, budget = self._budget(settings)
        counter = self._counter(settings.model)
        registry = self.registry.for_agent(agent)
        active = self.store.working_memory(agent_id).get("active_work_item")
        started = self.store.append(
            NewEvent(
                agent_id,
                ev.TurnStarted(turn_id=turn_id, inputs=inputs),
                origin="runtime:turn",
                authority="runtime",
                turn_id=turn_id,
                work_item_id=active,
            )
        )[0]
        base_view = gather(self.store, agent_id, inputs=inputs, started_seq=started.seq, tools=registry.schemas())
        rounds: list[RoundView] = []
        result = TurnResult(turn_id, "completed")
        tool_errors = 0
        for round_no in range(limits.max_rounds):
            try:
                view = refresh(self.store, base_view, tuple(rounds)) if rounds else base_view
                assembly = assemble(build_sections(view, counter), budget)
            except ContextOverflow as e:
                return self._settle(agent_id, result, "failed", reason=f"context: {e}")
            refusal = self._over_budget(result, limits, assembly.used_tokens)
            if refusal:
                return self._settle(agent_id, result, "failed", reason=refusal)
            # What the model is about to see, and that it was asked: one transaction.
            self._append(
                agent_id,
                turn_id,
                self._context_event(turn_id, round_no, budget, assembly),
                ev.ModelRequested(
                    turn_id=turn_id,
                    round=round_no,
                    model=settings.model,
                    messages=len(assembly.messages),
                    tools=len(assembly.tools),
                    prompt_tokens_est=assembly.used_tokens,
                ),
            )
            messages = with_cache_markers(assembly.messages, settings.model)
            request = ModelRequest(messages=messages, tools=assembly.tools, settings=settings)
            try:
                reply = await complete_with_retry(
                    provider,
                    request,
                    policy=self.retry,
                    on_text=lambda s: self.observer.on_text(agent_id, s),
                    **({"sleep": self._sleep} if self._sleep else {}),
                )
            except ModelError as e:
                self._append(
                    agent_id,
                    turn_id,
                    ev.ModelResponded(
                        turn_id=turn_id, round=round_no, model=settings.model, error=str(e), error_kind=e.kind
                    ),
                )
                result.rounds = round_no + 1
                return self._settle(
                    agent_id, result, "failed", reason=f"model error ({e.kind}): {e}", requeue=e.retryable
                )
            result.rounds = round_no + 1
            result.usage = _add(result.usage, reply.usage)
            if reply.cost_usd is not None:
                result.cost_usd = round((result.cost_usd or 0.0) + reply.cost_usd, 8)
            calls = reply.tool_calls
            recorded = self._append(
                agent_id,
                turn_id,
                ev.ModelResponded(
                    turn_id=turn_id,
                    round=round_no,
                    model=reply.model or settings.model,
                    content=reply.content,
                    tool_calls=calls,
                    finish_reason=reply.finish_reason,
                    usage=reply.usage,
                    cost_usd=reply.cost_usd,
                    latency_ms=reply.latency_ms,
                ),
                *[ev.ToolCalled(call_id=c.call_id, tool=c.tool, arguments=c.arguments) for c in calls],
            )
            if not calls:
                result.reply = reply.content or ""
                return self._settle(agent_id, result, "completed")
            called_seq = {e.payload.call_id: e.seq for e in recorded if isinstance(e.payload, ev.ToolCalled)}
            waiting = False
            evidence = []
            for call in calls:
                tool_result, result_seq = await self._call_tool(agent, turn_id, call, registry)
                result.tool_calls += 1
                tool_errors += tool_result.is_error
                waiting = waiting or tool_result.ends_turn == "waiting"
                evidence.append(
                    ToolEvidence(
                        call.call_id, call.tool, call.arguments, tool_result.status, tool_result.output,
                        called_seq[call.call_id], result_seq,
                    )
                )  # fmt: skip
            rounds.append(RoundView(round_no, reply.content, tuple(evidence)))
            if waiting:
                result.reply = reply.content
                return self._settle(agent_id, result, "waiting")
            if tool_errors > limits.max_tool_errors:
                return self._settle(
                    agent_id,
                    result,
                    "failed",
                    reason=f"more than {limits.max_tool_errors} failed tool calls in one turn",
                )
        return self._settle(
            agent_id, result, "failed", reason=f"no final answer after {limits.max_rounds} model rounds"
        )

    # --- steps ------------------------------------------------------------------------------

    async def _call_tool(
        self, agent: AgentState, turn_id: str, call: ev.ToolCallSpec, registry: ToolRegistry
    ) -> tuple[ToolResult, int]:
        self.observer.on_tool_call(agent.agent_id, call.tool, call.arguments)
        home = Path(agent.home)
        ctx = ToolContext(
            agent_id=agent.agent_id,
            agent_name=agent.name,
            turn_id=turn_id,
            clock=self.clock,
            home=home,
            workspace=Path(agent.workspace) if agent.workspace else home,
            views=StoreViews(self.store, agent.agent_id),
            services=self.services,
            memory=AgentMemory(self.store, agent, turn_id=turn_id),
        )
        result = await registry.execute(call, ctx)
        origin = f"agent:{agent.agent_id}"
        events = [
            NewEvent(
                agent.agent_id,
                e.payload,
                origin=origin,
                authority="agent",
                turn_id=turn_id,
                work_item_id=e.work_item_id,
                task_id=e.task_id,
            )
            for e in result.emitted
        ]
        events.append(
            NewEvent(
                agent.agent_id,
                ev.ToolResulted(
                    call_id=call.call_id,
                    tool=call.tool,
                    status=result.status,
                    output=result.output,
                    duration_ms=result.duration_ms,
                ),
                origin=f"tool:{call.tool}",
                authority="tool",
                turn_id=turn_id,
            )
        )
        stored = self.store.append(*events)
        self.observer.on_tool_result(agent.agent_id, result)
        return result, stored[-1].seq

    def _settle(
        self,
        agent_id: str,
        result: TurnResult,
        outcome: ev.TurnOutcome,
        *,
        reason: str | None = None,
        requeue: bool = False,
    ) -> TurnResult:
        result.outcome = outcome
        result.reason = reason
        self._append(
            agent_id,
            result.turn_id,
            ev.TurnSettled(
                turn_id=result.turn_id,
                outcome=outcome,
                reason=reason,
                rounds=result.rounds,
                tool_calls=result.tool_calls,
                reply=result.reply,
                requeue=requeue,
                usage=result.usage,
                cost_usd=result.cost_usd,
            ),
        )
        self.observer.on_settled(agent_id, result)
        return result

    def _append(self, agent_id: str, turn_id: str, *payloads: ev.PayloadBase) -> list[Event]:
        return self.store.append(
            *(NewEvent(agent_id, p, origin="runtime:turn", authority="runtime", turn_id=turn_id) for p in payloads)
        )

    # --- context --------------------------------------------------------------------------

    def _counter(self, model: str) -> TokenCounter:
        counter = self._counters.get(model)
        if counter is None:
            counter = self._counters[model] = TokenCounter(model)
        return counter

    def _budget(self, settings: ModelSettings) -> tuple[ModelSettings, Budget]:
        """The request budget: the model's window minus the tokens reserved for its reply."""
        window = settings.context_window or (self._window_of(settings.model) if self._window_of else None)
        window = window or self.context.default_context_window
        reserve = (
            self.context.output_reserve_tokens or settings.max_output_tokens or min(MAX_OUTPUT_RESERVE, window // 4)
        )
        reserve = min(reserve, window // 2)
        if settings.max_output_tokens is None:
            settings = dataclasses.replace(settings, max_output_tokens=reserve)
        return settings, Budget(context_window=window, output_reserve=reserve)

    def _context_event(self, turn_id: str, round_no: int, budget: Budget, a: Assembly) -> ev.ContextAssembled:
        sections = a.manifest["sections"]
        summary: dict[str, int] = {
            form: sum(1 for s in sections if s["representation"] == form and not s["excluded"])
            for form in ("full", "compact", "omitted")
        }
        summary["excluded"] = sum(1 for s in sections if s["excluded"])
        summary["refs_included"] = sum(len(s["refs_included"]) for s in sections)
        summary["refs_omitted"] = sum(len(s["refs_omitted"]) for s in sections)
        record = self.context.record_prompts
        prompt = canonical_json(a.messages).decode() if record else None
        tools = canonical_json(a.tools).decode() if record and round_no == 0 else None
        return ev.ContextAssembled(
            turn_id=turn_id,
            round=round_no,
            budget_tokens=budget.limit,
            used_tokens=a.used_tokens,
            manifest_digest=a.digest,
            summary=summary,  # type: ignore[arg-type]
            manifest=canonical_json(a.manifest).decode(),
            prompt=prompt,
            tools=tools,
        )

    def _limits(self, agent: AgentState) -> TurnLimits:
        # Read totally: a bad stored value (a ledger older than the checks) means the default.
        s = read_settings(agent.settings).settings
        base = self.limits
        return TurnLimits(
            max_rounds=base.max_rounds if s.max_rounds is None else s.max_rounds,
            max_tokens=base.max_tokens if s.max_tokens_per_turn is None else s.max_tokens_per_turn,
            max_cost_usd=base.max_cost_usd if s.max_cost_per_turn_usd is None else s.max_cost_per_turn_usd,
            max_tool_errors=base.max_tool_errors,
        )

    @staticmethod
    def _over_budget(result: TurnResult, limits: TurnLimits, estimate: int) -> str | None:
        if result.usage.total_tokens + estimate > limits.max_tokens:
            return (
                f"token limit: {result.usage.total_tokens} used + ~{estimate} for the next call would pass "
                f"the turn's limit of {limits.max_tokens}"
            )
        if limits.max_cost_usd is not None and (result.cost_usd or 0.0) >= limits.max_cost_usd:
            return f"cost limit: ${result.cost_usd:.4f} spent reaches the turn's limit of ${limits.max_cost_usd:.4f}"
        return None


def _add(a: ev.Usage, b: ev.Usage) -> ev.Usage:
    return ev.Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )
