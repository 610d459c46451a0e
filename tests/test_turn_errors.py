"""The turn loop under bad input: malformed tool calls, and model failures over real HTTP.

Malformed tool calls never end a turn by themselves: each becomes a ``tool.resulted`` with a
clear message the model can act on (until the turn's tool-error allowance runs out). Model
failures end a turn as documented, and an input is never lost: transient failures re-queue it,
permanent ones settle it ``rejected`` with the reason (named by the failed turn, told in a brief).
"""

from __future__ import annotations

import asyncio
import json
import string
from types import SimpleNamespace
from typing import Any

import pytest
from helpers.props import examples
from helpers.runtime import (
    SleepRecorder,
    assert_sound,
    closed_port_url,
    events,
    fake_settings,
    make_host,
    payloads,
    run_through_litellm,
    running,
    text,
    tool_messages,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.retry import RetryPolicy
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call, tool_calls
from holon.runtime.tools import Tool, ToolContext, ToolOutput, ToolParams, ToolRegistry, builtin_registry
from holon.runtime.turn import TurnLimits
from holon.runtime.views import StoreViews
from holon.testing import FakeLLM

STATUSES = {"ok", "invalid", "error", "timeout"}


# --- malformed tool calls ------------------------------------------------------------------------


class SlowParams(ToolParams):
    pass


async def _slow(ctx: ToolContext, params: SlowParams) -> str:
    ctx.emit(ev.BriefDelivered(kind="progress", text="half way"))  # must not survive the timeout
    await asyncio.sleep(5)
    return "finished"


SLOW_TOOL = Tool("slow_tool", "Takes too long. Example: {}", SlowParams, _slow, timeout_s=0.1)


def registry_with_slow_tool() -> ToolRegistry:
    return ToolRegistry([*builtin_registry().tools.values(), SLOW_TOOL])


# (call id, tool, raw arguments, expected status, expected message fragments)
MALFORMED: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    (
        "c_json",
        "create_work_item",
        '{"title": "x", "objective": ',
        "invalid",
        ("arguments are not valid JSON", "send a JSON object"),
    ),
    ("c_array", "create_work_item", '["x", "y"]', "invalid", ("arguments must be a JSON object, not list",)),
    ("c_string", "create_work_item", '"make a work item"', "invalid", ("arguments must be a JSON object, not str",)),
    ("c_number", "list_work_items", "42", "invalid", ("arguments must be a JSON object, not int",)),
    (
        "c_unknown",
        "frobnicate",
        "{}",
        "invalid",
        ("unknown tool 'frobnicate'; available tools: ", "create_work_item", "run_command", "slow_tool"),
    ),
    (
        "c_type",
        "wait",
        '{"on": "operator", "recheck_in_s": "soon"}',
        "invalid",
        ("invalid arguments for wait: 'recheck_in_s': Input should be a valid number",),
    ),
    (
        "c_enum",
        "wait",
        '{"on": "the weather", "recheck_in_s": 60}',
        "invalid",
        ("invalid arguments for wait: 'on': Input should be 'task', 'operator', 'external' or 'timer'",),
    ),
    (
        "c_missing",
        "create_work_item",
        '{"title": "x"}',
        "invalid",
        ("invalid arguments for create_work_item: 'objective' is required",),
    ),
    ("c_empty", "pick_work_item", "", "invalid", ("invalid arguments for pick_work_item: 'work_item_id' is required",)),
    (
        "c_extra",
        "list_work_items",
        '{"include_closed": true, "verbose": true}',
        "invalid",
        ("invalid arguments for list_work_items: 'verbose' is not a parameter of this tool",),
    ),
    (
        "c_nested_extra",
        "update_work_item",
        '{"todos": [{"id": "t1", "done": true}]}',
        "invalid",
        ("'todos.0.done' is not a parameter of this tool",),
    ),
    (
        "c_cross",
        "wait",
        '{"on": "task", "recheck_in_s": 60}',
        "invalid",
        ("waiting on a task needs its id in 'target'",),
    ),
    ("c_refused", "pick_work_item", '{"work_item_id": "wi_nope"}', "error", ("no work item 'wi_nope'",)),
    (
        "c_no_task",
        "wait",
        '{"on": "task", "target": "task_nope", "recheck_in_s": 60}',
        "error",
        ("no task 'task_nope'",),
    ),
    ("c_slow", "slow_tool", "{}", "timeout", ("slow_tool did not finish within 0.1 s and was stopped",)),
    # Pathological JSON: too deep to parse, and an integer too long to convert.
    ("c_deep", "create_work_item", "[" * 1_500, "invalid", ("arguments are not valid JSON",)),
    ("c_huge_int", "run_command", '{"command": "true", "wait_s": ' + "9" * 4_400 + "}", "invalid", ("not valid JSON",)),
]


