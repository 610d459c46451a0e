"""Trace export (RFC 0007): a scripted multi-agent run as HALO JSONL and OTLP JSON, and trace stats.

The HALO lines are checked twice: by the exporter's own validator and by ``HALO_SCHEMA`` below, a
JSON Schema written here from the issue's shape and the rules of HALO's ``verify_traces.py``
(``trace_state`` present, ``kind`` ``SPAN_KIND_*``, ``inference.export.schema_version`` the
integer 1, ``inference.observation_kind`` one of HALO's), so a mistake shared by the exporter and
its validator still fails here. Token totals are summed the way HALO's index does: every
``inference.llm.*`` integer on every line of a trace.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers.runtime import make_host, running
from helpers.turn_cli import REPO, holon, quick_home

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls
from holon.trace.export import error_key, export_traces, trace_stats
from holon.trace.formats import check_halo_line, check_halo_trace, halo_line, nano_time
from holon.trace.spans import MAX_VALUE_CHARS, Span, TraceFilter, TraceReader, turn_spans

U = ev.Usage

_TIME = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$"}
_INT = {"type": "integer"}
_JSON_TEXT = {"type": "string", "pattern": r"^\["}
_STR = {"type": "string", "minLength": 1}
HALO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["trace_id", "span_id", "parent_span_id", "trace_state", "name", "kind", "start_time", "end_time",
                 "status", "resource", "scope", "attributes"],
    "properties": {
        "trace_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
        "span_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "parent_span_id": {"type": "string", "pattern": "^([0-9a-f]{16})?$"},
        "trace_state": {"type": "string"},
        "name": _STR,
        "kind": {"type": "string", "pattern": "^SPAN_KIND_[A-Z]+$"},
        "start_time": _TIME,
        "end_time": _TIME,
        "status": {"type": "object", "additionalProperties": False, "required": ["code", "message"], "properties": {
            "code": {"enum": ["STATUS_CODE_OK", "STATUS_CODE_ERROR", "STATUS_CODE_UNSET"]},
            "message": {"type": "string"}}},
        "resource": {"type": "object", "additionalProperties": False, "required": ["attributes"], "properties": {
            "attributes": {"type": "object", "required": ["service.name", "service.version"],
                           "properties": {"service.name": _STR, "service.version": _STR}}}},
        "scope": {"type": "object", "additionalProperties": False, "required": ["name", "version"],
                  "properties": {"name": _STR, "version": {"type": "string"}}},
        "attributes": {
            "type": "object",
            "required": ["openinference.span.kind", "inference.export.schema_version", "inference.project_id",
                         "inference.observation_kind", "inference.agent_name", "inference.agent_id", "session.id"],
            "properties": {
                "openinference.span.kind": {"enum": ["AGENT", "LLM", "TOOL", "CHAIN"]},
                "inference.export.schema_version": {"type": "integer", "const": 1},
                "inference.observation_kind": {"enum": ["LLM", "TOOL", "AGENT", "CHAIN", "GUARDRAIL", "SPAN"]},
                "inference.project_id": _STR, "inference.agent_name": _STR, "inference.agent_id": _STR,
                "session.id": _STR, "inference.llm.model_name": _STR, "llm.model_name": _STR,
                "inference.llm.input_tokens": _INT, "inference.llm.output_tokens": _INT,
                "llm.token_count.prompt": _INT, "llm.token_count.completion": _INT, "llm.token_count.total": _INT,
                "llm.input_messages": _JSON_TEXT, "llm.output_messages": _JSON_TEXT,
                "tool.name": _STR, "input.value": {"type": "string"}, "output.value": {"type": "string"},
            },
            "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
            "allOf": [
                {"if": {"properties": {"openinference.span.kind": {"const": "LLM"}}},
                 "then": {"required": ["inference.llm.model_name", "llm.model_name", "inference.llm.input_tokens",
                                       "inference.llm.output_tokens", "llm.token_count.prompt",
                                       "llm.token_count.completion", "llm.token_count.total", "llm.input_messages",
                                       "llm.output_messages"]}},
                {"if": {"properties": {"openinference.span.kind": {"const": "TOOL"}}},
                 "then": {"required": ["tool.name", "input.value", "output.value"]}},
                {"if": {"properties": {"openinference.span.kind": {"const": "AGENT"}}},
                 "then": {"not": {"anyOf": [{"required": ["inference.llm.input_tokens"]},
                                            {"required": ["llm.token_count.total"]}]}}},
            ],
        },
    },
}  # fmt: skip


def assert_halo_file(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every line against HALO_SCHEMA, JSON message strings parse, times ordered, parents present."""
    for line in lines:
        jsonschema.validate(line, HALO_SCHEMA)
        assert line["start_time"] <= line["end_time"], line
        for key in ("llm.input_messages", "llm.output_messages"):
            if key in line["attributes"]:
                assert isinstance(json.loads(line["attributes"][key]), list), line["attributes"][key]
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        by_trace[line["trace_id"]].append(line)
    for spans in by_trace.values():
        ids = {s["span_id"] for s in spans}
        assert len(ids) == len(spans)
        assert [s for s in spans if s["parent_span_id"] == ""] == [spans[0]], "one root per trace, written first"
        assert all(s["parent_span_id"] in ids for s in spans if s["parent_span_id"]), "a parent outside its trace"
    return dict(by_trace)


