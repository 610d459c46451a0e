"""``holon diagnose``: a built-in diagnostic agent whose tools read the ledger as a trace store.

It runs on holon's own turn loop with any configured model, as an agent named ``diagnose``
(setting ``diagnostic``: the daemon never runs it; only this command does). Its tools:

* ``trace_overview`` — the dataset first: turns per agent, outcomes, the error taxonomy, sample
  turn ids (recent failures and recent turns);
* ``trace_query`` — turns filtered by agent, outcome, tool and errors, a page at a time;
* ``trace_turn`` — one turn's spans (AGENT, CHAIN, LLM, TOOL) with each field capped;
* ``trace_search`` — a regular expression over span texts, with exact match counts.

Every result is held to ``RESULT_CAP`` characters: a larger one is *refused* with its size and
the next useful calls (a narrower filter, a smaller cap, the next page), never cut silently.
The agent advises; it has no tool that changes anything. Its final answer is delivered as a
brief and saved under ``<home>/diagnose/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from holon.clock import SystemClock, format_us
from holon.errors import UsageError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import configure_agent, create_agent
from holon.runtime.providers.base import ModelSettings, Provider
from holon.runtime.tasks import TaskManager
from holon.runtime.tools import Tool, ToolContext, ToolParams, ToolRegistry, ToolRetry
from holon.runtime.turn import TurnResult, TurnRunner
from holon.trace.export import trace_stats
from holon.trace.spans import Span, TraceFilter, TraceReader, turn_spans

__all__ = ["AGENT_NAME", "RESULT_CAP", "diagnose", "trace_tools"]

AGENT_NAME = "diagnose"
RESULT_CAP = 8_000
_SEARCH_FIELDS = ("input.value", "output.value", "llm.input_messages", "llm.output_messages")

INSTRUCTIONS = """You are holon's diagnostic agent. Find out why agents fail or behave badly, from
their traces. Start with trace_overview, then narrow down with trace_query, read single turns with
trace_turn and look for patterns with trace_search. A refused call tells you how to narrow it.
You advise only: you cannot change any agent. End with a short report: findings, evidence
(turn ids), and recommendations."""


class OverviewParams(ToolParams):
    pass


class QueryParams(ToolParams):
    agent: str | None = Field(None, max_length=128, description="Agent name.")
    outcome: str | None = Field(None, description="completed, waiting, failed or interrupted.")
    tool: str | None = Field(None, max_length=64, description="Only turns that called this tool.")
    has_error: bool | None = Field(None, description="Only turns with (or without) a failed span.")
    limit: int = Field(20, ge=1, le=200)
    offset: int = Field(0, ge=0)


class TurnParams(ToolParams):
    turn_id: str = Field(min_length=1, max_length=200)
    max_field_chars: int = Field(300, ge=20, le=100_000, description="Cap per attribute value.")


class SearchParams(ToolParams):
    pattern: str = Field(min_length=1, max_length=500, description="A Python regular expression.")
    limit: int = Field(20, ge=1, le=200)


@dataclass
class _Data:
    """The filtered traces, built once per diagnosis (a turn's spans by turn id)."""

    spans: dict[str, list[Span]]
    stats: dict[str, Any]


def _load(store: Store, flt: TraceFilter) -> _Data:
    reader = TraceReader(store, flt)
    spans = {t.turn_id: turn_spans(t, project="diagnose", store=store) for t in reader.turns()
             if t.agent_id != _diag_id(store)}  # fmt: skip
    return _Data(spans, trace_stats(store, flt))


def _diag_id(store: Store) -> str | None:
    try:
        return store.agent(AGENT_NAME).agent_id
    except Exception:
        return None


def _fit(payload: Any, *, what: str, next_calls: list[str]) -> str:
    text = json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=True)
    if len(text) <= RESULT_CAP:
        return text
    size = {"characters": len(text), "cap": RESULT_CAP}
    if isinstance(payload, dict):
        size["items"] = {k: len(v) for k, v in payload.items() if isinstance(v, list)}  # type: ignore[assignment]
    return json.dumps({"refused": f"{what} is {len(text):,} characters, over the cap of {RESULT_CAP:,}",
                       "size": size, "next_calls": next_calls}, indent=1)  # fmt: skip