def test_every_kind_of_malformed_call_is_reported_and_the_turn_continues(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    aid = agent.agent_id
    batch = [(name, args, call_id) for call_id, name, args, _, _ in MALFORMED]
    provider = ScriptedProvider(
        [
            tool_calls(*batch[:8]),
            tool_calls(*batch[8:]),
            tool_call("list_work_items", {}, "c_fine"),  # the model recovers
            reply("Sorry about those; all fixed."),
        ]
    )
    host_limits = TurnLimits(max_tool_errors=len(MALFORMED))

    async def scenario() -> list[Any]:
        host = make_host(store, provider, clock=clock, registry=registry_with_slow_tool(), limits=host_limits)
        async with running(host):
            host.submit("alice", "go")
            return await host.run_agent(aid)

    [result] = asyncio.run(scenario())
    assert result.outcome == "completed", result.reason
    assert result.reply == "Sorry about those; all fixed."
    assert (result.rounds, result.tool_calls) == (4, len(MALFORMED) + 1)

    recorded = {p.call_id: p for p in payloads(store, "tool.resulted")}
    called = {p.call_id: p for p in payloads(store, "tool.called")}
    shown = {m["tool_call_id"]: m["content"] for m in tool_messages(provider.requests[-1].messages)}
    for call_id, name, args, status, fragments in MALFORMED:
        got = recorded[call_id]
        output = text(store, got.output)
        assert (got.tool, got.status) == (name, status), (call_id, output)
        for fragment in fragments:
            assert fragment in output, (call_id, output)
        assert shown[call_id] == output  # the model got exactly what the ledger recorded
        assert text(store, called[call_id].arguments) == args  # the raw arguments are kept as sent
    assert recorded["c_fine"].status == "ok" and text(store, recorded["c_fine"].output) == "no work items"
    # A refused or timed-out call changes nothing.
    assert store.rows("work_item", agent_id=aid) == []
    assert events(store, "brief.delivered") == []
    assert store.agent(aid).status == "idle"
    assert_sound(store)


def test_too_many_failed_tool_calls_fail_the_turn(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    provider = ScriptedProvider(
        [
            tool_call("frobnicate", {}),
            tool_call("list_work_items", {}),  # a good call in between does not count
            tool_calls(("wait", "{"), ("pick_work_item", {"work_item_id": "wi_nope"})),
            reply("never sent"),
        ]
    )

    async def scenario() -> list[Any]:
        host = make_host(store, provider, clock=clock, limits=TurnLimits(max_tool_errors=2))
        async with running(host):
            host.submit("alice", "go")
            return await host.run_agent(agent.agent_id)

    [result] = asyncio.run(scenario())
    assert result.outcome == "failed"
    assert result.reason == "more than 2 failed tool calls in one turn"
    assert (result.rounds, result.tool_calls, len(provider.requests)) == (3, 4, 3)
    assert [p.status for p in payloads(store, "tool.resulted")] == ["invalid", "ok", "invalid", "error"]
    [settled] = payloads(store, "turn.settled")
    assert settled.reason == result.reason and not settled.requeue and settled.rejected == result.rejected
    assert len(result.rejected) == 1
    state = store.agent(agent.agent_id)
    assert state.status == "failed" and state.last_error == result.reason and state.pending_inputs == []
    assert_sound(store)


def test_malformed_arguments_through_litellm_are_reported(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    script = [
        {"tool_calls": [{"name": "create_work_item", "arguments": '{"title": "x", ', "id": "c_bad"}]},
        {"tool_calls": [{"name": "no_such_tool", "arguments": {}, "id": "c_unknown"}]},
        {"content": "giving up politely"},
    ]
    with FakeLLM(script, strict=True) as fake:
        [result] = run_through_litellm(store, clock, fake, agent.agent_id, "go")
        sent = fake.requests

    assert result.outcome == "completed" and result.reply == "giving up politely"
    recorded = {p.call_id: p for p in payloads(store, "tool.resulted")}
    assert recorded["c_bad"].status == "invalid"
    assert "arguments are not valid JSON" in text(store, recorded["c_bad"].output)
    assert recorded["c_unknown"].status == "invalid"
    assert text(store, recorded["c_unknown"].output).startswith("unknown tool 'no_such_tool'")
    last = {m["tool_call_id"]: m["content"] for m in sent[-1]["messages"] if m["role"] == "tool"}
    assert last["c_bad"] == text(store, recorded["c_bad"].output)
    assert_sound(store)


# --- ToolRegistry.execute never raises -----------------------------------------------------------

# Tools that would run commands or start agents are left out: random arguments must not do that.
SAFE_TOOLS = sorted(set(builtin_registry().tools) - {"run_command", "spawn_agent"})
PARAM_NAMES = ["title", "objective", "todos", "work_item_id", "report", "on", "target", "recheck_in_s", "seconds"]
PARAM_NAMES += ["until", "kind", "text", "ref", "offset", "length", "task_id", "tail_lines", "include_closed", "id"]

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
raw_arguments = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=string.printable, max_size=60),
    st.dictionaries(st.sampled_from(PARAM_NAMES) | st.text(max_size=8), json_values, max_size=4).map(json.dumps),
    json_values.map(json.dumps),
)
tool_names = st.sampled_from(SAFE_TOOLS) | st.text(max_size=30)


@pytest.fixture
def registry_context(store: Store) -> tuple[ToolRegistry, str, Store]:
    agent = create_agent(store, "fuzz")
    return ToolRegistry([builtin_registry().tools[n] for n in SAFE_TOOLS]), agent.agent_id, store


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=tool_names, arguments=raw_arguments)
def test_execute_never_raises_on_random_calls(
    registry_context: tuple[ToolRegistry, str, Store], name: str, arguments: str
) -> None:
    registry, agent_id, store = registry_context
    agent = store.agent(agent_id)
    ctx = ToolContext(
        agent_id=agent_id,
        agent_name=agent.name,
        turn_id="turn_fuzz",
        clock=store.ledger.clock,
        home=store.paths.agent_home(agent.name),
        workspace=store.paths.agent_home(agent.name),
        views=StoreViews(store, agent_id),
        services=SimpleNamespace(),
    )
    spec = ev.ToolCallSpec(call_id="call_fuzz", tool=name, arguments=arguments)
    result = asyncio.run(registry.execute(spec, ctx))
    assert result.status in STATUSES
    assert isinstance(result.output, str) and result.output
    assert result.call.name == name and result.call.arguments == arguments
    if name not in registry.tools:
        assert result.status == "invalid" and result.output.startswith("unknown tool ")
    if result.status != "ok":
        assert result.emitted == ()  # a refused call changes nothing
    # Whatever a call emits can be recorded: the result is valid ledger material.
    ev.ToolResulted(call_id="call_fuzz", tool=name, status=result.status, output=result.output)