def halo_token_sums(spans: list[dict[str, Any]]) -> tuple[int, int]:
    """What HALO's index shows for a trace: inference.llm.* integers added up over every span."""
    totals = [0, 0]
    for s in spans:
        for i, key in enumerate(("inference.llm.input_tokens", "inference.llm.output_tokens")):
            value = s["attributes"].get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                totals[i] += value
    return totals[0], totals[1]


def ledger_tokens(home: Path) -> dict[str, tuple[int, int]]:
    """(prompt, completion) tokens per turn id, from the ledger's model.responded events."""
    paths = resolve_home(str(home))
    out: dict[str, tuple[int, int]] = {}
    with Store.open(paths, load_settings(paths)) as store:
        for e in store.ledger.read(0):
            if e.type == "model.responded":
                p, c = out.get(str(e.turn_id), (0, 0))
                out[str(e.turn_id)] = (p + e.payload.usage.prompt_tokens, c + e.payload.usage.completion_tokens)
    return out


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(home: Path) -> None:
    """ada: a turn with memory_search, memory_get (failing) and a reply; bob: a plain turn; ada again."""
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        ada = create_agent(store, "ada")
        bob = create_agent(store, "bob")

        def slow(seconds: float, result: Any) -> Any:
            """A model call that takes ``seconds`` of (fake) time, for latency percentiles."""

            def step(_request: Any) -> Any:
                clock.advance(seconds=seconds)
                return result

            return step

        provider = ScriptedProvider([
            slow(0.8, tool_calls(("memory_search", {"query": "deploy notes"}), ("memory_get", {"ref": "event:999999"}),
                                 usage=U(prompt_tokens=120, completion_tokens=15, total_tokens=135))),
            slow(1.2, reply("Deployed. " + "x" * (MAX_VALUE_CHARS + 50),
                            usage=U(prompt_tokens=200, completion_tokens=30, total_tokens=230))),
            slow(0.5, reply("Hi bob here.", usage=U(prompt_tokens=50, completion_tokens=5, total_tokens=55))),
            slow(0.3, reply("Second answer.", usage=U(prompt_tokens=70, completion_tokens=7, total_tokens=77))),
        ])  # fmt: skip

        async def go() -> None:
            host = make_host(store, provider, clock=clock)
            async with running(host):
                # "New topic:" seals ada's first episode (its first turn), for --by episode.
                for agent, text in ((ada, "deploy the api"), (bob, "hello"), (ada, "New topic: and again")):
                    host.submit(agent.agent_id, text)
                    await host.run_agent(agent.agent_id)
                    clock.advance(seconds=5)

        asyncio.run(go())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = quick_home(tmp_path, "zed")
    _run(home)
    return home