def _summary(turn_id: str, spans: list[Span]) -> dict[str, Any]:
    root = spans[0]
    return {
        "turn_id": turn_id,
        "agent": root.attributes["inference.agent_name"],
        "started": format_us(root.start_ns // 1000),
        "duration_ms": round((root.end_ns - root.start_ns) / 1e6, 1),
        "outcome": root.attributes["holon.outcome"],
        "llm_calls": sum(1 for s in spans if s.kind == "LLM"),
        "tools": [s.attributes["tool.name"] for s in spans if s.kind == "TOOL"],
        "errors": [f"{s.name}: {s.status_message[:120]}" for s in spans if s.status == "ERROR"],
        "tokens": root.attributes["holon.turn.total_tokens"],
    }


def trace_tools(store: Store, flt: TraceFilter) -> list[Tool]:
    """The diagnostic tools over the traces ``flt`` selects (read once, on first use)."""
    cache: list[_Data] = []

    def data() -> _Data:
        if not cache:
            cache.append(_load(store, flt))
        return cache[0]

    async def overview(ctx: ToolContext, p: OverviewParams) -> str:
        d = data()
        turns = list(d.spans.items())
        failed = [t for t, s in turns if s[0].status == "ERROR" or any(x.status == "ERROR" for x in s)]
        payload = {
            "turns": len(turns),
            "agents": {
                n: {
                    "turns": a["turns"],
                    "outcomes": a["outcomes"],
                    "tool_errors": a["tool_errors"],
                    "model_latency_ms": a["model_latency_ms"],
                }
                for n, a in d.stats["agents"].items()
            },
            "error_taxonomy": [{k: e[k] for k in ("source", "error", "count")} for e in d.stats["errors"][:15]],
            "sample_failed_turns": failed[-5:],
            "sample_recent_turns": [t for t, _s in turns[-5:]],
        }
        return _fit(payload, what="the overview", next_calls=['trace_query {"has_error": true, "limit": 10}'])

    async def query(ctx: ToolContext, p: QueryParams) -> str:
        rows = []
        for turn_id, spans in data().spans.items():
            s = _summary(turn_id, spans)
            if p.agent and s["agent"] != p.agent:
                continue
            if p.outcome and s["outcome"] != p.outcome:
                continue
            if p.tool and p.tool not in s["tools"]:
                continue
            if p.has_error is not None and bool(s["errors"]) != p.has_error:
                continue
            rows.append(s)
        page = rows[p.offset : p.offset + p.limit]
        payload = {"matched": len(rows), "offset": p.offset, "turns": page}
        smaller = max(1, p.limit // 4)
        return _fit(payload, what="this page of turns", next_calls=[
            f'trace_query {{"limit": {smaller}, "offset": {p.offset}}} (a smaller page)',
            "trace_query with agent, outcome, tool or has_error to narrow it",
        ])  # fmt: skip

    async def turn(ctx: ToolContext, p: TurnParams) -> str:
        spans = data().spans.get(p.turn_id)
        if spans is None:
            raise ToolRetry(f"no turn {p.turn_id!r} in these traces; trace_query lists turn ids")
        cap = p.max_field_chars
        out = [{"span": s.span_id, "parent": s.parent_span_id, "kind": s.kind, "name": s.name, "status": s.status,
                "status_message": s.status_message[:cap], "duration_ms": round((s.end_ns - s.start_ns) / 1e6, 1),
                "attributes": {k: (v[:cap] + f"…[{len(v):,} chars]" if isinstance(v, str) and len(v) > cap else v)
                               for k, v in sorted(s.attributes.items()) if not k.startswith("inference.export")}}
               for s in spans]  # fmt: skip
        return _fit({"turn_id": p.turn_id, "spans": out}, what=f"turn {p.turn_id} at max_field_chars={cap}",
                    next_calls=[f'trace_turn {{"turn_id": "{p.turn_id}", "max_field_chars": {max(20, cap // 4)}}}'])  # fmt: skip

    async def search(ctx: ToolContext, p: SearchParams) -> str:
        try:
            rx = re.compile(p.pattern)
        except re.error as e:
            raise ToolRetry(f"not a valid regular expression: {e}") from e
        hits, spans_n, matches = [], 0, 0
        for turn_id, spans in data().spans.items():
            for s in spans:
                texts = [str(s.attributes.get(f, "")) for f in _SEARCH_FIELDS] + [s.status_message]
                found = sum(len(rx.findall(t)) for t in texts)
                if not found:
                    continue
                spans_n += 1
                matches += found
                if len(hits) < p.limit:
                    text = next(t for t in texts if rx.search(t))
                    m = rx.search(text)
                    assert m is not None
                    a, b = max(0, m.start() - 80), min(len(text), m.end() + 80)
                    hits.append({"turn_id": turn_id, "span": s.name, "kind": s.kind, "matches": found,
                                 "snippet": text[a:b]})  # fmt: skip
        payload = {"pattern": p.pattern, "matching_spans": spans_n, "matches": matches, "shown": hits}
        return _fit(payload, what="these search hits", next_calls=[f'trace_search {{"pattern": "{p.pattern}", "limit": {max(1, p.limit // 4)}}}'])  # fmt: skip

    return [
        Tool("trace_overview", "Start here: turns per agent, outcomes, error taxonomy, sample turn ids.", OverviewParams, overview),
        Tool("trace_query", 'Turns matching filters, a page at a time. Example: {"has_error": true, "limit": 10}', QueryParams, query),
        Tool("trace_turn", 'One turn\'s spans with each field capped. Example: {"turn_id": "turn_...", "max_field_chars": 300}', TurnParams, turn),
        Tool("trace_search", 'Regex over span texts, with exact counts. Example: {"pattern": "Permission denied"}', SearchParams, search),
    ]  # fmt: skip


def _agent(store: Store, model: dict[str, Any]) -> str:
    try:
        agent = store.agent(AGENT_NAME)
        if model:
            configure_agent(store, agent.agent_id, model, unset=[])
        return agent.agent_id
    except Exception:
        return create_agent(
            store, AGENT_NAME, settings={"diagnostic": True, **model}, origin="operator:diagnose"
        ).agent_id


def diagnose(
    store: Store, question: str, *, flt: TraceFilter, resolver: Callable[[Any], tuple[Provider, ModelSettings]],
    model: dict[str, Any] | None = None,
) -> tuple[TurnResult, Path]:  # fmt: skip
    """Run one diagnostic turn over ``question``; returns its result and the saved report."""
    import asyncio

    if not question.strip():
        raise UsageError('ask a question, e.g. holon diagnose "why do alice\'s turns fail?"')
    agent_id = _agent(store, model or {})
    scope = []
    if flt.agent_id:
        scope.append(f"agent {store.agent(flt.agent_id).name}")
    if flt.since_us:
        scope.append(f"since {format_us(flt.since_us)}")
    text = f"{INSTRUCTIONS}\n\nTraces: {', '.join(scope) or 'every agent, all time'}.\nQuestion: {question}"
    store.append(NewEvent(agent_id, ev.MessageReceived(text=text, sender="operator", channel="diagnose"),
                          origin="operator:diagnose", authority="operator"))  # fmt: skip
    clock = SystemClock()
    runner = TurnRunner(
        store, ToolRegistry(trace_tools(store, flt)), resolver, clock=clock,
        services=type("Services", (), {"tasks": TaskManager(store.append, clock)})(),
    )  # fmt: skip
    result = asyncio.run(runner.run(agent_id))
    assert result is not None
    report = result.reply or f"(no report: the turn {result.outcome}: {result.reason or ''})"
    store.append(
        NewEvent(
            agent_id, ev.BriefDelivered(kind="result", text=report), origin="runtime:diagnose", authority="runtime"
        )
    )
    out_dir = store.paths.root / "diagnose"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{format_us(clock.now_us())[:19].replace(':', '')}-{result.turn_id[-8:]}.md"
    path.write_text(f"# Diagnosis\n\nQuestion: {question}\n\n{report}\n", encoding="utf-8")
    return result, path
