"""``holon diagnose``: a built-in diagnostic agent whose tools read the ledger as a trace store.

It runs on holon's own turn loop with any configured model, as an agent named ``diagnose``
(setting ``diagnostic``: the daemon never runs it, and its own turns are never in the traces it
reads). Each run starts from a clean context: a new agent takes the name, the previous one is
retired (its reports stay in the ledger and in ``<home>/diagnose/``). Its tools:

* ``trace_overview`` — the dataset first: turns per agent, outcomes, the error taxonomy, sample
  turn ids (recent failures and recent turns);
* ``trace_query`` — turns filtered by agent, outcome, tool and errors, a page at a time;
* ``trace_turn`` — one turn's spans (AGENT, CHAIN, LLM, TOOL), selected by id or kind and paged,
  with each field capped;
* ``trace_search`` — a regular expression over the full span texts (scoped by agent, turn and
  kind), with exact match counts, run in a child process with a time limit.

Every result is held to ``RESULT_CAP`` characters. A larger one is *refused* with a size summary
and ``next_calls``: tool calls (``{"tool", "arguments", "why"}``, the arguments a JSON object to
send as it is) that keep the caller's filters and were checked to fit before they were offered,
so a refusal always leads somewhere. The agent advises; it has no tool that changes anything.
Its final answer is delivered as a brief and saved under ``<home>/diagnose/``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from holon.clock import SystemClock, format_us
from holon.errors import ConflictError, NotFoundError, UsageError
from holon.ledger import EventQuery, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelSettings, Provider
from holon.runtime.settings import read_settings
from holon.runtime.tasks import TaskManager
from holon.runtime.tools import TaskServices, Tool, ToolContext, ToolParams, ToolRegistry, ToolRetry
from holon.runtime.turn import TurnResult, TurnRunner
from holon.trace.export import trace_stats
from holon.trace.search import SearchTimeout, SpanText, count_matches, span_texts
from holon.trace.spans import Span, TraceFilter, TraceReader, Turn, turn_spans

__all__ = ["AGENT_NAME", "RESULT_CAP", "Limits", "diagnose", "model_failed", "trace_tools"]

AGENT_NAME = "diagnose"
RESULT_CAP = 8_000
MIN_FIELD_CHARS = 20
#: Per turn summary: at most this many tool names and error lines (the rest are counted).
_LISTED_TOOLS, _LISTED_ERRORS = 20, 3
#: Attributes every span of a turn repeats; trace_turn shows them once, at the turn.
_HIDDEN = frozenset({"inference.export.schema_version", "inference.project_id", "inference.agent_name",
                     "inference.agent_id", "session.id", "openinference.span.kind", "inference.observation_kind"})  # fmt: skip

SpanKind = Literal["AGENT", "CHAIN", "LLM", "TOOL"]
Outcome = Literal["completed", "waiting", "failed", "interrupted", "running"]

INSTRUCTIONS = """You are holon's diagnostic agent. Find out why agents fail or behave badly, from
their traces. Start with trace_overview, then narrow down with trace_query, read single turns with
trace_turn (select spans by span_ids or kinds, page with offset and limit) and look for patterns
with trace_search. A refused call lists next_calls: make one of them as it is.
You advise only: you cannot change any agent. End with a short report: findings, evidence
(turn ids), and recommendations."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds the tools keep to (tests shrink them)."""

    result_chars: int = RESULT_CAP
    search_timeout_s: float = 3.0
    """A pattern still matching after this long is stopped (catastrophic backtracking)."""
    search_chars: int = 20_000_000
    """Most characters one search reads; a larger scope is refused with narrower scopes to try."""


class OverviewParams(ToolParams):
    pass