@pytest.mark.slow
def test_halo_jsonl_lines_are_valid_structured_and_deterministic(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "traces.jsonl"
    r = holon(home, "trace", "export", "--format", "halo-jsonl", "--out", str(out), "--json")
    assert r.code == 0, r
    lines = read_lines(out)
    assert r.json()["traces"] == 3 and r.json()["spans"] == len(lines)
    assert all(check_halo_line(line) == [] for line in lines)
    by_trace = assert_halo_file(lines)
    assert all(line["attributes"]["inference.export.schema_version"] == 1 for line in lines)
    assert all(line["trace_state"] == "" for line in lines)

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

    # Token totals equal the ledger's, per trace, summed over every span as HALO's index does.
    per_turn = ledger_tokens(home)
    assert {spans[0]["attributes"]["holon.turn_id"]: halo_token_sums(spans) for spans in by_trace.values()} == per_turn
    assert sum(p for p, _ in per_turn.values()) == 120 + 200 + 50 + 70
    assert root["attributes"]["holon.turn.total_tokens"] == 135 + 230

    again = tmp_path / "again.jsonl"
    assert holon(home, "trace", "export", "--out", str(again)).code == 0
    assert again.read_bytes() == out.read_bytes()  # byte-identical: ids derive from ledger ids


@pytest.mark.slow
def test_out_dash_writes_the_traces_to_stdout_and_the_summary_to_stderr(home: Path, tmp_path: Path) -> None:
    """``--out -`` (issue 15, item 10) is stdout, as for other tools, not a file named ``-``."""
    out = tmp_path / "traces.jsonl"
    assert holon(home, "trace", "export", "--out", str(out)).code == 0
    r = holon(home, "trace", "export", "--out", "-")
    assert r.code == 0, r
    assert r.out == out.read_text(encoding="utf-8")  # the same bytes, and nothing else on stdout
    assert "wrote 3 traces" in r.err and "Traceback" not in r.err, r
    progress = [ln for ln in r.err.splitlines() if ln.startswith("exporting traces: ")]
    assert 2 <= len(progress) <= 4 and "3/3, done" in progress[-1], r.err
    assert not (REPO / "-").exists()  # the CLI runs in the repository: no file named '-' appeared there
    r = holon(home, "trace", "export", "--format", "otlp-json", "--out", "-", "--json")
    assert r.code == 0 and json.loads(r.err)["traces"] == 3, r
    assert len(r.out.splitlines()) == 3 and all("resourceSpans" in json.loads(line) for line in r.out.splitlines())


@pytest.mark.slow
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
    ok = halo_line(Span("a" * 32, "b" * 16, "", "x", "CHAIN", 1_000, 2_000, attributes={
        "openinference.span.kind": "CHAIN", "inference.observation_kind": "CHAIN", "inference.export.schema_version": 1,
        "inference.project_id": "p", "inference.agent_name": "a", "inference.agent_id": "i", "session.id": "i"}))  # fmt: skip
    assert check_halo_line(ok) == []
    jsonschema.validate(ok, HALO_SCHEMA)
    for key, value, expected in (
        ("inference.export.schema_version", "1", "schema_version"),  # HALO's verifier wants the integer 1
        ("inference.observation_kind", "STEP", "observation_kind"),
    ):
        bad = {**ok, "attributes": {**ok["attributes"], key: value}}
        assert any(expected in p for p in check_halo_line(bad))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, HALO_SCHEMA)
    assert any("SPAN_KIND_" in p for p in check_halo_line({**ok, "kind": "INTERNAL"}))
    assert any("trace_state" in p for p in check_halo_line({k: v for k, v in ok.items() if k != "trace_state"}))
    orphan = {**ok, "span_id": "c" * 16, "parent_span_id": "d" * 16}
    assert check_halo_trace([ok, orphan]) == [f"span {'c' * 16}: parent_span_id {'d' * 16} is not in trace {'a' * 32}"]
    assert check_halo_trace([ok, {**orphan, "parent_span_id": "b" * 16}]) == []


@pytest.mark.slow
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
    memory_get_turns = [t["turn_id"] for t in stats["slowest_tools"] if t["tool"] == "memory_get"]
    assert stats["errors"][0]["turns"] == memory_get_turns and len(memory_get_turns) == 1  # the error's turn
    assert {t["tool"] for t in stats["slowest_tools"]} == {"memory_search", "memory_get"}
    r = holon(home, "trace", "stats")
    assert r.code == 0 and "ada: 2 turns" in r.out


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, tz=UTC).isoformat()


def _turn_starts(home: Path) -> list[tuple[str, int]]:
    """(agent name, ts_us) of every turn.started, in ledger order."""
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        names = {a.agent_id: a.name for a in store.agents()}
        return [(names[e.agent_id], e.ts_us) for e in store.ledger.read(0) if e.type == "turn.started"]