def test_execute_rejects_pathological_json_without_raising(store: Store) -> None:
    registry = builtin_registry()
    agent = create_agent(store, "alice")
    home = store.paths.agent_home("alice")
    for arguments in ("[" * 100_000, '{"a": ' * 50_000, '{"command": ' + "1" * 10_000 + "}"):
        ctx = ToolContext(
            agent.agent_id, "alice", "turn_x", store.ledger.clock, home, home, StoreViews(store, agent.agent_id), None
        )
        spec = ev.ToolCallSpec(call_id="c", tool="run_command", arguments=arguments)
        result = asyncio.run(registry.execute(spec, ctx))
        assert result.status == "invalid" and result.output.startswith("arguments are not valid JSON")


def test_a_call_that_never_waits_takes_no_pass_of_the_event_loop(store: Store) -> None:
    """A handler runs in the caller's task under its deadline (issue 18, step 6): a call that never
    awaits returns before anything else the loop has ready runs (``wait_for`` made a task per
    call, one more pass of the loop each), and a handler that overstays is still stopped."""
    registry = registry_with_slow_tool()
    agent = create_agent(store, "alice")
    home = store.paths.agent_home("alice")
    ctx = ToolContext(
        agent.agent_id, "alice", "turn_x", store.ledger.clock, home, home, StoreViews(store, agent.agent_id), None
    )

    async def call(tool: str) -> tuple[str, bool]:
        ran: list[bool] = []
        asyncio.get_running_loop().call_soon(ran.append, True)
        result = await registry.execute(ev.ToolCallSpec(call_id="c", tool=tool, arguments="{}"), ctx)
        return result.status, bool(ran)

    assert asyncio.run(call("list_work_items")) == ("ok", False)
    assert asyncio.run(call("slow_tool")) == ("timeout", True)


