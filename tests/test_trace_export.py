"""Trace export (RFC 0007): a scripted multi-agent run as HALO JSONL and OTLP JSON, and trace stats."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers.runtime import make_host, running
from helpers.turn_cli import holon, quick_home

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls
from holon.trace.export import export_traces, trace_stats
from holon.trace.formats import check_halo_line, halo_line, nano_time
from holon.trace.spans import MAX_VALUE_CHARS, Span, TraceFilter

U = ev.Usage


def _run(home: Path) -> None:
    """ada: a turn with memory_search, memory_get (failing) and a reply; bob: a plain turn; ada again."""
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        ada = create_agent(store, "ada")
        bob = create_agent(store, "bob")
        provider = ScriptedProvider([
            tool_calls(("memory_search", {"query": "deploy notes"}), ("memory_get", {"ref": "event:999999"}),
                       usage=U(prompt_tokens=120, completion_tokens=15, total_tokens=135)),
            reply("Deployed. " + "x" * (MAX_VALUE_CHARS + 50), usage=U(prompt_tokens=200, completion_tokens=30, total_tokens=230)),
            reply("Hi bob here.", usage=U(prompt_tokens=50, completion_tokens=5, total_tokens=55)),
            reply("Second answer.", usage=U(prompt_tokens=70, completion_tokens=7, total_tokens=77)),
        ])  # fmt: skip

        async def go() -> None:
            host = make_host(store, provider, clock=clock)
            async with running(host):
                for agent, text in ((ada, "deploy the api"), (bob, "hello"), (ada, "and again")):
                    host.submit(agent.agent_id, text)
                    await host.run_agent(agent.agent_id)
                    clock.advance(seconds=5)

        asyncio.run(go())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = quick_home(tmp_path, "zed")
    _run(home)
    return home


def test_halo_jsonl_lines_are_valid_structured_and_deterministic(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    r = holon(home, "trace", "export", "--format", "halo-jsonl", "--out", str(out), "--json")
    assert r.code == 0, r
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert r.json()["traces"] == 3 and r.json()["spans"] == len(lines)
    assert all(check_halo_line(line) == [] for line in lines)

    by_trace: dict[str, list[dict]] = {}
    for line in lines:
        by_trace.setdefault(line["trace_id"], []).append(line)
    first = next(iter(by_trace.values()))
    [root] = [s for s in first if s["parent_span_id"] == ""]
    assert (
        root["attributes"]["openinference.span.kind"] == "AGENT" and root["attributes"]["inference.agent_name"] == "ada"
    )
    children = [s for s in first if s["parent_span_id"] == root["span_id"]]
    assert len(children) == len(first) - 1
    kinds = sorted(s["attributes"]["openinference.span.kind"] for s in children)
    assert kinds == ["CHAIN", "CHAIN", "LLM", "LLM", "TOOL", "TOOL"]
    tools = {s["attributes"]["tool.name"]: s for s in children if s["attributes"]["openinference.span.kind"] == "TOOL"}
    assert set(tools) == {"memory_search", "memory_get"}
    assert tools["memory_get"]["status"]["code"] == "STATUS_CODE_ERROR"
    assert json.loads(tools["memory_search"]["attributes"]["input.value"]) == {"query": "deploy notes"}
    llm = [s for s in children if s["attributes"]["openinference.span.kind"] == "LLM"]
    assert all(isinstance(s["attributes"]["inference.llm.input_tokens"], int) for s in llm)
    assert all(s["start_time"] >= root["start_time"] and s["end_time"] <= root["end_time"] for s in children)
    # A large value is capped, with a marker giving the original size.
    assert "[truncated: original" in root["attributes"]["output.value"]

    # Token totals equal the ledger's.
    with Store.open(resolve_home(str(home)), load_settings(resolve_home(str(home)))) as store:
        usage = [e.payload.usage for e in store.ledger.read(0) if e.type == "model.responded"]
    assert sum(
        s["attributes"]["llm.token_count.prompt"] for s in lines if s["attributes"]["openinference.span.kind"] == "LLM"
    ) == sum(u.prompt_tokens for u in usage)
    assert sum(
        s["attributes"]["llm.token_count.completion"]
        for s in lines
        if s["attributes"]["openinference.span.kind"] == "LLM"
    ) == sum(u.completion_tokens for u in usage)

    again = tmp_path / "again.jsonl"
    assert holon(home, "trace", "export", "--out", str(again)).code == 0
    assert again.read_bytes() == out.read_bytes()  # byte-identical: ids derive from ledger ids


def test_otlp_json_and_filters(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "otlp.jsonl"
    assert holon(home, "trace", "export", "--format", "otlp-json", "--agent", "bob", "--out", str(out)).code == 0
    [body] = [json.loads(line) for line in out.read_text().splitlines()]
    spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert {s["name"] for s in spans} >= {"agent bob turn"}
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
    assert all(int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) for s in spans)
    assert holon(home, "trace", "export", "--format", "nope", "--out", str(out)).code == 2
    assert holon(home, "trace", "export", "--since", "yesterday", "--out", str(out)).code == 2
    empty = tmp_path / "none.jsonl"
    assert holon(home, "trace", "export", "--since", "2100-01-01", "--out", str(empty), "--json").json()["traces"] == 0


def test_the_validator_catches_what_breaks_halo() -> None:
    span = Span("a" * 32, "b" * 16, "", "x", "LLM", 1_000, 2_000, attributes={"openinference.span.kind": "LLM"})
    problems = check_halo_line(halo_line(span))
    assert any("inference.project_id" in p for p in problems) and any("llm.input_messages" in p for p in problems)
    bad = halo_line(Span("nothex", "b" * 16, "", "x", "TOOL", 2_000, 1_000))
    assert any("trace_id" in p for p in check_halo_line(bad)) and any("end_time" in p for p in check_halo_line(bad))
    assert nano_time(1_795_000_000_123_456_789) == "2026-11-18T11:06:40.123456789Z"


def test_stats_equal_the_scripted_run(home: Path) -> None:
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        stats = trace_stats(store)
        only_bob = trace_stats(store, TraceFilter(agent_id=store.agent("bob").agent_id))
        export_traces(store, home / "x.jsonl", fmt="halo-jsonl", by="episode")  # no episodes sealed: no traces
    ada = stats["agents"]["ada"]
    assert (ada["turns"], ada["outcomes"], ada["model_calls"], ada["tool_calls"], ada["tool_errors"]) == (
        2,
        {"completed": 2},
        3,
        2,
        1,
    )
    assert ada["tokens_per_turn"]["total"] == 135 + 230 + 77
    assert stats["turns"] == 3 and set(only_bob["agents"]) == {"bob"}
    assert [e["source"] for e in stats["errors"]] == ["memory_get"]
    assert {t["tool"] for t in stats["slowest_tools"]} == {"memory_search", "memory_get"}
    r = holon(home, "trace", "stats")
    assert r.code == 0 and "ada: 2 turns" in r.out
