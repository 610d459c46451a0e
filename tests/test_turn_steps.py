"""The turn as a step machine: the steps it passes through, the state it carries, and the tool
services a turn without a host offers (RFC 0002, "The turn as a step machine")."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from holon.clock import FakeClock
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelSettings
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call, tool_calls
from holon.runtime.tasks import TaskManager
from holon.runtime.tools import TaskServices, builtin_registry
from holon.runtime.turn import TurnLimits, TurnRunner, TurnState
from holon.runtime.turn.state import Record, Request, RunTools, Settle, Step

SETTINGS = ModelSettings(model="scripted", context_window=128_000)


def _runner(store: Store, clock: FakeClock, model: ScriptedProvider, **kw: object) -> tuple[TurnRunner, list[Step]]:
    runner = TurnRunner(
        store, builtin_registry(), lambda _a: (model, SETTINGS), clock=clock,
        services=TaskServices(TaskManager.for_store(store, clock)), **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    seen: list[Step] = []
    advance = runner._advance

    async def recording(step: Request | Record | RunTools) -> Step:
        seen.append(step)
        nxt = await advance(step)
        if isinstance(nxt, Settle):
            seen.append(nxt)
        return nxt

    runner._advance = recording  # type: ignore[method-assign]
    return runner, seen


def _ask(store: Store, agent_id: str, text: str) -> None:
    store.append(NewEvent(agent_id, ev.MessageReceived(text=text, sender="operator", channel="cli"), origin="operator:cli", authority="operator"))  # fmt: skip


def test_a_tool_round_then_an_answer_walks_the_steps_in_order(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    _ask(store, agent.agent_id, "brief me")
    model = ScriptedProvider([tool_call("brief", {"kind": "progress", "text": "working"}), reply("done")])
    runner, seen = _runner(store, clock, model)
    result = asyncio.run(runner.run(agent.agent_id))
    assert result is not None and result.outcome == "completed" and result.reply == "done"
    kinds = [type(s).__name__ for s in seen]
    # The first prompt is assembled as the turn opens, each later one by the round's tool step
    # (in the transaction of its last call's result): the machine walks from request to request.
    assert kinds == ["Request", "Record", "RunTools", "Request", "Record", "Settle"]
    # One state value, replaced (never mutated) from step to step.
    states = [s.state for s in seen]
    assert all(isinstance(s, TurnState) for s in states)
    assert [s.rounds for s in states] == [0, 0, 1, 1, 1, 2]
    assert [s.tool_calls for s in states] == [0, 0, 0, 1, 1, 1]
    assert len(states[-1].history) == 1 and states[-1].history[0].calls[0].tool == "brief"
    assert states[0].history == ()  # the first state is untouched by the later steps
    with pytest.raises(dataclasses.FrozenInstanceError):
        states[0].rounds = 5  # type: ignore[misc]
    final = seen[-1]
    assert isinstance(final, Settle) and final.answer is not None and final.answer.content == "done"


def test_a_turn_settled_by_someone_else_is_not_settled_again(store: Store, clock: FakeClock) -> None:
    """A second ``turn.settled`` for one turn is refused at its source (RFC 0008, the five-minute
    chaos run): recovery settled the running turn ``interrupted`` and re-queued its input; the
    turn's own final answer and settle are then not recorded (``TurnAlreadySettled``), so the input
    is answered once, by the next turn."""
    from holon.errors import TurnAlreadySettled
    from holon.runtime.recovery import settle_unfinished_turn

    agent = create_agent(store, "alice")
    _ask(store, agent.agent_id, "hello")
    runner, _seen = _runner(store, clock, ScriptedProvider([reply("first"), reply("second")]))
    advance = runner._advance

    async def recovered_meanwhile(step: Request | Record | RunTools) -> Step:
        if isinstance(step, Record):  # the model answered; recovery settles the turn first
            settle_unfinished_turn(store, store.agent(agent.agent_id))
        return await advance(step)

    runner._advance = recovered_meanwhile  # type: ignore[method-assign]
    with pytest.raises(TurnAlreadySettled):
        asyncio.run(runner.run(agent.agent_id))
    events = list(store.ledger.read(0, agent_id=agent.agent_id))
    settles = [e.payload for e in events if isinstance(e.payload, ev.TurnSettled)]
    assert [s.outcome for s in settles] == ["interrupted"]
    assert not [e for e in events if isinstance(e.payload, ev.ModelResponded)]  # "first" not recorded
    state = store.agent(agent.agent_id)
    assert state.current_turn_id is None and len(state.pending_inputs) == 1  # re-queued
    runner._advance = advance  # type: ignore[method-assign]
    result = asyncio.run(runner.run(agent.agent_id))
    assert result is not None and result.reply == "second" and not store.agent(agent.agent_id).pending_inputs


def test_the_round_limit_is_checked_before_the_next_request(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    _ask(store, agent.agent_id, "loop")
    model = ScriptedProvider([tool_call("list_work_items", {}) for _ in range(3)])
    runner, seen = _runner(store, clock, model, limits=TurnLimits(max_rounds=2))
    result = asyncio.run(runner.run(agent.agent_id))
    assert result is not None and result.outcome == "failed" and result.rounds == 2
    assert result.reason == "no final answer after 2 model rounds"
    assert [type(s).__name__ for s in seen][-2:] == ["RunTools", "Settle"]
    assert model.remaining == 1  # the third call was never made


def test_spawn_agent_without_a_host_is_a_retry_for_the_model(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    _ask(store, agent.agent_id, "delegate")
    model = ScriptedProvider([tool_call("spawn_agent", {"task": "x"}), reply("ok")])
    runner, _ = _runner(store, clock, model)
    result = asyncio.run(runner.run(agent.agent_id))
    assert result is not None and result.outcome == "completed"
    resulted = [e.payload for e in store.ledger.recent(agent.agent_id, ("tool.resulted",), limit=10)]
    assert [(p.status, p.output) for p in resulted if isinstance(p, ev.ToolResulted)] == [
        ("error", "child agents are not available here")
    ]


@pytest.mark.parametrize("window", [128_000, 8_192])
def test_a_later_rounds_prompt_is_the_one_a_whole_layout_gives(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """A later round's prompt is laid out from the last round's (``assemble(previous=...)``,
    issue 18, step 7): each one is compared, in the turn, with a whole layout of the same
    sections (messages, manifest, digest, and the ``context.assembled`` record it makes), over
    rounds whose tools open a work item, change its todos, complete it, or change nothing, with
    the whole budget and with one small enough to compact and omit."""
    from holon.runtime.turn import runner as runner_module
    from holon.runtime.turn.prompt import context_event

    settings = ModelSettings(model="scripted", context_window=window)
    real = runner_module.assemble
    compared: list[int] = []

    def both_ways(sections, budget, *, previous=None):  # type: ignore[no-untyped-def]
        again = real(sections, budget, previous=previous)
        if previous is not None:
            whole = real(sections, budget)
            assert again == whole and again.messages_json == whole.messages_json
            assert again.manifest.json_bytes() == whole.manifest.json_bytes()
            for base in (None, (1, previous.manifest)):
                ours = context_event("turn_x", 1, budget, again, record_prompts=True, base=base)
                theirs = context_event("turn_x", 1, budget, whole, record_prompts=True, base=base)
                assert ours.model_dump_json() == theirs.model_dump_json()
            compared.append(len(sections))
        return again

    monkeypatch.setattr(runner_module, "assemble", both_ways)
    agent = create_agent(store, "alice")
    todos = {"title": "migrate the ledger", "objective": "every row copied", "todos": ["copy rows", "verify"]}
    turns = [
        [reply("hello")],
        [reply("noted")],
        [tool_call("create_work_item", todos), tool_call("list_work_items", {}), reply("opened")],
        [
            tool_call("update_work_item", {"todos": [{"text": "check the checksums"}]}),
            tool_call("brief", {"kind": "progress", "text": "copying"}),
            tool_call("list_work_items", {}),
            reply("updated"),
        ],
        [
            tool_calls(("brief", {"kind": "progress", "text": "one"}), ("list_work_items", {}),
                       ("update_work_item", {"plan": ["copy", "verify", "switch"]})),
            tool_call("complete_work_item", {"report": "copied and verified"}),
            reply("done"),
        ],
    ]  # fmt: skip
    for i, script in enumerate(turns):
        _ask(store, agent.agent_id, f"step {i}: carry on with the migration")
        model = ScriptedProvider(script)
        runner = TurnRunner(
            store, builtin_registry(), lambda _a, m=model: (m, settings), clock=clock,
            services=TaskServices(TaskManager.for_store(store, clock)),
        )  # fmt: skip
        result = asyncio.run(runner.run(agent.agent_id))
        assert result is not None and result.outcome == "completed", result
    assert len(compared) == 7  # every later round