def test_a_custom_tool_returning_a_status_is_recorded_as_such(store: Store, clock: FakeClock) -> None:
    class NoParams(ToolParams):
        pass

    async def flaky(ctx: ToolContext, p: NoParams) -> ToolOutput:
        return ToolOutput("the disk is full", status="error")

    agent = create_agent(store, "alice")
    registry = ToolRegistry([*builtin_registry().tools.values(), Tool("flaky", "Fails. Example: {}", NoParams, flaky)])
    provider = ScriptedProvider([tool_call("flaky", {}, "c_flaky"), reply("noted")])

    async def scenario() -> list[Any]:
        async with running(make_host(store, provider, clock=clock, registry=registry)) as host:
            host.submit("alice", "go")
            return await host.run_agent(agent.agent_id)

    [result] = asyncio.run(scenario())
    assert result.outcome == "completed"
    [recorded] = payloads(store, "tool.resulted")
    assert (recorded.status, text(store, recorded.output)) == ("error", "the disk is full")
    assert_sound(store)


# --- model failures over real HTTP -----------------------------------------------------------------


def _drive(
    store: Store,
    clock: FakeClock,
    settings_: Any,
    *,
    retry: RetryPolicy | None = None,
    rounds: int = 1,
    sleep: SleepRecorder | None = None,
) -> tuple[ev.MessageReceived | Any, list[list[Any]]]:
    """Submit one input and run the agent ``rounds`` times (re-running after a failure)."""
    agent = store.agents()[0]
    options: dict[str, Any] = {"settings": settings_, "sleep": sleep}
    if retry is not None:
        options["retry"] = retry

    async def scenario() -> tuple[Any, list[list[Any]]]:
        async with running(make_host(store, LiteLLMProvider(env={}), clock=clock, **options)) as host:
            submitted = host.submit(agent.agent_id, "please answer")
            runs = [await host.run_agent(agent.agent_id)]
            for _ in range(rounds - 1):
                runs.append(await host.run_agent(agent.agent_id))
            return submitted, runs

    return asyncio.run(scenario())


def _started_inputs(store: Store) -> dict[str, list[int]]:
    return {p.turn_id: p.inputs for p in payloads(store, "turn.started")}