class QueryParams(ToolParams):
    agent: str | None = Field(None, max_length=128, description="Agent name.")
    outcome: Outcome | None = Field(None, description="completed, waiting, failed, interrupted or running.")
    tool: str | None = Field(None, max_length=64, description="Only turns that called this tool.")
    has_error: bool | None = Field(None, description="Only turns with (or without) a failed span.")
    limit: int = Field(20, ge=1, le=200)
    offset: int = Field(0, ge=0)


class TurnParams(ToolParams):
    turn_id: str = Field(min_length=1, max_length=200)
    span_ids: list[str] | None = Field(
        None, max_length=200, description="Only these spans (ids from trace_turn or trace_search)."
    )
    kinds: list[SpanKind] | None = Field(None, max_length=4, description="Only spans of these kinds.")
    attributes: list[str] | None = Field(
        None, max_length=50, description="Only these attribute keys; [] lists the spans without attributes."
    )
    offset: int = Field(0, ge=0, description="First span of the selection to show.")
    limit: int = Field(50, ge=1, le=500, description="Most spans to show.")
    max_field_chars: int = Field(300, ge=MIN_FIELD_CHARS, le=100_000, description="Cap per attribute value.")
    field_offset: int = Field(0, ge=0, description="Show each value from this character on (read a long one in parts).")


class SearchParams(ToolParams):
    pattern: str = Field(min_length=1, max_length=500, description="A Python regular expression.")
    agent: str | None = Field(None, max_length=128, description="Only this agent's turns.")
    turn_id: str | None = Field(None, max_length=200, description="Only this turn.")
    kinds: list[SpanKind] | None = Field(None, max_length=4, description="Only spans of these kinds.")
    limit: int = Field(20, ge=1, le=200, description="Most matching spans to show (all are counted).")


@dataclass
class _Data:
    """The filtered traces, built once per diagnosis: turns, their spans and (lazily) their full texts."""

    turns: dict[str, Turn]
    spans: dict[str, list[Span]]
    stats: dict[str, Any]
    texts: dict[str, list[SpanText]] = field(default_factory=dict)

    def span_texts(self, store: Store, turn_id: str) -> list[SpanText]:
        if turn_id not in self.texts:
            self.texts[turn_id] = span_texts(self.turns[turn_id], store)
        return self.texts[turn_id]


def _load(store: Store, flt: TraceFilter) -> _Data:
    """Every turn ``flt`` selects, leaving out diagnostic agents (this one's running turn and every
    earlier diagnosis included)."""
    skip = _diagnostic_agents(store)
    reader = TraceReader(store, flt)
    turns = {t[2]: reader.turn(*t) for t in reader.turn_starts() if t[1] not in skip}
    spans = {turn_id: turn_spans(t, project="diagnose", store=store) for turn_id, t in turns.items()}
    return _Data(turns, spans, trace_stats(store, flt, traces=spans.values()))


# --- results that fit, and refusals that lead somewhere ------------------------------------------


def _dump(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, indent=1, sort_keys=True)


def _call(tool: str, params: ToolParams, why: str) -> dict[str, Any]:
    """A next call as the model makes it: the tool and its JSON arguments (the caller's filters kept)."""
    return {"tool": tool, "arguments": params.model_dump(mode="json", exclude_defaults=True), "why": why}


