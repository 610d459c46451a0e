"""The turn runner: the step machine's driver and its steps (see ``holon.runtime.turn``).

``TurnRunner.run`` resolves the agent's model, opens the turn and drives its steps until one
settles::

    step = self._open(agent, provider, settings)   # turn.started + the first prompt
    while not isinstance(step, Settle):
        step = await self._advance(step)

Each step is a small method that commits what RFC 0002 says it commits and returns the next
step, carrying a new ``TurnState``:

* ``_open``: admission, ``turn.started``, then ``_assemble`` in the same transaction;
* ``_assemble`` (not a step of its own): the round limit and the prompt (``ContextOverflow``
  rejects the inputs), then the token and cost limits, checked before anything is spent; a prompt
  within them appends ``context.assembled`` + ``model.requested`` to the open transaction;
* ``_request``: the call (through the retry policy; its record is committed); a failed call
  records its ``model.responded`` error and settles;
* ``_record``: a cold start's ``model.started``; then the final answer goes on to settle (it
  commits with ``turn.settled``), or ``model.responded`` + every ``tool.called`` commit together;
* ``_run_tools``: per call, its emitted events + ``tool.resulted`` in one transaction, the last
  call's with what follows it: ``waiting`` settles, too many failed calls fail the turn, anything
  else assembles the next round's prompt in that same transaction;
* ``_settle``: ``turn.settled`` (after the answer, in one transaction) and the operator's brief.

A transaction that holds more than one append (``_one_commit``) writes the projections after each
append (uncommitted, on the ledger's one connection), so what is read in between (the view of the
turn, refreshed working memory) sees it; nothing runs between its appends but assembly, which
neither awaits nor calls a tool.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import assert_never

from holon.clock import Clock
from holon.config import ContextSettings
from holon.context.assembler import ContextOverflow, assemble
from holon.context.render import with_cache_markers
from holon.context.sections import build_sections, update_sections
from holon.context.tokens import TokenCounter
from holon.context.view import RoundView, ToolEvidence, gather, refresh
from holon.errors import ConfigError, ModelError, ModelKeyMissing, ModelNotConfigured, TurnAlreadySettled, UsageError
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.providers.base import (
    ModelReply,
    ModelRequest,
    ModelSettings,
    ModelWindow,
    Provider,
    context_window_of,
)
from holon.runtime.providers.retry import RetryPolicy, Sleep, complete_with_retry
from holon.runtime.tools.base import ToolContext, ToolRegistry, ToolResult, ToolServices
from holon.runtime.turn.briefs import rejection_brief, waiting_brief
from holon.runtime.turn.prompt import admit, context_event, request_budget
from holon.runtime.turn.state import (
    ProviderResolver,
    Record,
    Request,
    RunTools,
    Settle,
    Step,
    TurnLimits,
    TurnObserver,
    TurnPlan,
    TurnResult,
    TurnState,
    turn_limits,
)
from holon.runtime.views import AgentMemory, StoreViews

__all__ = ["TurnRunner"]

_Append = Callable[..., list[Event]]
"""Appends events to the open transaction (``TurnRunner._one_commit``)."""


class TurnRunner:
    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        resolve_provider: ProviderResolver,
        *,
        clock: Clock,
        services: ToolServices,
        limits: TurnLimits | None = None,
        retry: RetryPolicy | None = None,
        observer: TurnObserver | None = None,
        sleep: Sleep | None = None,
        context: ContextSettings | None = None,
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
        self._counters: dict[str, TokenCounter] = {}

    # --- the turn ---------------------------------------------------------------------------

    async def run(self, agent_id: str) -> TurnResult | None:
        """Run one turn over the agent's pending inputs; ``None`` when there are none."""
        agent = self.store.agent_state(agent_id) or self.store.agent(agent_id)
        if not agent.pending_inputs:
            return None
        try:
            provider, settings = self.resolve_provider(agent)  # fails before anything is spent
            # The model's window, asked of the provider before the turn starts (a model process may
            # have to start first): the budget is known, never a guess that depends on timing.
            known = (
                ModelWindow(settings.context_window)
                if settings.context_window
                else await context_window_of(provider, settings.model)
            )
        except (ModelError, ConfigError, UsageError) as e:
            return self._unavailable(agent, e)
        step: Step = self._open(agent, provider, settings, known)
        while not isinstance(step, Settle):
            step = await self._advance(step)
        return self._settle(step)

    async def _advance(self, step: Request | Record | RunTools) -> Step:
        match step:
            case Request():
                return await self._request(step)
            case Record():
                return self._record(step)
            case RunTools():
                return await self._run_tools(step)
            case _:
                assert_never(step)

    def _open(
        self, agent: AgentState, provider: Provider, settings: ModelSettings, known: ModelWindow
    ) -> Request | Settle:
        """Admit the inputs, append ``turn.started`` (and the model start the window's question
        waited for) and assemble the first round's prompt: one transaction with the round's
        ``context.assembled`` + ``model.requested``."""
        with self._one_commit() as append:
            state = self._begin(agent, provider, settings, known, append)
            return self._assemble(state, append)

    def _begin(
        self, agent: AgentState, provider: Provider, settings: ModelSettings, known: ModelWindow, append: _Append
    ) -> TurnState:
        """Admit the inputs and append ``turn.started``: the turn's plan and its first state."""
        turn_id = new_id("turn")
        settings, budget = request_budget(settings, self.context, known.window)
        counter = self._counter(settings.model)
        registry = self.registry.for_agent(agent)
        # Oldest first, while they fit (at least one, at most max_inputs_per_turn): the rest stay
        # pending for the next turn.
        inputs = admit(self.store, agent, budget, counter, registry.schemas())
        started = append(self._started(agent.agent_id, turn_id, inputs))[0]
        if known.start_ms is not None:  # before the first request: the trace draws it before the turn
            what = known.start_what or "model"
            cold = ev.ModelStarted(turn_id=turn_id, round=0, what=what, duration_ms=known.start_ms)
            append(*self._events(agent.agent_id, turn_id, [cold]))
        view = gather(
            self.store, agent.agent_id, inputs=inputs, started_seq=started.seq, tools=registry.schemas(),
            started_us=started.ts_us,
        )  # fmt: skip
        plan = TurnPlan(
            turn_id, agent, provider, settings, budget, counter, registry, turn_limits(self.limits, agent),
            tuple(inputs), view,
        )  # fmt: skip
        return TurnState(plan)

    # --- the steps --------------------------------------------------------------------------

    def _assemble(self, state: TurnState, append: _Append) -> Request | Settle:
        """The limits, then the next prompt; a prompt within them is recorded (``context.assembled``
        + ``model.requested``, with ``append``) before the model is asked."""
        plan = state.plan
        if state.rounds >= plan.limits.max_rounds:
            why = f"no final answer after {plan.limits.max_rounds} model rounds"
            return Settle(state, "failed", reason=why, rejected=plan.inputs)
        try:
            if state.sections:  # a later round: only what the round changed is built and laid out again
                view = refresh(self.store, plan.view, state.history)
                sections = update_sections(list(state.sections), plan.view, view, plan.counter)
                assembly = assemble(sections, plan.budget, previous=state.assembly)
            else:
                sections = build_sections(plan.view, plan.counter)
                assembly = assemble(sections, plan.budget)
        except ContextOverflow as e:
            # The same inputs overflow the same way again: rejected, never re-queued.
            why = f"context: {'' if state.history else 'even with long inputs by reference, '}{e}"
            return Settle(state, "failed", reason=why, rejected=plan.inputs)
        refusal = state.over_budget(assembly.used_tokens)
        if refusal:
            return Settle(state, "failed", reason=refusal, rejected=plan.inputs)
        # What the model is about to see, and that it was asked: committed before the call.
        round_no = state.rounds
        record = context_event(
            state.turn_id, round_no, plan.budget, assembly, record_prompts=self.context.record_prompts,
            base=state.first_record,
        )  # fmt: skip
        requested = ev.ModelRequested(
            turn_id=state.turn_id,
            round=round_no,
            model=plan.settings.model,
            messages=len(assembly.messages),
            tools=len(assembly.tools),
            prompt_tokens_est=assembly.used_tokens,
        )
        recorded = append(*self._events(state.agent_id, state.turn_id, (record, requested)))[0]
        first = state.first_record or (recorded.seq, assembly.manifest)
        return Request(
            dataclasses.replace(state, sections=tuple(sections), first_record=first, assembly=assembly), assembly
        )

    async def _request(self, step: Request) -> Record | Settle:
        state, plan, assembly = step.state, step.state.plan, step.assembly
        round_no, model = state.rounds, plan.settings.model
        messages = with_cache_markers(assembly.messages, model)
        request = ModelRequest(messages=messages, tools=assembly.tools, settings=plan.settings)
        try:
            reply = await complete_with_retry(
                plan.provider,
                request,
                policy=self.retry,
                on_text=lambda s: self.observer.on_text(state.agent_id, s),
                sleep=self._sleep or asyncio.sleep,
            )
        except ModelError as e:
            return self._model_failed(dataclasses.replace(state, rounds=round_no + 1), model, e)
        return Record(state, reply)

    def _record(self, step: Record) -> RunTools | Settle:
        reply, round_no = step.reply, step.state.rounds
        if reply.start_ms is not None:
            # A call that waited for its model to start: the wait is its own event, never model latency.
            what = reply.start_what or "model"
            started = ev.ModelStarted(turn_id=step.state.turn_id, round=round_no, what=what, duration_ms=reply.start_ms)
            self._append(step.state, started)
        state = step.state.replied(reply)
        responded = ev.ModelResponded(
            turn_id=state.turn_id,
            round=round_no,
            model=reply.model or state.plan.settings.model,
            content=reply.content,
            tool_calls=reply.tool_calls,
            finish_reason=reply.finish_reason,
            usage=reply.usage,
            cost_usd=reply.cost_usd,
            latency_ms=reply.latency_ms,
        )
        if not reply.tool_calls:
            # The final answer and the settle: one transaction (exactly-once answers).
            return Settle(state, "completed", reply=reply.content or "", answer=responded)
        recorded = self._append(
            state,
            responded,
            *[ev.ToolCalled(call_id=c.call_id, tool=c.tool, arguments=c.arguments) for c in reply.tool_calls],
        )
        return RunTools(state, reply, tuple(e.seq for e in recorded[1:]))

    async def _run_tools(self, step: RunTools) -> Request | Settle:
        """Run the recorded calls in order, each committing its events and ``tool.resulted``; the
        last call's commit also holds the next round's prompt and ``model.requested``, when the
        turn goes on (nothing runs between them: no call can be lost to it)."""
        state, reply = step.state, step.reply
        calls = list(zip(reply.tool_calls, step.called_seq, strict=True))
        done: list[tuple[ev.ToolCallSpec, int, ToolResult, int]] = []
        for call, called_seq in calls[:-1]:
            result, events = await self._call_tool(state, call)
            done.append((call, called_seq, result, self.store.append(*events)[-1].seq))
            self.observer.on_tool_result(state.agent_id, result)
        call, called_seq = calls[-1]
        result, events = await self._call_tool(state, call)
        with self._one_commit() as append:
            done.append((call, called_seq, result, append(*events)[-1].seq))
            after = self._after_tools(state, reply, done)
            nxt = after if isinstance(after, Settle) else self._assemble(after, append)
        self.observer.on_tool_result(state.agent_id, result)
        return nxt

    @staticmethod
    def _after_tools(
        state: TurnState, reply: ModelReply, done: list[tuple[ev.ToolCallSpec, int, ToolResult, int]]
    ) -> TurnState | Settle:
        """The state after a round's calls; ``Settle`` when one ended the turn (``waiting``) or
        too many failed."""
        evidence = tuple(
            ToolEvidence(call.call_id, call.tool, call.arguments, r.status, r.output, called_seq, result_seq)
            for call, called_seq, r, result_seq in done
        )
        state = dataclasses.replace(
            state,
            tool_calls=state.tool_calls + len(done),
            tool_errors=state.tool_errors + sum(r.is_error for _c, _s, r, _q in done),
            history=(*state.history, RoundView(state.rounds - 1, reply.content, evidence)),
        )
        if any(r.ends_turn == "waiting" for _c, _s, r, _q in done):
            return Settle(state, "waiting", reply=reply.content)
        limit = state.plan.limits.max_tool_errors
        if state.tool_errors > limit:
            why = f"more than {limit} failed tool calls in one turn"
            return Settle(state, "failed", reason=why, rejected=state.plan.inputs)
        return state

    def _settle(self, step: Settle) -> TurnResult:
        result = step.state.result(
            step.outcome, reply=step.reply, reason=step.reason, requeued=step.requeue, rejected=step.rejected
        )
        return self._commit_settle(step.state.agent_id, result, step.answer, notify=step.notify)

    # --- failures ---------------------------------------------------------------------------

    def _model_failed(self, state: TurnState, model: str, e: ModelError) -> Settle:
        """Record the failed call and settle: a transient failure re-queues the inputs (they wait
        for the model to come back), any other rejects them (the same call fails the same way)."""
        responded = ev.ModelResponded(
            turn_id=state.turn_id, round=state.rounds - 1, model=model, error=str(e), error_kind=e.kind
        )
        self._append(state, responded)
        reason = f"model error ({e.kind}): {e}"
        if e.retryable or isinstance(e, (ModelNotConfigured, ModelKeyMissing)):
            # Transient, or fixed by configuring the agent: the inputs wait (re-queued).
            return Settle(state, "failed", reason=reason, requeue=True, notify=True)
        return Settle(state, "failed", reason=reason, rejected=state.plan.inputs)

    def _unavailable(self, agent: AgentState, e: ModelError | ConfigError | UsageError) -> TurnResult:
        """The agent's model cannot be set up (none configured, unknown provider, key variable
        unset): settle a turn that re-queues the inputs (the operator may fix the configuration,
        and the host retries with backoff) so the failure is visible instead of escaping the turn
        and spinning the scheduler. RFC 0002, "Failures that wait for the operator"."""
        turn_id = new_id("turn")
        inputs = list(agent.pending_inputs)[: self.store.settings.runtime.max_inputs_per_turn]
        self._start(agent.agent_id, turn_id, inputs)
        result = TurnResult(turn_id, "failed", reason=f"model unavailable: {e}", requeued=True)
        return self._commit_settle(agent.agent_id, result, notify=True)

    # --- commits ----------------------------------------------------------------------------

    def _start(self, agent_id: str, turn_id: str, inputs: list[int]) -> Event:
        """Append ``turn.started``, which takes ``inputs`` out of the agent's queue."""
        return self.store.append(self._started(agent_id, turn_id, inputs))[0]

    def _started(self, agent_id: str, turn_id: str, inputs: list[int]) -> NewEvent:
        wm = self.store.working_memory_state(agent_id)
        active = wm.active_work_item if wm is not None else None
        return NewEvent(
            agent_id,
            ev.TurnStarted(turn_id=turn_id, inputs=inputs, node=self.store.settings.node.name or None),
            origin="runtime:turn",
            authority="runtime",
            turn_id=turn_id,
            work_item_id=active,
        )

    @contextmanager
    def _one_commit(self) -> Iterator[_Append]:
        """One transaction that a step appends to more than once, reading what it appended in
        between (``Store``'s reads are served from the projector's folded rows, written or not),
        and everything commits together at the end.

        An error of the step itself (a bug while assembling) commits what was appended before
        it, as when each append was its own transaction, then propagates; a failed append rolls
        the whole transaction back."""
        ledger = self.store.ledger
        broken = False
        failure: Exception | None = None
        with ledger.transaction() as tx:

            def append(*events: NewEvent) -> list[Event]:
                nonlocal broken
                try:
                    stored = tx.append(*events)
                except BaseException:
                    broken = True
                    raise
                return stored

            try:
                yield append
            except Exception as e:
                if broken:
                    raise
                failure = e
        if failure is not None:
            raise failure

    async def _call_tool(self, state: TurnState, call: ev.ToolCallSpec) -> tuple[ToolResult, list[NewEvent]]:
        """Run one recorded call: its result, and its emitted events + ``tool.resulted`` to commit
        together."""
        agent, turn_id = state.plan.agent, state.turn_id
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
        result = await state.plan.registry.execute(call, ctx)
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
        return result, events

    def _commit_settle(
        self, agent_id: str, result: TurnResult, answer: ev.ModelResponded | None = None, *, notify: bool = False
    ) -> TurnResult:
        """Append ``turn.settled`` (after ``answer``, the final reply, in the same transaction);
        rejected inputs are settled unanswered, with a brief telling the operator why. With
        ``notify`` (re-queued inputs) a brief says why they wait, once per distinct reason: not
        when the agent's last turn already failed for the same one (a retry).

        ``TurnAlreadySettled``, with nothing appended, when the turn is no longer the agent's
        current one, read under the ledger's lock held over the append: something
        else settled it (recovery, as a dead process's) and re-queued its inputs, which the
        next turn answers. Appending this settle too would answer them twice."""
        reason = result.reason
        repeated = notify and self.store.agent(agent_id).last_error == reason
        payloads: list[ev.Payload] = [answer] if answer is not None else []
        payloads.append(
            ev.TurnSettled(
                turn_id=result.turn_id,
                outcome=result.outcome,
                reason=reason,
                rounds=result.rounds,
                tool_calls=result.tool_calls,
                reply=result.reply,
                requeue=result.requeued,
                rejected=list(result.rejected),
                usage=result.usage,
                cost_usd=result.cost_usd,
            )
        )
        if result.rejected:
            payloads.append(rejection_brief(result.rejected, reason or result.outcome))
        elif notify and not repeated:
            payloads.append(waiting_brief(reason or result.outcome))
        with self.store.ledger.reading():  # the ledger's lock: no other settle of this process in between
            agent = self.store.agent_state(agent_id)
            if agent is not None and agent.current_turn_id != result.turn_id:
                raise TurnAlreadySettled(
                    f"turn {result.turn_id} of agent {agent_id} was already settled: its {result.outcome} settle "
                    "is not recorded",
                    agent_id=agent_id,
                    turn_id=result.turn_id,
                )
            self.store.append(*self._events(agent_id, result.turn_id, payloads))  # ``Store.append``: the one door
        self.observer.on_settled(agent_id, result)
        return result

    def _append(self, state: TurnState, *payloads: ev.Payload) -> list[Event]:
        return self.store.append(*self._events(state.agent_id, state.turn_id, payloads))

    @staticmethod
    def _events(agent_id: str, turn_id: str, payloads: Sequence[ev.Payload]) -> list[NewEvent]:
        return [NewEvent(agent_id, p, origin="runtime:turn", authority="runtime", turn_id=turn_id) for p in payloads]

    def _counter(self, model: str) -> TokenCounter:
        counter = self._counters.get(model)
        if counter is None:
            counter = self._counters[model] = TokenCounter(model)
        return counter
