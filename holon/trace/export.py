"""``holon trace export`` and ``holon trace stats``: the ledger read as a trace store (RFC 0007)."""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, TextIO

from holon.projections import Store
from holon.trace.formats import halo_jsonl, otlp_request
from holon.trace.spans import Span, TraceFilter, TraceReader, spans_of

__all__ = ["DAY_US", "Format", "daily_stats", "error_key", "export_traces", "trace_stats", "write_traces"]

Format = Literal["halo-jsonl", "otlp-json"]
Progress = Callable[[int, "int | None"], None]
"""``(done, total)`` after each unit of work; ``total`` is ``None`` when not known ahead."""


def export_traces(
    store: Store, out: Path, *, fmt: Format, flt: TraceFilter | None = None, by: str = "turn",
    project: str = "holon", service: str = "holon", progress: Progress | None = None,
) -> dict[str, int]:  # fmt: skip
    """Write every trace of ``flt`` to ``out`` (atomically); returns counts of traces and spans.

    On any failure (a span that would break HALO's index, a full disk) the temporary file is
    removed and ``out`` is left as it was.
    """
    tmp = out.with_name(out.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            counts = write_traces(store, fh, fmt=fmt, flt=flt, by=by, project=project, service=service,
                                  progress=progress)  # fmt: skip
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return counts


def write_traces(
    store: Store, fh: TextIO, *, fmt: Format, flt: TraceFilter | None = None, by: str = "turn",
    project: str = "holon", service: str = "holon", progress: Progress | None = None,
) -> dict[str, int]:  # fmt: skip
    """Write every trace of ``flt`` to the open text stream ``fh`` (``--out -``: stdout), one line at a
    time as it is read; returns counts of traces and spans. Not atomic: a failure leaves what was written.

    ``progress(done, total)`` is called after each trace (``total``: the turns selected, or
    ``None`` per episode, where the count is not known ahead)."""
    reader = TraceReader(store, flt)
    total = len(reader.turn_starts()) if progress is not None and by == "turn" else None
    traces = spans_n = 0
    for spans in spans_of(reader, project=project, by=by):
        traces += 1
        spans_n += len(spans)
        if progress is not None:
            progress(traces, total)
        if fmt == "halo-jsonl":
            fh.writelines(line + "\n" for line in halo_jsonl(spans, service=service))
        else:
            fh.write(json.dumps(otlp_request(spans, service=service), sort_keys=True, separators=(",", ":")) + "\n")
    return {"traces": traces, "spans": spans_n}


# Quotes count only when they are not an apostrophe inside a word ("agent's" stays as it is).
_NOISE = re.compile(r"0x[0-9a-f]+|\d+(?:\.\d+)?|(?<!\w)'[^']*'(?!\w)|\"[^\"]*\"|(?:/[\w.\-]+)+", re.I)


def error_key(message: str) -> str:
    """An error message with numbers, quotes and paths folded, for grouping."""
    first = next((ln for ln in message.splitlines() if ln.strip()), "")
    return " ".join(_NOISE.sub("_", first).split())[:160]


def _pct(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


DAY_US = 86_400 * 1_000_000


def daily_stats(store: Store, flt: TraceFilter, *, traces: Iterable[list[Span]] | None = None) -> list[dict[str, Any]]:
    """Per UTC day of ``flt``'s window (``since_us`` and ``until_us`` required, day-aligned), oldest
    first: turns, total tokens, cost and model latency p50/p95 over every model call of the day, in
    one read of the window (a turn counts on the day it started). Days without turns are listed."""
    if flt.since_us is None or flt.until_us is None:
        raise ValueError("daily_stats needs a window: since_us and until_us")
    n = max((flt.until_us - flt.since_us + DAY_US - 1) // DAY_US, 0)
    days: list[dict[str, Any]] = [{"turns": 0, "tokens": 0, "cost_usd": 0.0, "latency": []} for _ in range(n)]
    for spans in traces if traces is not None else spans_of(TraceReader(store, flt), project="stats"):
        root = spans[0]
        i = (root.start_ns // 1000 - flt.since_us) // DAY_US
        if not 0 <= i < n:
            continue
        d = days[i]
        d["turns"] += 1
        d["tokens"] += int(root.attributes["holon.turn.total_tokens"])
        for s in spans[1:]:
            if s.kind == "LLM" and not s.attributes.get("holon.unfinished"):
                d["latency"].append((s.end_ns - s.start_ns) / 1e6)
                d["cost_usd"] += float(s.attributes.get("llm.cost_usd", 0.0))
    return [
        {"since_us": flt.since_us + i * DAY_US, "turns": d["turns"], "tokens": d["tokens"],
         "cost_usd": round(d["cost_usd"], 6), "model_calls": len(d["latency"]),
         "model_latency_ms": {"p50": _pct(d["latency"], 50), "p95": _pct(d["latency"], 95)}}
        for i, d in enumerate(days)
    ]  # fmt: skip


def trace_stats(
    store: Store, flt: TraceFilter | None = None, *, top: int = 10, traces: Iterable[list[Span]] | None = None
) -> dict[str, Any]:
    """Per agent: turns, outcomes, model latency and tokens (p50/p95), cost; slowest tools; error taxonomy;
    and cold starts (``model_start``: calls that waited for their model to start, and how long),
    which are never counted as model latency.

    ``traces``: the turn traces to fold, when the caller already built them (``holon diagnose``,
    which leaves its own turns out); by default every turn ``flt`` selects.
    """
    per: dict[str, dict[str, Any]] = {}
    tools: list[tuple[float, str, str, str]] = []
    errors: Counter[tuple[str, str]] = Counter()
    samples: dict[tuple[str, str], str] = {}
    where: dict[tuple[str, str], list[str]] = {}
    starts: list[float] = []
    for spans in traces if traces is not None else spans_of(TraceReader(store, flt), project="stats"):
        root = spans[0]
        name = str(root.attributes["inference.agent_name"])
        a = per.setdefault(name, {"agent_id": root.attributes["inference.agent_id"], "turns": 0, "outcomes": Counter(),
                                  "latency": [], "tokens": [], "cost_usd": 0.0, "tool_calls": 0, "tool_errors": 0})  # fmt: skip
        a["turns"] += 1
        a["outcomes"][root.attributes["holon.outcome"]] += 1
        a["tokens"].append(int(root.attributes["holon.turn.total_tokens"]))
        turn_id = str(root.attributes["holon.turn_id"])
        for s in spans[1:]:
            if s.kind == "LLM" and not s.attributes.get("holon.unfinished"):
                a["latency"].append((s.end_ns - s.start_ns) / 1e6)
                a["cost_usd"] += float(s.attributes.get("llm.cost_usd", 0.0))
                if s.status == "ERROR":
                    _count(errors, samples, where, turn_id, "model", s.status_message)
            elif s.name == "model.start":
                starts.append(float(s.attributes.get("holon.model_start.duration_ms", 0.0)))
            elif s.kind == "TOOL":
                a["tool_calls"] += 1
                dur = float(s.attributes.get("holon.tool.duration_ms", (s.end_ns - s.start_ns) / 1e6))
                tools.append((dur, str(s.attributes["tool.name"]), root.attributes["holon.turn_id"], s.span_id))
                if s.status == "ERROR":
                    a["tool_errors"] += 1
                    _count(errors, samples, where, turn_id, str(s.attributes["tool.name"]),
                           str(s.attributes.get("output.value", "")))  # fmt: skip
        if root.status == "ERROR":
            _count(errors, samples, where, turn_id, "turn", root.status_message)
    agents = {
        name: {
            "agent_id": a["agent_id"], "turns": a["turns"], "outcomes": dict(sorted(a["outcomes"].items())),
            "model_calls": len(a["latency"]),
            "model_latency_ms": {"p50": _pct(a["latency"], 50), "p95": _pct(a["latency"], 95)},
            "tokens_per_turn": {"p50": _pct(a["tokens"], 50), "p95": _pct(a["tokens"], 95), "total": sum(a["tokens"])},
            "cost_usd": round(a["cost_usd"], 6), "tool_calls": a["tool_calls"], "tool_errors": a["tool_errors"],
        }
        for name, a in sorted(per.items())
    }  # fmt: skip
    tools.sort(key=lambda t: (-t[0], t[3]))
    return {
        "agents": agents,
        "turns": sum(a["turns"] for a in agents.values()),
        "model_start": {"n": len(starts), "p50_ms": _pct(starts, 50), "p95_ms": _pct(starts, 95)},
        "slowest_tools": [{"tool": t, "duration_ms": round(d, 3), "turn_id": turn, "span_id": sid} for d, t, turn, sid in tools[:top]],
        "errors": [
            {"source": src, "error": key, "count": n, "example": samples[(src, key)], "turns": where[(src, key)]}
            for (src, key), n in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    }  # fmt: skip


ERROR_TURNS = 5
"""Turns named per error kind (``turns``: the first ones it happened in, for links to their spans)."""


def _count(
    errors: Counter[tuple[str, str]], samples: dict[tuple[str, str], str], where: dict[tuple[str, str], list[str]],
    turn_id: str, source: str, message: str,
) -> None:  # fmt: skip
    key = (source, error_key(message) or "(no message)")
    errors[key] += 1
    samples.setdefault(key, message[:300])
    turns = where.setdefault(key, [])
    if turn_id not in turns and len(turns) < ERROR_TURNS:
        turns.append(turn_id)