def _largest(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``[lo, hi]`` for which ``fits(n)`` held when tried (a bisection); None if ``lo`` fails."""
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _refused(what: str, text: str, cap: int, size: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    return _dump({
        "refused": f"{what} is {len(text):,} characters, over the cap of {cap:,}",
        "size": {"characters": len(text), "cap": cap, **size},
        "next_calls": calls,
    })  # fmt: skip


# --- trace_query ---------------------------------------------------------------------------------


def _summary(turn_id: str, spans: list[Span]) -> dict[str, Any]:
    """One turn in a few fields, bounded whatever the turn holds (the page can always shrink to fit)."""
    root = spans[0]
    tools = Counter(str(s.attributes["tool.name"]) for s in spans if s.kind == "TOOL")
    errors = [f"{s.name}: {s.status_message[:120]}" for s in spans if s.status == "ERROR"]
    return {
        "turn_id": turn_id,
        "agent": str(root.attributes["inference.agent_name"])[:128],
        "started": format_us(root.start_ns // 1000),
        "duration_ms": round((root.end_ns - root.start_ns) / 1e6, 1),
        "outcome": root.attributes["holon.outcome"],
        "llm_calls": sum(1 for s in spans if s.kind == "LLM"),
        "tool_calls": sum(tools.values()),
        "tools": {name[:64]: n for name, n in tools.most_common(_LISTED_TOOLS)},
        "error_count": len(errors),
        "errors": errors[:_LISTED_ERRORS],
        "tokens": root.attributes["holon.turn.total_tokens"],
    }


def _selects(spans: list[Span], s: dict[str, Any], p: QueryParams) -> bool:
    if p.agent and s["agent"] != p.agent:
        return False
    if p.outcome and s["outcome"] != p.outcome:
        return False
    if p.tool and not any(x.kind == "TOOL" and x.attributes["tool.name"] == p.tool for x in spans):
        return False
    return p.has_error is None or bool(s["error_count"]) == p.has_error


def _query_rows(d: _Data, p: QueryParams) -> list[dict[str, Any]]:
    return [s for turn_id, spans in d.spans.items() if _selects(spans, s := _summary(turn_id, spans), p)]


def _query_page(rows: list[dict[str, Any]], p: QueryParams) -> dict[str, Any]:
    page = rows[p.offset : p.offset + p.limit]
    out: dict[str, Any] = {"matched": len(rows), "offset": p.offset, "turns": page}
    if p.offset + len(page) < len(rows):
        out["next_offset"] = p.offset + len(page)
    return out


def _query(d: _Data, p: QueryParams, cap: int) -> str:
    rows = _query_rows(d, p)
    payload = _query_page(rows, p)
    text = _dump(payload)
    if len(text) <= cap:
        return text
    page = len(payload["turns"])
    k = _largest(1, page - 1, lambda n: len(_dump(_query_page(rows, p.model_copy(update={"limit": n})))) <= cap) or 1
    calls = [_call("trace_query", p.model_copy(update={"limit": k}),
                   f"the first {k} of these turns; then offset {p.offset + k} for the next page")]  # fmt: skip
    return _refused("this page of turns", text, cap, {"matched": len(rows), "page": page}, calls)


# --- trace_turn ----------------------------------------------------------------------------------


def _clip(value: Any, cap: int, start: int = 0) -> Any:
    """``cap`` characters of a string from ``start``, marked with the range shown when that is not all of it."""
    if not isinstance(value, str) or (start == 0 and len(value) <= cap):
        return value
    end = min(len(value), start + cap)
    return value[start:end] + f"…[characters {min(start, end):,}-{end:,} of {len(value):,}]"


def _span_view(s: Span, p: TurnParams) -> dict[str, Any]:
    cap = p.max_field_chars
    view: dict[str, Any] = {
        "span_id": s.span_id, "parent": s.parent_span_id, "kind": s.kind, "name": s.name, "status": s.status,
        "status_message": _clip(s.status_message, cap), "duration_ms": round((s.end_ns - s.start_ns) / 1e6, 1),
    }  # fmt: skip
    if p.attributes != []:
        keys = [k for k in sorted(s.attributes) if k not in _HIDDEN and (p.attributes is None or k in p.attributes)]
        # Ids are never cut: the model passes them back.
        view["attributes"] = {k: s.attributes[k] if k.endswith("_id") else _clip(s.attributes[k], cap, p.field_offset)
                              for k in keys}  # fmt: skip
    return view


def _selected(spans: list[Span], p: TurnParams) -> list[Span]:
    ids = set(p.span_ids) if p.span_ids is not None else None
    return [s for s in spans if (ids is None or s.span_id in ids) and (p.kinds is None or s.kind in p.kinds)]


def _turn_payload(spans: list[Span], p: TurnParams) -> dict[str, Any]:
    selected = _selected(spans, p)
    page = selected[p.offset : p.offset + p.limit]
    out: dict[str, Any] = {
        "turn_id": p.turn_id, "agent": spans[0].attributes["inference.agent_name"], "spans_in_turn": len(spans),
        "selected": len(selected), "offset": p.offset, "spans": [_span_view(s, p) for s in page],
    }  # fmt: skip
    if p.offset + len(page) < len(selected):
        out["next_offset"] = p.offset + len(page)
    unknown = sorted(set(p.span_ids or ()) - {s.span_id for s in spans})
    if unknown:
        out["unknown_span_ids"] = unknown[:20]
    return out


def _turn_calls(spans: list[Span], p: TurnParams, cap: int) -> list[dict[str, Any]]:
    """Calls for the same selection that fit ``cap``: fewer spans, smaller fields, or a bare span list."""
    fits = lambda q: len(_dump(_turn_payload(spans, q))) <= cap  # noqa: E731
    page = len(_selected(spans, p)[p.offset : p.offset + p.limit])
    calls = []
    k = _largest(1, page - 1, lambda n: fits(p.model_copy(update={"limit": n})))
    if k is not None:
        calls.append(_call("trace_turn", p.model_copy(update={"limit": k}),
                           f"the first {k} spans of this selection; then offset {p.offset + k}"))  # fmt: skip
    c = _largest(MIN_FIELD_CHARS, p.max_field_chars - 1, lambda n: fits(p.model_copy(update={"max_field_chars": n})))
    if c is not None:
        calls.append(_call("trace_turn", p.model_copy(update={"max_field_chars": c}),
                           f"the same spans with each field capped at {c} characters"))  # fmt: skip
    if p.attributes != []:
        bare = p.model_copy(update={"attributes": [], "max_field_chars": MIN_FIELD_CHARS})
        k = _largest(1, page, lambda n: fits(bare.model_copy(update={"limit": n})))
        if k is not None:
            calls.append(_call("trace_turn", bare.model_copy(update={"limit": k}),
                               "the spans without attributes, to pick span_ids or kinds to read in full"))  # fmt: skip
    if not calls:  # one bare span with a 20-character status always fits; offered only when checked
        last = p.model_copy(update={"attributes": [], "max_field_chars": MIN_FIELD_CHARS, "limit": 1})
        if fits(last):
            calls.append(_call("trace_turn", last, "one span at a time, without attributes"))
    return calls


def _turn(spans: list[Span], p: TurnParams, cap: int) -> str:
    payload = _turn_payload(spans, p)
    text = _dump(payload)
    if len(text) <= cap:
        return text
    views = [(s, len(_dump(_span_view(s, p)))) for s in _selected(spans, p)[p.offset : p.offset + p.limit]]
    size = {
        "selected": payload["selected"], "page": len(views),
        "by_kind": dict(Counter(s.kind for s in _selected(spans, p))),
        "largest_spans": [{"span_id": s.span_id, "kind": s.kind, "name": s.name, "characters": n}
                          for s, n in sorted(views, key=lambda v: -v[1])[:5]],
    }  # fmt: skip
    what = f"turn {p.turn_id} ({len(views)} spans at max_field_chars={p.max_field_chars})"
    return _refused(what, text, cap, size, _turn_calls(spans, p, cap))


# --- trace_search --------------------------------------------------------------------------------


def _snippet(text: str, start: int, end: int) -> str:
    end = min(end, start + 200)
    a, b = max(0, start - 80), min(len(text), end + 80)
    return ("…" if a else "") + text[a:b] + ("…" if b < len(text) else "")


def _scope(d: _Data, store: Store, p: SearchParams) -> list[SpanText]:
    if p.turn_id is not None and p.turn_id not in d.turns:
        raise ToolRetry(f"no turn {p.turn_id!r} in these traces; trace_query lists turn ids")
    if p.agent is not None and all(t.agent_name != p.agent for t in d.turns.values()):
        raise ToolRetry(f"no turns of agent {p.agent!r} in these traces; trace_overview lists the agents")
    turn_ids = [t for t, turn in d.turns.items()
                if (p.turn_id is None or t == p.turn_id) and (p.agent is None or turn.agent_name == p.agent)]  # fmt: skip
    return [s for t in turn_ids for s in d.span_texts(store, t) if p.kinds is None or s.kind in p.kinds]


def _too_large(d: _Data, texts: list[SpanText], p: SearchParams, limits: Limits) -> str:
    """A refusal naming narrower scopes that are under the limit (or, at worst, a turn's span list)."""
    total = sum(t.size for t in texts)
    by_agent: Counter[str] = Counter()
    by_turn: Counter[str] = Counter()
    for t in texts:
        by_agent[t.agent] += t.size
        by_turn[t.turn_id] += t.size
    calls = [_call("trace_search", p.model_copy(update={"agent": a}), f"{n:,} characters")
             for a, n in by_agent.most_common() if n <= limits.search_chars][:3]  # fmt: skip
    if not calls:
        calls = [_call("trace_search", p.model_copy(update={"turn_id": t}), f"{n:,} characters")
                 for t, n in by_turn.most_common() if n <= limits.search_chars][:3]  # fmt: skip
    if not calls:
        turn_id = by_turn.most_common(1)[0][0]
        calls = _turn_calls(d.spans[turn_id], TurnParams(turn_id=turn_id, attributes=[]), limits.result_chars)
    return _dump({
        "refused": f"searching {total:,} characters is over the limit of {limits.search_chars:,}",
        "size": {"characters": total, "limit": limits.search_chars, "by_agent": dict(by_agent.most_common(10))},
        "next_calls": calls,
    })  # fmt: skip


async def _search(d: _Data, store: Store, p: SearchParams, limits: Limits) -> str:
    try:
        re.compile(p.pattern)
    except re.error as e:
        raise ToolRetry(f"not a valid regular expression: {e}") from e
    texts = _scope(d, store, p)
    if sum(t.size for t in texts) > limits.search_chars:
        return _too_large(d, texts, p, limits)
    flat = [(t, name, value) for t in texts for name, value in t.fields.items() if value]
    try:
        found = await count_matches(p.pattern, [v for _, _, v in flat], timeout_s=limits.search_timeout_s)
    except SearchTimeout as e:
        raise ToolRetry(f"{e}: nested quantifiers such as (a+)+ backtrack catastrophically; simplify the "
                        "pattern or narrow it with agent, turn_id or kinds") from e  # fmt: skip
    per_span: dict[str, dict[str, Any]] = {}
    for (t, name, value), m in zip(flat, found, strict=True):
        if not m.count:
            continue
        hit = per_span.setdefault(t.span_id, {"turn_id": t.turn_id, "span_id": t.span_id, "kind": t.kind,
                                              "name": t.name, "matches": 0})  # fmt: skip
        hit["matches"] += m.count
        if "snippet" not in hit and m.first is not None:
            hit["field"], hit["snippet"] = name, _snippet(value, *m.first)
    hits = list(per_span.values())
    payload = {
        "pattern": p.pattern, "scope": p.model_dump(mode="json", include={"agent", "turn_id", "kinds"}, exclude_none=True),
        "searched": {"spans": len(texts), "characters": sum(t.size for t in texts)},
        "matching_spans": len(hits), "matches": sum(h["matches"] for h in hits), "shown": hits[: p.limit],
    }  # fmt: skip
    text = _dump(payload)
    cap = limits.result_chars
    if len(text) <= cap:
        return text
    shown = payload["shown"]
    k = _largest(1, len(shown) - 1, lambda n: len(_dump({**payload, "shown": shown[:n]})) <= cap) or 1
    calls = [_call("trace_search", p.model_copy(update={"limit": k}), f"the same counts with the first {k} hits")]
    return _refused("these search hits", text, cap, {"matching_spans": len(hits), "shown": len(shown)}, calls)


# --- the tools -----------------------------------------------------------------------------------


def _overview(d: _Data, cap: int) -> str:
    turns = list(d.spans.items())
    failed = [t for t, s in turns if any(x.status == "ERROR" for x in s)]
    agents = sorted(d.stats["agents"].items(), key=lambda kv: -kv[1]["turns"])
    payload = {
        "turns": len(turns),
        "agents_total": len(agents),
        "agents": {
            n: {k: a[k] for k in ("turns", "outcomes", "tool_errors", "model_latency_ms")} for n, a in agents[:20]
        },
        "error_taxonomy": [{k: e[k] for k in ("source", "error", "count")} for e in d.stats["errors"][:15]],
        "sample_failed_turns": failed[-5:],
        "sample_recent_turns": [t for t, _s in turns[-5:]],
    }
    text = _dump(payload)
    if len(text) <= cap:
        return text
    q = QueryParams(has_error=True)
    rows = _query_rows(d, q)
    k = _largest(1, q.limit, lambda n: len(_dump(_query_page(rows, q.model_copy(update={"limit": n})))) <= cap) or 1
    calls = [_call("trace_query", q.model_copy(update={"limit": k}), "the failed turns, a page at a time")]
    return _refused("the overview", text, cap, {"agents": len(agents)}, calls)


def trace_tools(store: Store, flt: TraceFilter, *, limits: Limits | None = None) -> list[Tool]:
    """The diagnostic tools over the traces ``flt`` selects (read once, on first use)."""
    lim = limits or Limits()
    cache: list[_Data] = []

    def data() -> _Data:
        if not cache:
            cache.append(_load(store, flt))
        return cache[0]

    async def overview(ctx: ToolContext, p: OverviewParams) -> str:
        return _overview(data(), lim.result_chars)

    async def query(ctx: ToolContext, p: QueryParams) -> str:
        return _query(data(), p, lim.result_chars)

    async def turn(ctx: ToolContext, p: TurnParams) -> str:
        spans = data().spans.get(p.turn_id)
        if spans is None:
            raise ToolRetry(f"no turn {p.turn_id!r} in these traces; trace_query lists turn ids")
        return _turn(spans, p, lim.result_chars)

    async def search(ctx: ToolContext, p: SearchParams) -> str:
        return await _search(data(), store, p, lim)

    refusal = " A refused call lists next_calls to make as they are."
    return [
        Tool("trace_overview", "Start here: turns per agent, outcomes, error taxonomy, sample turn ids.", OverviewParams, overview),
        Tool("trace_query", 'Turns matching filters, a page at a time. Example: {"has_error": true, "limit": 10}.' + refusal, QueryParams, query),
        Tool("trace_turn", "One turn's spans, selected by span_ids or kinds and paged by offset/limit, each field capped "
             "(read a long value in parts with field_offset). "
             'Example: {"turn_id": "turn_...", "kinds": ["TOOL"], "max_field_chars": 300}.' + refusal, TurnParams, turn),
        Tool("trace_search", "Regex over the full span texts (input, output, error) with exact counts, optionally within "
             'an agent, a turn or span kinds. Example: {"pattern": "Permission denied", "kinds": ["TOOL"]}.' + refusal,
             SearchParams, search),
    ]  # fmt: skip


# --- the diagnostic turn -------------------------------------------------------------------------


def _agent(store: Store, model: dict[str, Any]) -> str:
    """A diagnostic agent with nothing in its context: every run gets a new one.

    An agent's context holds its earlier turns, episodes and memory, so a reused agent would read
    its own earlier questions and reports (and be swayed by them). The previous ``diagnose`` agent
    is retired instead (``agent.deleted``: its events, reports included, stay in the ledger, its
    reports in ``<home>/diagnose/``; its home folder goes) and a new one takes the name and the
    settings, so a ``--model`` given once still holds. An agent named ``diagnose`` that is not
    holon's diagnostic agent is never touched."""
    settings: dict[str, Any] = {"diagnostic": True}
    try:
        old = store.agent(AGENT_NAME)
    except NotFoundError:
        old = None
    if old is not None:
        if not read_settings(old.settings).settings.diagnostic:
            raise ConflictError(
                f"agent {AGENT_NAME!r} is one of your agents, not holon's diagnostic agent; "
                "rename or delete it to use holon diagnose"
            )
        settings = {**read_settings(old.settings).settings.as_dict(), **settings}
        store.append(NewEvent(old.agent_id, ev.AgentDeleted(reason=_RETIRED), origin="operator:diagnose",
                              authority="operator"))  # fmt: skip
        home = Path(old.home).resolve()
        if home.is_relative_to(store.paths.agents.resolve()) and home != store.paths.agents.resolve():
            shutil.rmtree(home, ignore_errors=True)
    return create_agent(
        store, AGENT_NAME, settings={**settings, **model}, origin="operator:diagnose", internal=True
    ).agent_id


_RETIRED = "retired: each holon diagnose run starts from a clean context (its reports stay in the ledger)"


def _diagnostic_agents(store: Store) -> set[str]:
    """Every diagnostic agent's id, retired ones included: their turns are diagnoses, not traces to study."""
    created = {e.agent_id for e in store.ledger.find(EventQuery(types=("agent.created",)))
               if isinstance(e.payload, ev.AgentCreated) and read_settings(e.payload.settings).settings.diagnostic}  # fmt: skip
    return created | {a.agent_id for a in store.agents() if read_settings(a.settings).settings.diagnostic}


def model_failed(store: Store, result: TurnResult) -> bool:
    """Whether the turn failed because a model call failed (the CLI's exit code 6, not 1)."""
    if result.outcome not in ("failed", "interrupted"):
        return False
    agent_id = store.agent(AGENT_NAME).agent_id
    last = store.ledger.recent(agent_id, ("model.responded",), limit=1)
    return bool(last) and last[0].turn_id == result.turn_id and isinstance(last[0].payload, ev.ModelResponded) \
        and last[0].payload.error is not None  # fmt: skip


def diagnose(
    store: Store, question: str, *, flt: TraceFilter, resolver: Callable[[Any], tuple[Provider, ModelSettings]],
    model: dict[str, Any] | None = None, limits: Limits | None = None,
) -> tuple[TurnResult, Path]:  # fmt: skip
    """Run one diagnostic turn over ``question``; returns its result and the saved report."""
    if not question.strip():
        raise UsageError('ask a question, e.g. holon diagnose "why do alice\'s turns fail?"')
    agent_id = _agent(store, model or {})
    scope = []
    if flt.agent_id:
        scope.append(f"agent {store.agent(flt.agent_id).name}")
    if flt.since_us:
        scope.append(f"since {format_us(flt.since_us)}")
    if flt.until_us:
        scope.append(f"until {format_us(flt.until_us)}")
    text = f"{INSTRUCTIONS}\n\nTraces: {', '.join(scope) or 'every agent, all time'}.\nQuestion: {question}"
    store.append(NewEvent(agent_id, ev.MessageReceived(text=text, sender="operator", channel="diagnose"),
                          origin="operator:diagnose", authority="operator"))  # fmt: skip
    clock = SystemClock()
    runner = TurnRunner(
        store, ToolRegistry(trace_tools(store, flt, limits=limits)), resolver, clock=clock,
        services=TaskServices(TaskManager.for_store(store, clock)),
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
