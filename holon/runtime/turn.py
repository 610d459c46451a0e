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

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holon.clock import Clock
from holon.errors import ModelError
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.prompt import HISTORY_TURNS, PromptParts, build_messages, read_agents_md
from holon.runtime.providers.base import ModelRequest, ModelSettings, Provider
from holon.runtime.providers.retry import RetryPolicy, complete_with_retry
from holon.runtime.tools.base import ToolContext, ToolRegistry, ToolResult
from holon.runtime.views import StoreViews

__all__ = ["TurnLimits", "TurnObserver", "TurnResult", "TurnRunner"]

DISPLAY_CAP = 8_000
"""Characters of one tool output shown to the model; the rest is fetched with read_output."""


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


def _shown(result: ToolResult) -> str:
    text = result.output
    if len(text) <= DISPLAY_CAP:
        return text
    head, tail = text[: DISPLAY_CAP * 2 // 3], text[-DISPLAY_CAP // 4 :]
    omitted = len(text) - len(head) - len(tail)
    return (
        f"{head}\n[... {omitted} characters omitted of {len(text)}; the full output is stored: call "
        f"read_output with ref 'out:{result.call.call_id}' and an offset to read more ...]\n{tail}"
    )


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

    # --- the turn ---------------------------------------------------------------------------

    async def run(self, agent_id: str) -> TurnResult | None:
        """Run one turn over the agent's pending inputs; ``None`` when there are none."""
        agent = self.store.agent(agent_id)
        if not agent.pending_inputs:
            return None
        provider, settings = self.resolve_provider(agent)  # raises before anything is spent
        limits = self._limits(agent)
        turn_id = new_id("turn")
        inputs = list(agent.pending_inputs)
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
        messages = build_messages(self.store.ledger, self._parts(agent, inputs, started.seq))
        tools = self.registry.schemas()
        result = TurnResult(turn_id, "completed")
        tool_errors = 0
        for round_no in range(limits.max_rounds):
            refusal = self._over_budget(result, limits, messages)
            if refusal:
                return self._settle(agent_id, result, "failed", reason=refusal)
            self._append(
                agent_id,
                turn_id,
                ev.ModelRequested(
                    turn_id=turn_id, round=round_no, model=settings.model, messages=len(messages), tools=len(tools)
                ),
            )
            # A snapshot: the runner keeps appending to `messages`, and a provider (or a test)
            # may hold on to the request it was given.
            request = ModelRequest(messages=list(messages), tools=tools, settings=settings)
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
            self._append(
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
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.content or None,
                    "tool_calls": [
                        {"id": c.call_id, "type": "function", "function": {"name": c.tool, "arguments": c.arguments}}
                        for c in calls
                    ],
                }
            )
            waiting = False
            for call in calls:
                tool_result = await self._call_tool(agent, turn_id, call)
                result.tool_calls += 1
                tool_errors += tool_result.is_error
                waiting = waiting or tool_result.ends_turn == "waiting"
                messages.append({"role": "tool", "tool_call_id": call.call_id, "content": _shown(tool_result)})
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

    async def _call_tool(self, agent: AgentState, turn_id: str, call: ev.ToolCallSpec) -> ToolResult:
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
        )
        result = await self.registry.execute(call, ctx)
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
        self.store.append(*events)
        self.observer.on_tool_result(agent.agent_id, result)
        return result

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

    # --- inputs to the turn ------------------------------------------------------------------

    def _parts(self, agent: AgentState, inputs: list[int], started_seq: int) -> PromptParts:
        ledger = self.store.ledger
        recent = ledger.recent(
            agent.agent_id, ("turn.started", "turn.settled"), limit=HISTORY_TURNS * 2 + 2, before=started_seq
        )
        starts = {e.payload.turn_id: e for e in recent if isinstance(e.payload, ev.TurnStarted)}
        history = []
        for e in recent:
            p = e.payload
            # A turn whose inputs were re-queued (interrupted, or failed transiently) is not history:
            # its inputs come back as a later turn's inputs and must not be shown twice.
            if isinstance(p, ev.TurnSettled) and not (p.outcome == "interrupted" or p.requeue) and p.turn_id in starts:
                start = starts[p.turn_id].payload
                assert isinstance(start, ev.TurnStarted)
                reply = ledger.resolve(p.reply)
                text = reply if isinstance(reply, str) or reply is None else (reply.text or reply.preview)
                history.append((ledger.get_many(start.inputs), text))
        resumed: list[Event] = []
        if agent.resume_from_seq is not None:
            resumed = [
                e
                for e in ledger.read(agent.resume_from_seq - 1, agent_id=agent.agent_id)
                if e.seq < started_seq and e.type in ("model.responded", "tool.resulted")
            ]
        wm = self.store.working_memory(agent.agent_id)
        return PromptParts(
            read_agents_md(Path(agent.home)), wm, history[-HISTORY_TURNS:], ledger.get_many(inputs), resumed
        )

    def _limits(self, agent: AgentState) -> TurnLimits:
        s = agent.settings
        base = self.limits
        return TurnLimits(
            max_rounds=int(s.get("max_rounds", base.max_rounds)),  # type: ignore[arg-type]
            max_tokens=int(s.get("max_tokens_per_turn", base.max_tokens)),  # type: ignore[arg-type]
            max_cost_usd=s.get("max_cost_per_turn_usd", base.max_cost_usd),  # type: ignore[arg-type]
            max_tool_errors=base.max_tool_errors,
        )

    @staticmethod
    def _over_budget(result: TurnResult, limits: TurnLimits, messages: list[dict[str, Any]]) -> str | None:
        estimate = len(json.dumps(messages, ensure_ascii=False)) // 4
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