@pytest.mark.slow
def test_by_episode_and_until(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    r = holon(home, "trace", "export", "--by", "episode", "--out", str(out), "--json")
    assert r.code == 0 and r.json()["traces"] == 1, r  # only ada's first episode is sealed
    lines = read_lines(out)
    [spans] = assert_halo_file(lines).values()
    root = spans[0]
    assert root["name"].startswith("agent ada episode") and root["attributes"]["holon.episode.turns"] == 1
    [turn_root] = [s for s in spans if s["parent_span_id"] == root["span_id"]]
    assert turn_root["attributes"]["holon.turn_id"] and turn_root["attributes"]["inference.agent_name"] == "ada"
    assert all(s["parent_span_id"] == turn_root["span_id"] for s in spans[2:])
    assert halo_token_sums(spans) == ledger_tokens(home)[turn_root["attributes"]["holon.turn_id"]] == (320, 45)
    assert root["status"]["code"] == "STATUS_CODE_OK" and root["start_time"] <= turn_root["start_time"]

    starts = _turn_starts(home)
    assert [n for n, _ in starts] == ["ada", "bob", "ada"]
    until = tmp_path / "until.jsonl"
    r = holon(home, "trace", "export", "--until", _iso(starts[1][1]), "--out", str(until), "--json")
    assert r.code == 0 and r.json()["traces"] == 1, r  # --until is exclusive: bob's turn starts at that instant
    assert {s["attributes"]["inference.agent_name"] for s in read_lines(until)} == {"ada"}
    r = holon(home, "trace", "export", "--since", _iso(starts[1][1]), "--until", _iso(starts[2][1]),
              "--out", str(until), "--json")  # fmt: skip
    assert r.json()["traces"] == 1 and {s["attributes"]["inference.agent_name"] for s in read_lines(until)} == {"bob"}


def _otlp_spans(path: Path) -> dict[str, list[dict[str, Any]]]:
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for body in read_lines(path):
        [rs] = body["resourceSpans"]
        [ss] = rs["scopeSpans"]
        for s in ss["spans"]:
            by_trace[s["traceId"]].append(s)
    return dict(by_trace)


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in span["attributes"]:
        [(kind, value)] = a["value"].items()
        out[a["key"]] = int(value) if kind == "intValue" else value
    return out


@pytest.mark.slow
def test_otlp_json_for_every_agent(home: Path, tmp_path: Path) -> None:
    out, again, halo = tmp_path / "otlp.jsonl", tmp_path / "otlp2.jsonl", tmp_path / "halo.jsonl"
    assert holon(home, "trace", "export", "--format", "otlp-json", "--out", str(out)).code == 0
    assert holon(home, "trace", "export", "--format", "otlp-json", "--out", str(again)).code == 0
    assert again.read_bytes() == out.read_bytes()
    assert holon(home, "trace", "export", "--out", str(halo)).code == 0
    traces = _otlp_spans(out)
    assert len(traces) == 3 and len(out.read_text().splitlines()) == 3  # one request body per trace
    # The same trace and span ids as the HALO file, so the two exports describe one set of traces.
    halo_ids = {(s["trace_id"], s["span_id"], s["parent_span_id"]) for s in read_lines(halo)}
    assert {(s["traceId"], s["spanId"], s["parentSpanId"]) for spans in traces.values() for s in spans} == halo_ids
    per_turn = ledger_tokens(home)
    agents = set()
    for spans in traces.values():
        attrs = [_attrs(s) for s in spans]
        root = next(a for s, a in zip(spans, attrs, strict=True) if not s["parentSpanId"])
        agents.add(root["inference.agent_name"])
        summed = tuple(
            sum(a.get(k, 0) for a in attrs) for k in ("inference.llm.input_tokens", "inference.llm.output_tokens")
        )
        assert summed == per_turn[root["holon.turn_id"]]
        for s, a in zip(spans, attrs, strict=True):
            assert s["kind"] == (3 if a["openinference.span.kind"] == "LLM" else 1)
            if a["openinference.span.kind"] == "LLM":  # OpenInference's flattened keys, for Phoenix
                assert a["llm.output_messages.0.message.role"] == "assistant"
                assert "llm.input_messages.0.message.role" in a
    assert agents == {"ada", "bob"}


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (what ``statistics.quantiles(method="inclusive")`` does)."""
    values = sorted(values)
    pos = (len(values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return round(values[low] + (values[high] - values[low]) * (pos - low), 3)


@pytest.mark.slow
def test_stats_json_and_since_through_the_cli(home: Path) -> None:
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        ada_id = store.agent("ada").agent_id
        events = [e for e in store.ledger.read(0) if e.agent_id == ada_id]
    asked = {(e.turn_id, e.payload.round): e.ts_us for e in events if e.type == "model.requested"}
    latencies = [(e.ts_us - asked[(e.turn_id, e.payload.round)]) / 1000 for e in events if e.type == "model.responded"]
    assert [round(x) for x in latencies] == [800, 1200, 300]

    r = holon(home, "trace", "stats", "--json")
    assert r.code == 0, r
    ada = r.json()["agents"]["ada"]
    assert ada["model_latency_ms"] == {"p50": _percentile(latencies, 0.50), "p95": _percentile(latencies, 0.95)}
    assert ada["tokens_per_turn"] == {"p50": 221.0, "p95": 350.6, "total": 442}  # turns of 365 and 77 tokens
    assert r.json()["agents"]["bob"]["tokens_per_turn"] == {"p50": 55, "p95": 55, "total": 55}
    assert round(ada["model_latency_ms"]["p50"]) == 800 and round(ada["model_latency_ms"]["p95"]) == 1160
    [error] = r.json()["errors"]
    assert error["source"] == "memory_get" and error["count"] == 1
    assert (
        error["error"]
        == error_key(error["example"])
        == "nothing at event:_ in ada's memory (no such record, or not this agent's)"
    )
    assert ada["cost_usd"] == 0.0

    since = _iso(_turn_starts(home)[1][1])
    r = holon(home, "trace", "stats", "--since", since, "--json")
    assert r.code == 0 and r.json()["turns"] == 2, r
    assert r.json()["agents"]["ada"]["tokens_per_turn"] == {"p50": 77, "p95": 77, "total": 77}
    assert r.json()["agents"]["ada"]["tool_calls"] == 0 and r.json()["errors"] == []
    assert holon(home, "trace", "stats", "--since", "soon").code == 2


@pytest.mark.slow
def test_export_after_ledger_prune(tmp_path: Path) -> None:
    """Blob bodies pruned by `holon ledger prune`: the export still succeeds, with pruned markers."""
    home = quick_home(tmp_path, "zed")
    config = home / "holon.toml"
    config.write_text(config.read_text().replace("blob_threshold_bytes = 16384", "blob_threshold_bytes = 256"))
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        ada = create_agent(store, "ada")
        provider = ScriptedProvider([
            tool_calls(("memory_search", {"query": "notes " * 80}), usage=U(prompt_tokens=100, completion_tokens=10, total_tokens=110)),
            reply("done " * 100, usage=U(prompt_tokens=200, completion_tokens=20, total_tokens=220)),
        ])  # fmt: skip

        async def go() -> None:
            host = make_host(store, provider, clock=clock)
            async with running(host):
                host.submit(ada.agent_id, "hello " * 100)
                await host.run_agent(ada.agent_id)

        asyncio.run(go())
        assert store.ledger.query("SELECT count(*) FROM blobs", ())[0][0] >= 3
    r = holon(home, "ledger", "prune", "--older-than-days", "0", "--json")
    assert r.code == 0 and r.json()["pruned"] >= 3, r

    out = tmp_path / "pruned.jsonl"
    r = holon(home, "trace", "export", "--out", str(out), "--json")
    assert r.code == 0, r
    assert not (tmp_path / "pruned.jsonl.tmp").exists()
    lines = read_lines(out)
    [spans] = assert_halo_file(lines).values()
    assert all(check_halo_line(line) == [] for line in lines)
    assert halo_token_sums(spans) == (300, 30)
    llm = [s["attributes"] for s in spans if s["attributes"]["openinference.span.kind"] == "LLM"]
    notes = [json.loads(a["llm.input_messages"]) for a in llm]
    assert all(n[0]["role"] == "note" and n[0]["content"].startswith("[pruned: original ") for n in notes), notes
    root = spans[0]["attributes"]
    assert root["input.value"].startswith("hello hello") and "…[pruned: original 600 bytes]" in root["input.value"]
    [tool] = [s["attributes"] for s in spans if s["attributes"]["openinference.span.kind"] == "TOOL"]
    assert "[pruned: original" in tool["input.value"]

    # A failing export (here: the target is a directory) leaves neither a temporary file nor a half file.
    target = tmp_path / "adir"
    (target / "x").mkdir(parents=True)
    with Store.open(paths, load_settings(paths)) as store, pytest.raises(OSError):
        export_traces(store, target, fmt="halo-jsonl")
    assert not (tmp_path / "adir.tmp").exists() and (target / "x").is_dir()


def test_unanswered_calls_become_spans_ending_with_the_turn(tmp_path: Path) -> None:
    """A model call with no response and a tool call with no result (a crash, an interruption)."""
    from helpers.ctx_ledger import Script

    from holon.runtime.recovery import settle_unfinished_turn

    paths = resolve_home(str(tmp_path / "home"))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        crashed = Script(store, agent_id="agt_crashed", name="crashed")
        crashed.say("summarise the logs")
        crashed.start()
        crashed.append(ev.ModelRequested(turn_id=str(crashed.turn_id), round=0, model="m", messages=2))
        clock.advance(seconds=3)
        settle_unfinished_turn(store, store.agent("agt_crashed"), reason="holon stopped")
        running_ = Script(store, agent_id="agt_running", name="running", turns=10)  # turn ids are unique in a ledger
        running_.say("run the tests")
        running_.start()
        running_.append(
            ev.ModelRequested(turn_id=str(running_.turn_id), round=0, model="m", messages=2),
            ev.ModelResponded(turn_id=str(running_.turn_id), round=0, model="m", usage=U(prompt_tokens=9, completion_tokens=1, total_tokens=10),
                              tool_calls=[ev.ToolCallSpec(call_id="c1", tool="shell", arguments="{}")]),
            ev.ToolCalled(call_id="c1", tool="shell", arguments="{}"),
        )  # fmt: skip
        clock.advance(seconds=2)
        reader = TraceReader(store)
        traces = {t.agent_name: turn_spans(t, project="p", store=store) for t in reader.turns()}
        out = tmp_path / "unfinished.jsonl"
        export_traces(store, out, fmt="halo-jsonl")
    assert_halo_file(read_lines(out))

    root, llm = traces["crashed"]
    assert (root.status, llm.kind, llm.status) == ("ERROR", "LLM", "ERROR")
    assert llm.end_ns == root.end_ns > llm.start_ns + 2_900_000_000  # ends when the turn settled
    assert "no model response recorded" in llm.status_message and llm.attributes["holon.unfinished"] is True
    assert llm.attributes["inference.llm.input_tokens"] == 0 and json.loads(llm.attributes["llm.output_messages"]) == []

    root, llm, tool = traces["running"]
    assert (root.status, llm.status, tool.kind, tool.status) == ("UNSET", "OK", "TOOL", "UNSET")
    assert (
        tool.end_ns == root.end_ns and tool.attributes["tool.name"] == "shell" and tool.parent_span_id == root.span_id
    )
    assert llm.attributes["llm.token_count.total"] == 10


def test_status_messages_are_capped_with_a_marker(tmp_path: Path) -> None:
    from helpers.ctx_ledger import Script

    paths = resolve_home(str(tmp_path / "home"))
    with Store.open(paths, load_settings(paths), clock=FakeClock()) as store:
        s = Script(store, agent_id="agt_loud", name="loud")
        s.say("run it")
        s.start()
        s.append(
            ev.ToolCalled(call_id="c1", tool="shell", arguments="{}"),
            ev.ToolResulted(call_id="c1", tool="shell", status="error", output="boom " * 1_000),
        )
        s.settle(None, outcome="failed")
        [turn] = TraceReader(store).turns()
        root, tool = turn_spans(turn, project="p", store=store)
    assert tool.status == "ERROR" and tool.status_message.startswith("error: boom boom")
    assert tool.status_message.endswith("…[truncated: original 5,007 characters]") and len(tool.status_message) < 2_100
    assert tool.attributes["output.value"] == "boom " * 1_000  # the value itself is under the 16,000 cap
    assert root.status == "ERROR" and root.status_message == "failed"


def test_cap_json_keeps_the_newest_messages() -> None:
    from holon.trace.spans import cap_json

    messages = [{"role": "user", "content": f"m{i:03d} " + "x" * 1_000} for i in range(200)]
    text = cap_json(messages)
    kept = json.loads(text)
    assert len(text) <= MAX_VALUE_CHARS + 1_000
    assert kept[0]["role"] == "note" and "earlier messages left out" in kept[0]["content"]
    assert kept[-1]["content"].startswith("m199 ") and "[truncated: original 1,005 characters]" in kept[-1]["content"]
    assert [m["content"][:4] for m in kept[1:]] == [f"m{i:03d}" for i in range(201 - len(kept), 200)]
    assert cap_json(messages[:3]) == json.dumps(messages[:3])
