"""``holon diagnose``: the diagnostic agent, on a scripted model, uses every trace tool (one call
refused for its size), reports, and changes nothing about the agents it studied."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.runtime import SCRIPTED, closed_port_url, make_host, running
from helpers.turn_cli import holon, open_store, quick_home

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.errors import ConflictError
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelReply, ModelRequest
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call, tool_calls
from holon.runtime.tools import ToolParams
from holon.runtime.turn import TurnResult
from holon.testing.fake_llm import FakeLLM
from holon.trace.diagnose import RESULT_CAP, Limits, QueryParams, SearchParams, TurnParams, diagnose
from holon.trace.search import span_texts
from holon.trace.spans import TraceFilter, TraceReader, turn_spans


def _history(home: Path) -> None:
    """alice fails to read a missing event twice and writes a long reply; bob is fine."""
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        alice = create_agent(store, "alice")
        bob = create_agent(store, "bob")
        provider = ScriptedProvider([
            tool_calls(("memory_get", {"ref": "event:424242"})), reply("Could not read it. " + "long " * 4000),
            tool_calls(("memory_get", {"ref": "event:525252"})), reply("Failed again."),
            reply("All good."),
        ])  # fmt: skip

        async def go() -> None:
            host = make_host(store, provider, clock=clock)
            async with running(host):
                for agent, text in ((alice, "read event 424242"), (alice, "read event 525252"), (bob, "hello")):
                    if text == "read event 525252":
                        clock.advance(seconds=3600)
                    host.submit(agent.agent_id, text)
                    await host.run_agent(agent.agent_id)

        asyncio.run(go())


_seen: dict[str, str] = {}


def _turn_id(body: dict[str, Any]) -> str:
    """The first failed turn id in the overview the model was shown (remembered: later prompts may leave it out)."""
    for m in body["messages"]:
        if m.get("role") == "tool" and "sample_failed_turns" in str(m.get("content")):
            _seen["failed"] = str(json.loads(m["content"])["sample_failed_turns"][0])
    if "failed" not in _seen:
        raise AssertionError("no overview in the conversation")
    return _seen["failed"]


@pytest.mark.slow
def test_diagnose_uses_every_trace_tool_and_reports(tmp_path: Path) -> None:
    _seen.clear()
    steps = iter([
        lambda b: {"tool_calls": [{"name": "trace_overview", "arguments": {}}]},
        lambda b: {"tool_calls": [{"name": "trace_query", "arguments": {"has_error": True, "limit": 5}}]},
        lambda b: {"tool_calls": [{"name": "trace_turn", "arguments": {"turn_id": _turn_id(b), "max_field_chars": 100000}}]},
        lambda b: {"tool_calls": [{"name": "trace_turn", "arguments": {"turn_id": _turn_id(b), "max_field_chars": 200}}]},
        lambda b: {"tool_calls": [{"name": "trace_search", "arguments": {"pattern": "event:\\d+"}}]},
        lambda b: {"tool_calls": [{"name": "trace_search", "arguments": {"pattern": "\\blong\\b", "turn_id": _turn_id(b),
                                                                         "kinds": ["AGENT"]}}]},
        lambda b: {"content": "Findings: alice's memory_get calls fail on missing events (2 turns). Recommend: search first."},
    ])  # fmt: skip
    with FakeLLM(lambda body: next(steps)(body)) as fake:  # noqa: PLW0108 (a new step per request)
        home = quick_home(tmp_path, "zed")
        _history(home)
        r = holon(
            home, "diagnose", "why do alice's turns fail?", "--model", "openai/fake", "--api-base", fake.url, "--json"
        )
        assert r.code == 0, r
        # Each request after the first ends with the result of the call before it. (The final
        # request alone may not hold them all: the assembler can leave early rounds out.)
        results = [req["messages"][-1] for req in fake.requests[1:]]
        assert all(m.get("role") == "tool" for m in results), results

    out = r.json()
    assert out["outcome"] == "completed" and "memory_get calls fail" in out["report"]
    assert Path(out["saved"]).read_text().startswith("# Diagnosis")
    overview = json.loads(results[0]["content"])
    assert overview["turns"] == 3 and overview["agents"]["alice"]["tool_errors"] == 2
    assert overview["error_taxonomy"][0]["source"] == "memory_get" and overview["error_taxonomy"][0]["count"] == 2
    page = json.loads(results[1]["content"])
    assert page["matched"] == 2 and all(t["agent"] == "alice" for t in page["turns"])
    refused = json.loads(results[2]["content"])
    assert "refused" in refused and refused["size"]["characters"] > 8_000 and refused["next_calls"]
    turn = json.loads(results[3]["content"])
    assert {s["kind"] for s in turn["spans"]} >= {"AGENT", "LLM", "TOOL"}
    found = json.loads(results[4]["content"])
    assert found["matching_spans"] >= 2 and found["matches"] >= found["matching_spans"]
    # Counted over the full reply (20,000 characters), not over the 16,000 an exported span keeps.
    exact = json.loads(results[5]["content"])
    assert (exact["matching_spans"], exact["matches"]) == (1, 4000) and exact["shown"][0]["field"] == "output"

    with open_store(home) as store:
        diag = store.agent("diagnose")
        assert diag.settings.get("diagnostic") is True
        briefs = [e.payload for e in store.ledger.read(0, agent_id=diag.agent_id) if e.type == "brief.delivered"]
        assert briefs and "Findings" in briefs[-1].text
        # It read; it changed nothing about alice.
        alice = store.agent("alice")
        assert not any(e.type == "agent.configured" for e in store.ledger.read(0, agent_id=alice.agent_id))
    assert holon(home, "diagnose", "  ").code == 2


# --- refusals that lead somewhere, scoped and bounded search, the overview -----------------------


def _busy_history(home: Path) -> str:
    """alice: one turn of 25 memory_search calls (30 spans: 2 rounds); bob: 30 short turns, the first a long run of a's.

    Returns alice's turn id."""
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        alice = create_agent(store, "alice")
        bob = create_agent(store, "bob")
        searches = [("memory_search", {"query": f"word{i} " + "filler " * 20}) for i in range(25)]
        provider = ScriptedProvider([tool_calls(*searches), reply("searched"), *[reply(f"hi {i}") for i in range(30)]])

        async def go() -> None:
            host = make_host(store, provider, clock=clock)
            async with running(host):
                host.submit(alice.agent_id, "search a lot")
                await host.run_agent(alice.agent_id)
                for i in range(30):
                    host.submit(bob.agent_id, "a" * 40 + "!" if i == 0 else f"hello {i}")
                    await host.run_agent(bob.agent_id)

        asyncio.run(go())
        return next(e.turn_id for e in store.ledger.read(0, agent_id=alice.agent_id) if e.type == "turn.started")


class _Model:
    """A scripted diagnostic model. It records every tool result it is shown; the step ``FOLLOW``
    makes the first of the last refusal's ``next_calls`` exactly as it was offered."""

    FOLLOW = object()

    def __init__(self, plan: list[Any]) -> None:
        self.plan = iter(plan)
        self.results: list[str] = []
        self.shown_at: list[float] = []

    def __call__(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            self.results.append(str(last["content"]))
            self.shown_at.append(time.monotonic())
        step = next(self.plan)
        if step is _Model.FOLLOW:
            call = json.loads(self.results[-1])["next_calls"][0]
            return tool_call(call["tool"], call["arguments"])
        if isinstance(step, str):
            return reply(step)
        name, args = step
        return tool_call(name, args(self) if callable(args) else args)


def _run(home: Path, model: _Model, steps: int, limits: Limits | None = None) -> TurnResult:
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        provider = ScriptedProvider([model] * steps)
        result, _path = diagnose(store, "what is slow?", flt=TraceFilter(), resolver=lambda a: (provider, SCRIPTED),
                                 limits=limits)  # fmt: skip
    return result


def _fits(result: str) -> dict[str, Any]:
    """A result the model can use: no refusal, within the cap."""
    data = json.loads(result)
    assert "refused" not in data and len(result) <= RESULT_CAP, result[:300]
    return data


def _refusal(result: str, params: type[ToolParams]) -> list[dict[str, Any]]:
    """A refusal's next_calls: each a tool name and JSON arguments that the tool's parameters accept."""
    data = json.loads(result)
    assert "refused" in data and data["size"]["characters"] > RESULT_CAP, result[:300]
    calls = data["next_calls"]
    assert calls
    for call in calls:
        params.model_validate(call["arguments"])
    return calls


@pytest.mark.slow  # runs the diagnose model's code in a subprocess per call
def test_every_refusal_leads_to_a_call_that_fits(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "zed")
    alice_turn = _busy_history(home)
    pattern = r'"query": "word\d+ filler'  # quotes and backslashes: next_calls must still be JSON
    m = _Model([
        ("trace_overview", {}),
        ("trace_turn", {"turn_id": alice_turn, "max_field_chars": 20}),  # refused even at the minimum
        _Model.FOLLOW,
        ("trace_query", {"agent": "bob", "limit": 200}),
        _Model.FOLLOW,
        ("trace_search", {"pattern": pattern, "agent": "alice", "kinds": ["TOOL"], "limit": 200}),
        _Model.FOLLOW,
        ("trace_search", {"pattern": "(a+)+$", "agent": "bob"}),
        ("trace_turn", {"turn_id": alice_turn, "kinds": ["LLM"], "attributes": ["llm.output_messages"], "limit": 1,
                        "max_field_chars": 3000, "field_offset": 3000}),
        "Report: alice searched 25 times in one turn.",
    ])  # fmt: skip
    result = _run(home, m, 10)
    assert result.outcome == "completed", result

    overview = json.loads(m.results[0])
    assert set(overview["agents"]) == {"alice", "bob"} and overview["turns"] == 31

    turn_calls = _refusal(m.results[1], TurnParams)
    assert all(c["arguments"]["turn_id"] == alice_turn for c in turn_calls)
    assert turn_calls[0]["arguments"]["max_field_chars"] == 20  # the caller's cap is kept
    page = _fits(m.results[2])
    assert page["selected"] == 30 and 0 < len(page["spans"]) < 30 and page["next_offset"] == len(page["spans"])

    query_calls = _refusal(m.results[3], QueryParams)
    assert query_calls[0]["arguments"]["agent"] == "bob"
    turns = _fits(m.results[4])
    assert turns["matched"] == 30 and turns["turns"] and all(t["agent"] == "bob" for t in turns["turns"])

    search_calls = _refusal(m.results[5], SearchParams)
    args = search_calls[0]["arguments"]
    assert (args["pattern"], args["agent"], args["kinds"]) == (pattern, "alice", ["TOOL"])
    found = _fits(m.results[6])
    assert found["matching_spans"] == 25 and found["matches"] == 25 and 0 < len(found["shown"]) < 25
    assert all(h["kind"] == "TOOL" and h["field"] == "input" for h in found["shown"])

    # (a+)+$ against 40 a's and a "!" backtracks for ever: the child is stopped at the time limit.
    assert "was stopped" in m.results[7] and "nested quantifiers" in m.results[7]
    assert m.shown_at[7] - m.shown_at[6] < Limits().search_timeout_s + 5

    # A value longer than any cap is read in parts: the 25 calls the first model reply made.
    part = _fits(m.results[8])["spans"][0]["attributes"]["llm.output_messages"]
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        turn = next(t for t in TraceReader(store).turns() if t.turn_id == alice_turn)
        full = next(s for s in turn_spans(turn, project="p", store=store) if s.kind == "LLM")
    value = full.attributes["llm.output_messages"]
    assert part == value[3000:6000] + f"…[characters 3,000-6,000 of {len(value):,}]"


@pytest.mark.slow  # runs the diagnose model's code in a subprocess per call
def test_a_search_too_large_is_refused_with_scopes_that_fit_and_the_overview_leaves_diagnose_out(
    tmp_path: Path,
) -> None:
    home = quick_home(tmp_path, "zed")
    _busy_history(home)
    _run(home, _Model([("trace_search", {"pattern": "(a+)+$"}), "done"]), 2)  # a diagnose turn with a failed call
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        reader = TraceReader(store)
        sizes = {n: sum(t.size for turn in reader.turns() if turn.agent_name == n for t in span_texts(turn, store))
                 for n in ("alice", "bob")}  # fmt: skip
    limit = min(sizes.values())  # the smaller agent fits, the whole does not
    m = _Model([("trace_overview", {}), ("trace_search", {"pattern": "filler|hello"}), _Model.FOLLOW, "done"])
    assert _run(home, m, 4, Limits(search_chars=limit)).outcome == "completed"

    overview = json.loads(m.results[0])
    assert set(overview["agents"]) == {"alice", "bob"} and overview["turns"] == 31
    assert all(e["source"] != "trace_search" for e in overview["error_taxonomy"])
    refused = json.loads(m.results[1])
    assert refused["refused"].startswith("searching") and refused["size"]["characters"] == sum(sizes.values())
    smaller = min(sizes, key=lambda n: sizes[n])
    assert refused["next_calls"][0]["arguments"] == {"pattern": "filler|hello", "agent": smaller}
    found = _fits(m.results[2])
    assert found["searched"]["characters"] == sizes[smaller] and found["matches"] > 0


@pytest.mark.slow
def test_cli_scopes_by_agent_and_since_and_exits_non_zero_when_the_turn_fails(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "zed")
    _history(home)  # alice's second turn and bob's start an hour after alice's first
    with FakeLLM([{"tool_calls": [{"name": "trace_overview", "arguments": {}}]}, {"content": "Report."}]) as fake:
        r = holon(home, "diagnose", "why?", "--agent", "alice", "--since", "2026-01-01T00:30:00Z",
                  "--model", "openai/fake", "--api-base", fake.url, "--json")  # fmt: skip
        assert r.code == 0, r
        overview = json.loads(fake.requests[1]["messages"][-1]["content"])
    assert overview["turns"] == 1 and set(overview["agents"]) == {"alice"}
    assert "agent alice, since 2026-01-01T00:30:00" in fake.requests[0]["messages"][-1]["content"]

    unreachable = holon(home, "diagnose", "why?", "--model", "openai/fake", "--api-base", closed_port_url(), "--json")
    assert unreachable.code == 6 and json.loads(unreachable.out)["outcome"] == "failed", unreachable
    bad = [{"name": "no_such_tool", "arguments": {}}] * 7  # more failed calls than a turn allows
    with FakeLLM([{"tool_calls": bad}]) as fake:
        failed = holon(home, "diagnose", "why?", "--model", "openai/fake", "--api-base", fake.url, "--json")
    assert failed.code == 1 and failed.json()["outcome"] == "failed", failed


# --- every run starts from a clean context --------------------------------------------------------


@pytest.mark.slow
def test_a_second_diagnosis_sees_nothing_of_the_first(tmp_path: Path) -> None:
    """Two runs; the second's prompts hold nothing of the first's question or report (neither in
    its history nor through its tools: earlier diagnoses are not traces), while both reports stay
    in the ledger and the saved files, and the second run keeps the model the first was given."""
    first_q, first_report = "Why does alice fail? Quokka-5150", "Findings: Zebra-7731, memory_get on missing events."
    steps = iter([
        {"tool_calls": [{"name": "trace_overview", "arguments": {}}]},
        {"content": first_report},
        {"tool_calls": [{"name": "trace_search", "arguments": {"pattern": r"Quokka-\d+|Zebra-\d+"}}]},
        {"tool_calls": [{"name": "trace_overview", "arguments": {}}]},
        {"content": "Second report."},
    ])  # fmt: skip
    with FakeLLM(lambda body: next(steps)) as fake:
        home = quick_home(tmp_path, "zed")
        _history(home)
        one = holon(home, "diagnose", first_q, "--model", "openai/fake", "--api-base", fake.url, "--json")
        assert one.code == 0 and one.json()["report"] == first_report, one
        asked = len(fake.requests)
        two = holon(home, "diagnose", "What is slow? Narwhal-42", "--json")  # the model given once still holds
        assert two.code == 0 and two.json()["report"] == "Second report.", two
        first, second = fake.requests[:asked], fake.requests[asked:]

    assert "Quokka-5150" in json.dumps(first) and len(second) == 3
    for request in second:
        sent = json.dumps(request)
        assert "Narwhal-42" in sent
        assert "Quokka-5150" not in sent and "Zebra-7731" not in sent, request
    found = json.loads(second[1]["messages"][-1]["content"])
    assert found["matching_spans"] == 0 and found["matches"] == 0
    overview = json.loads(second[2]["messages"][-1]["content"])
    assert overview["turns"] == 3 and set(overview["agents"]) == {"alice", "bob"}

    with open_store(home) as store:
        assert [a.name for a in store.agents()].count("diagnose") == 1
        current = store.agent("diagnose")
        assert current.settings["diagnostic"] is True and current.settings["model"] == "openai/fake"
        reports = [store.ledger.resolve(e.payload.text) for e in store.ledger.read(0) if e.type == "brief.delivered"]
        retired = [e for e in store.ledger.read(0) if e.type == "agent.deleted"]
        assert len(retired) == 1 and retired[0].agent_id != current.agent_id
    assert reports == [first_report, "Second report."]
    saved = sorted((home / "diagnose").glob("*.md"))
    assert len(saved) == 2 and any(first_report in p.read_text() for p in saved)


def test_an_agent_of_yours_named_diagnose_is_never_retired(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "diagnose")
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        mine = store.agent("diagnose")
        with pytest.raises(ConflictError, match="not holon's diagnostic agent"):
            diagnose(store, "why?", flt=TraceFilter(), resolver=lambda a: (ScriptedProvider([]), SCRIPTED))
        assert store.agent("diagnose").agent_id == mine.agent_id
        assert not [e for e in store.ledger.read(0) if e.type in ("agent.deleted", "message.received")]