def test_rate_limit_then_success_is_retried_within_one_turn(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    sleep = SleepRecorder()
    with FakeLLM([{"error": 429, "retry_after": 7}, {"content": "answer"}], strict=True) as fake:
        submitted, [[result]] = _drive(store, clock, fake_settings(fake), sleep=sleep)
        assert len(fake.requests) == 2
    assert result.outcome == "completed" and result.reply == "answer" and result.rounds == 1
    assert sleep.delays == [7.0]  # the server's Retry-After, slept through the injected sleep
    assert _started_inputs(store) == {result.turn_id: [submitted.seq]}
    assert store.agents()[0].pending_inputs == []
    [responded] = payloads(store, "model.responded")
    assert responded.error is None  # the retried failure is not a round of its own
    assert_sound(store)


def test_persistent_server_error_requeues_and_a_later_run_completes_once(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    aid = agent.agent_id
    sleep = SleepRecorder()
    with FakeLLM([{"error": 500}] * 3, strict=True) as fake:

        async def scenario() -> dict[str, Any]:
            host = make_host(store, LiteLLMProvider(env={}), clock=clock, settings=fake_settings(fake), sleep=sleep)
            out: dict[str, Any] = {}
            async with running(host):
                out["submitted"] = host.submit("alice", "please answer")
                out["failed"] = await host.run_agent(aid)
                out["after_failure"] = store.agent(aid)
                await host.run_until_idle(timeout_s=5)  # a re-queued failure does not spin
                out["requests_after_idle"] = len(fake.requests)
                fake.add({"content": "answer at last"})  # the server recovers
                out["retried"] = await host.run_agent(aid)
                out["again"] = await host.run_agent(aid)  # nothing left: no second completion
            return out

        out = asyncio.run(scenario())
        assert len(fake.requests) == 4

    seq = out["submitted"].seq
    [failed] = out["failed"]
    assert failed.outcome == "failed" and failed.reason is not None
    assert failed.reason.startswith("model error (server): openai/fake: server error (HTTP 500)")
    assert sleep.delays == [0.0, 0.0]  # three attempts
    assert out["after_failure"].status == "failed" and out["after_failure"].pending_inputs == [seq]
    assert out["requests_after_idle"] == 3
    [settled_fail, settled_ok] = payloads(store, "turn.settled")
    assert settled_fail.requeue is True and settled_ok.requeue is False
    [retried] = out["retried"]
    assert retried.outcome == "completed" and retried.reply == "answer at last"
    assert out["again"] == []
    started = _started_inputs(store)
    assert started == {failed.turn_id: [seq], retried.turn_id: [seq]}
    completed = [p for p in payloads(store, "turn.settled") if p.outcome == "completed"]
    assert [c.turn_id for c in completed if seq in started[c.turn_id]] == [retried.turn_id]  # exactly once
    assert len(events(store, "message.received")) == 1  # re-queued, never duplicated
    assert store.agent(aid).pending_inputs == [] and store.agent(aid).status == "idle"
    assert_sound(store)


def test_timeout_fails_and_requeues(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    with FakeLLM([{"delay": 3, "content": "too late"}] * 2, strict=True) as fake:
        submitted, [[result]] = _drive(
            store, clock, fake_settings(fake, timeout_s=0.5), retry=RetryPolicy(max_attempts=2, base_delay_s=0.0)
        )
    assert result.outcome == "failed" and result.reason is not None
    assert result.reason.startswith("model error (timeout): openai/fake: timed out")
    [settled] = payloads(store, "turn.settled")
    assert settled.requeue is True
    assert store.agents()[0].pending_inputs == [submitted.seq]
    [responded] = payloads(store, "model.responded")
    assert responded.error_kind == "timeout"
    assert_sound(store)


def test_connection_refused_fails_and_requeues(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    url = closed_port_url()
    sleep = SleepRecorder()
    submitted, [[result]] = _drive(store, clock, fake_settings(url, timeout_s=5), sleep=sleep)
    assert result.outcome == "failed" and result.reason is not None
    assert result.reason.startswith(f"model error (connection): openai/fake: connection failed ({url})")
    assert len(sleep.delays) == 2  # retried: a refused connection may be a server restarting
    assert payloads(store, "turn.settled")[0].requeue is True
    assert store.agents()[0].pending_inputs == [submitted.seq]
    assert_sound(store)


def test_context_overflow_fails_without_requeue_but_keeps_the_input(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    with FakeLLM([{"context_overflow": True}], strict=True) as fake:
        submitted, [[result]] = _drive(store, clock, fake_settings(fake))
        assert len(fake.requests) == 1  # not retried: the same request would overflow again
    assert result.outcome == "failed" and result.reason is not None
    assert result.reason.startswith("model error (context_overflow)") and "context" in result.reason
    agent = store.agents()[0]
    assert agent.pending_inputs == [] and agent.status == "failed" and "context" in (agent.last_error or "")
    # Not re-queued, yet not lost: the input is in the ledger, named by the turn that failed on it.
    kept = store.ledger.get(submitted.seq)
    assert kept.type == "message.received" and text(store, kept.payload.text) == "please answer"
    assert _started_inputs(store) == {result.turn_id: [submitted.seq]}
    [settled] = events(store, "turn.settled")
    assert settled.turn_id == result.turn_id and settled.payload.turn_id == result.turn_id
    assert settled.payload.requeue is False and "context" in (settled.payload.reason or "")
    assert settled.payload.rejected == [submitted.seq] and agent.rejected_inputs == [submitted.seq]
    assert_sound(store)


def test_bad_key_fails_as_auth_without_requeue(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    with FakeLLM([{"error": 401}], strict=True) as fake:
        submitted, [[result]] = _drive(store, clock, fake_settings(fake))
        assert len(fake.requests) == 1
    assert result.outcome == "failed" and result.reason is not None
    assert result.reason.startswith("model error (auth): openai/fake: authentication failed (HTTP 401)")
    [settled] = payloads(store, "turn.settled")
    assert settled.requeue is False and settled.rejected == [submitted.seq]
    assert store.agents()[0].pending_inputs == []
    assert store.ledger.get(submitted.seq).type == "message.received"
    assert_sound(store)


def test_a_failure_in_a_later_round_requeues_the_whole_turns_input(store: Store, clock: FakeClock) -> None:
    create_agent(store, "alice")
    script = [
        {"tool_calls": [{"name": "list_work_items", "arguments": {}, "id": "c_list"}]},
        {"error": 503},
        {"error": 503},
        {"error": 503},
        {"content": "done"},
    ]
    with FakeLLM(script, strict=True) as fake:
        submitted, [[failed], [done]] = _drive(store, clock, fake_settings(fake), rounds=2)
        # The retried turn shows the re-queued input once, as its input (not also as history).
        retried_users = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "user"]
        assert sum(m.count("please answer") for m in retried_users) == 1, retried_users
    assert failed.outcome == "failed" and (failed.rounds, failed.tool_calls) == (2, 1)
    assert done.outcome == "completed" and done.reply == "done"
    assert _started_inputs(store) == {failed.turn_id: [submitted.seq], done.turn_id: [submitted.seq]}
    assert store.agents()[0].pending_inputs == []
    assert_sound(store)
