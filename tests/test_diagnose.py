"""``holon diagnose``: the diagnostic agent, on a scripted model, uses every trace tool (one call
refused for its size), reports, and changes nothing about the agents it studied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from helpers.runtime import make_host, running
from helpers.turn_cli import holon, open_store, quick_home

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls
from holon.testing.fake_llm import FakeLLM


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
                    host.submit(agent.agent_id, text)
                    await host.run_agent(agent.agent_id)

        asyncio.run(go())


def _turn_id(body: dict[str, Any]) -> str:
    """The first failed turn id in the overview the model was shown."""
    for m in body["messages"]:
        if m.get("role") == "tool" and "sample_failed_turns" in str(m.get("content")):
            return str(json.loads(m["content"])["sample_failed_turns"][0])
    raise AssertionError("no overview in the conversation")


def test_diagnose_uses_every_trace_tool_and_reports(tmp_path: Path) -> None:
    steps = iter([
        lambda b: {"tool_calls": [{"name": "trace_overview", "arguments": {}}]},
        lambda b: {"tool_calls": [{"name": "trace_query", "arguments": {"has_error": True, "limit": 5}}]},
        lambda b: {"tool_calls": [{"name": "trace_turn", "arguments": {"turn_id": _turn_id(b), "max_field_chars": 100000}}]},
        lambda b: {"tool_calls": [{"name": "trace_turn", "arguments": {"turn_id": _turn_id(b), "max_field_chars": 200}}]},
        lambda b: {"tool_calls": [{"name": "trace_search", "arguments": {"pattern": "event:\\d+"}}]},
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

    with open_store(home) as store:
        diag = store.agent("diagnose")
        assert diag.settings.get("diagnostic") is True
        briefs = [e.payload for e in store.ledger.read(0, agent_id=diag.agent_id) if e.type == "brief.delivered"]
        assert briefs and "Findings" in briefs[-1].text
        # It read; it changed nothing about alice.
        alice = store.agent("alice")
        assert not any(e.type == "agent.configured" for e in store.ledger.read(0, agent_id=alice.agent_id))
    assert holon(home, "diagnose", "  ").code == 2
