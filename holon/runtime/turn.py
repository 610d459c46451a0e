"""The turn: inputs -> prompt -> model -> tools -> ... -> settled.

A turn is bracketed by ``turn.started`` (which takes the agent's pending inputs) and
``turn.settled`` (completed, waiting, failed or interrupted). In between, each model round
commits in steps that keep a crash explainable:

1. ``model.requested``                          (so a crash during the call is visible)
2. ``model.responded`` + every ``tool.called``  (atomically: the calls are recorded before they run)
3. per call: its emitted events + ``tool.resulted`` (atomically)

The final answer (a ``model.responded`` without tool calls) commits with ``turn.settled`` in one
transaction, so a crash can never leave an answer recorded and its turn unsettled: recovery would
ask the model again and the input would be answered twice (exactly-once answers, RFC 0002).

A ``tool.called`` without a ``tool.resulted`` therefore means the call was in flight when holon
died; recovery reports it as interrupted instead of running it again. Limits (rounds, tokens,
cost, failed tool calls) are checked before anything is spent.

**Admission by size.** A turn takes the pending inputs oldest first while their shortened forms
fit ``INPUT_SHARE`` of what the prompt's pinned minimum leaves free (always at least one, at most
``[runtime] max_inputs_per_turn``); the rest stay queued for the next turn. An input too long for
any prompt is shown by reference (a preview and the ``memory_get`` call that reads it).

**A failed turn never consumes inputs it did not answer.** Transient model failures re-queue them
(``requeue``); every other failure settles them ``rejected`` with its reason (and a brief to the
operator), so nothing that fails the same way every time is retried forever.
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
from holon.context.sections import build_sections, input_tokens, pinned_minimum
from holon.context.tokens import MESSAGE_OVERHEAD, TokenCounter
from holon.context.view import RoundView, ToolEvidence, gather, refresh
from holon.errors import ConfigError, ModelError, ModelKeyMissing, ModelNotConfigured, UsageError
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, Provider
from holon.runtime.providers.retry import RetryPolicy, complete_with_retry
from holon.runtime.settings import read_settings
from holon.runtime.tools.base import ToolContext, ToolRegistry, ToolResult
from holon.runtime.views import AgentMemory, StoreViews

__all__ = ["INPUT_SHARE", "TurnLimits", "TurnObserver", "TurnResult", "TurnRunner", "rejection_brief", "waiting_brief"]

MAX_OUTPUT_RESERVE = 4_096
INPUT_SHARE = 0.5
"""Share of the prompt budget left free by its pinned minimum that a turn's inputs may fill when
it takes more than one; the rest is room for the turn's own rounds (tool calls and results)."""


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
        try:
            provider, settings = self.resolve_provider(agent)  # fails before anything is spent
        except (ModelError, ConfigError, UsageError) as e:
            return self._unavailable(agent, e)
        return await self._run(agent, provider, settings)

    async def _run(self, agent: AgentState, provider: Provider, settings: ModelSettings) -> TurnResult:
        """The turn proper, once the agent's model is resolved."""
        agent_id = agent.agent_id
        limits = self._limits(agent)
        turn_id = new_id("turn")
        settings, budget = self._budget(settings)
        counter = self._counter(settings.model)
        registry = self.registry.for_agent(agent)
        # Oldest first, while they fit (at least one, at most max_inputs_per_turn): the rest stay
        # pending for the next turn.
        inputs = self._admit(agent, budget, counter, registry.schemas())
        started = self._start(agent_id, turn_id, inputs)
        base_view = gather(self.store, agent_id, inputs=inputs, started_seq=started.seq, tools=registry.schemas())
        rounds: list[RoundView] = []
        result = TurnResult(turn_id, "completed")
        tool_errors = 0
        for round_no in range(limits.max_rounds):
            try:
                view = refresh(self.store, base_view, tuple(rounds)) if rounds else base_view
                assembly = assemble(build_sections(view, counter), budget)
            except ContextOverflow as e:
                # The same inputs overflow the same way again: rejected, never re-queued.
                why = f"context: {'' if rounds else 'even with long inputs by reference, '}{e}"
                return self._settle(agent_id, result, "failed", reason=why, rejected=inputs)
            refusal = self._over_budget(result, limits, assembly.used_tokens)
            if refusal:
                return self._settle(agent_id, result, "failed", reason=refusal, rejected=inputs)
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
                result.rounds = round_no + 1
                return self._model_failed(agent_id, result, settings.model, e, inputs)
            self._cold_start(agent_id, turn_id, round_no, reply)
            result.rounds = round_no + 1
            result.usage = _add(result.usage, reply.usage)
            if reply.cost_usd is not None:
                result.cost_usd = round((result.cost_usd or 0.0) + reply.cost_usd, 8)
            calls = reply.tool_calls
            responded = ev.ModelResponded(
                turn_id=turn_id,
                round=round_no,
                model=reply.model or settings.model,
                content=reply.content,
                tool_calls=calls,
                finish_reason=reply.finish_reason,
                usage=reply.usage,
                cost_usd=reply.cost_usd,
                latency_ms=reply.latency_ms,
            )
            if not calls:
                # The final answer and the settle: one transaction (exactly-once answers).
                result.reply = reply.content or ""
                return self._settle(agent_id, result, "completed", answer=responded)
            recorded = self._append(
                agent_id,
                turn_id,
                responded,
                *[ev.ToolCalled(call_id=c.call_id, tool=c.tool, arguments=c.arguments) for c in calls],
            )
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
                    rejected=inputs,
                )
        return self._settle(
            agent_id,
            result,
            "failed",
            reason=f"no final answer after {limits.max_rounds} model rounds",
            rejected=inputs,
        )

    def _cold_start(self, agent_id: str, turn_id: str, round_no: int, reply: ModelReply) -> None:
        """A call that waited for its model to start: the wait is its own event, never model latency."""
        if reply.start_ms is not None:
            what = reply.start_what or "model"
            started = ev.ModelStarted(turn_id=turn_id, round=round_no, what=what, duration_ms=reply.start_ms)
            self._append(agent_id, turn_id, started)

    def _model_failed(
        self, agent_id: str, result: TurnResult, model: str, e: ModelError, inputs: list[int]
    ) -> TurnResult:
        """Record the failed call and settle: a transient failure re-queues the inputs (they wait
        for the model to come back), any other rejects them (the same call fails the same way)."""
        responded = ev.ModelResponded(
            turn_id=result.turn_id, round=result.rounds - 1, model=model, error=str(e), error_kind=e.kind
        )
        self._append(agent_id, result.turn_id, responded)
        reason = f"model error ({e.kind}): {e}"
        if e.retryable or isinstance(e, (ModelNotConfigured, ModelKeyMissing)):
            # Transient, or fixed by configuring the agent: the inputs wait (re-queued).
            return self._settle(agent_id, result, "failed", reason=reason, requeue=True, notify=True)
        return self._settle(agent_id, result, "failed", reason=reason, rejected=inputs)

    def _unavailable(self, agent: AgentState, e: ModelError | ConfigError | UsageError) -> TurnResult:
        """The agent's model cannot be set up (none configured, unknown provider, key variable
        unset): settle a turn that re-queues the inputs (the operator may fix the configuration,
        and the host retries with backoff) so the failure is visible instead of escaping the turn
        and spinning the scheduler. RFC 0002, "Failures that wait for the operator"."""
        turn_id = new_id("turn")
        inputs = list(agent.pending_inputs)[: self.store.settings.runtime.max_inputs_per_turn]
        self._start(agent.agent_id, turn_id, inputs)
        reason = f"model unavailable: {e}"
        result = TurnResult(turn_id, "failed")
        return self._settle(agent.agent_id, result, "failed", reason=reason, requeue=True, notify=True)

    # --- admission --------------------------------------------------------------------------

    def _admit(
        self, agent: AgentState, budget: Budget, counter: TokenCounter, tools: list[dict[str, Any]]
    ) -> list[int]:
        """The oldest pending inputs (at most ``max_inputs_per_turn``) whose shortened forms fit
        ``INPUT_SHARE`` of the budget the prompt's pinned minimum (without inputs) leaves free;
        always the first. An input too long for that is shown by reference when its turn comes
        (the input section's leanest form)."""
        candidates = list(agent.pending_inputs)[: self.store.settings.runtime.max_inputs_per_turn]
        if len(candidates) <= 1:
            return candidates
        # A provisional view, as the turn would see it if it started now; only sizes are read.
        head = self.store.ledger.head()
        view = gather(self.store, agent.agent_id, inputs=candidates, started_seq=head + 1, tools=tools)
        fixed = pinned_minimum([s for s in build_sections(view, counter) if s.key != "input"])
        room = (budget.limit - fixed - MESSAGE_OVERHEAD) * INPUT_SHARE
        taken, used = [], 0
        for seq, cost in zip(candidates, input_tokens(view, counter), strict=True):
            if taken and used + cost > room:
                break
            taken.append(seq)
            used += cost
        return taken

    # --- steps ------------------------------------------------------------------------------

    def _start(self, agent_id: str, turn_id: str, inputs: list[int]) -> Event:
        """Append ``turn.started``, which takes ``inputs`` out of the agent's queue."""
        active = self.store.working_memory(agent_id).get("active_work_item")
        started = NewEvent(
            agent_id,
            ev.TurnStarted(turn_id=turn_id, inputs=inputs),
            origin="runtime:turn",
            authority="runtime",
            turn_id=turn_id,
            work_item_id=active,
        )
        return self.store.append(started)[0]

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
        rejected: list[int] | None = None,
        answer: ev.ModelResponded | None = None,
        notify: bool = False,
    ) -> TurnResult:
        """Append ``turn.settled`` (after ``answer``, the final reply, in the same transaction);
        ``rejected`` inputs are settled unanswered, with a brief telling the operator why. With
        ``notify`` (re-queued inputs) a brief says why they wait, once per distinct reason: not
        when the agent's last turn already failed for the same one (a retry)."""
        repeated = notify and self.store.agent(agent_id).last_error == reason
        result.outcome = outcome
        result.reason = reason
        result.requeued = requeue
        result.rejected = list(rejected or [])
        payloads: list[ev.PayloadBase] = [answer] if answer is not None else []
        payloads.append(
            ev.TurnSettled(
                turn_id=result.turn_id,
                outcome=outcome,
                reason=reason,
                rounds=result.rounds,
                tool_calls=result.tool_calls,
                reply=result.reply,
                requeue=requeue,
                rejected=list(rejected or []),
                usage=result.usage,
                cost_usd=result.cost_usd,
            )
        )
        if rejected:
            payloads.append(rejection_brief(rejected, reason or outcome))
        elif notify and not repeated:
            payloads.append(waiting_brief(reason or outcome))
        self._append(agent_id, result.turn_id, *payloads)
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
        summary = a.manifest.summary()
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
            manifest=canonical_json(a.manifest.to_json()).decode(),
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


def rejection_brief(inputs: list[int], reason: str) -> ev.BriefDelivered:
    """The operator's notice that ``inputs`` were settled unanswered, and why."""
    refs = ", ".join(f"event:{s}" for s in inputs)
    noun = "input" if len(inputs) == 1 else "inputs"
    return ev.BriefDelivered(
        kind="error",
        text=f"Not answered: {noun} {refs} rejected by a failed turn: {reason.rstrip('.')}. Send it again to retry.",
    )


def waiting_brief(reason: str) -> ev.BriefDelivered:
    """The operator's notice that a turn failed and its inputs wait to be retried, and why."""
    return ev.BriefDelivered(
        kind="error",
        text=(
            f"Not answered yet: {reason.rstrip('.')}. The input stays queued and is retried with backoff; "
            "fix the agent's model (holon agent configure, or /model in the REPL) and it runs."
        ),
    )


def _add(a: ev.Usage, b: ev.Usage) -> ev.Usage:
    return ev.Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )
