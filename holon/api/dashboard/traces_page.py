"""Page 6, traces: per agent and UTC day, turns, outcomes, model latency percentiles, tokens and
cost (as bars), the same over the days before it (``span``, 1-31 days ending on the day shown: one
bar per day), the slowest tools, the error taxonomy, a turn's spans, and exports.

Everything is ``holon.trace``'s, as ``holon trace stats`` and ``holon trace export`` compute it:
``trace_stats`` over a ``TraceFilter`` of the agent and the day, ``daily_stats`` over the span of
days, ``turn_spans`` for one turn, and
``write_traces`` for the HALO JSONL and OTLP JSON downloads. One day at a time keeps the read
bounded (it runs on the daemon's loop, like the other pages' reads); the span of days is at most 31.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from holon.api.dashboard.pages import page
from holon.api.dashboard.security import PageSession
from holon.api.port import DaemonPort
from holon.clock import SystemClock
from holon.errors import NotFoundError, UsageError
from holon.ledger import EventQuery
from holon.trace.export import DAY_US, daily_stats, trace_stats, write_traces
from holon.trace.spans import TraceFilter, TraceReader, turn_spans

__all__ = ["Bar", "bars", "traces_router"]

BAR_WIDTH = 600
DayQ = Annotated[str | None, Query(max_length=10, description="A UTC day, YYYY-MM-DD (default: today).")]
AgentQ = Annotated[str | None, Query(max_length=128)]
SpanQ = Annotated[int, Query(ge=1, le=31, description="How many days, ending on `day`, the daily charts cover.")]


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    width: float
    text: str


def bars(values: dict[str, float], fmt: str = "{:,.0f}") -> list[Bar]:
    """One horizontal bar per label, the largest ``BAR_WIDTH`` wide (an inline SVG's rects)."""
    top = max(values.values(), default=0) or 1
    return [Bar(k, v, round(BAR_WIDTH * v / top, 2), fmt.format(v)) for k, v in values.items()]


def _day(port: DaemonPort, value: str | None) -> date:
    if value:
        try:
            return date.fromisoformat(value)
        except ValueError as e:
            raise UsageError(f"day must be YYYY-MM-DD, got {value[:10]!r}") from e
    clock = getattr(port, "clock", None) or SystemClock()  # the daemon's (injected in tests)
    return datetime.fromtimestamp(clock.now_us() / 1e6, UTC).date()


def _filter(port: DaemonPort, agent: str | None, day: date) -> TraceFilter:
    start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * 1_000_000
    agent_id = port.store.agent(agent).agent_id if agent else None
    return TraceFilter(agent_id, start, start + DAY_US)


def _turn_agents(port: DaemonPort, turn_ids: list[str]) -> dict[str, str]:
    """The name of the agent each turn belongs to (the slowest tools and the errors link to their
    turns' spans)."""
    if not turn_ids:
        return {}
    names = {a.agent_id: a.name for a in port.store.agents()}
    keys = port.store.ledger.find_keys(EventQuery(types=("turn.started",), turn_ids=list(dict.fromkeys(turn_ids))))
    return {str(k.turn_id): names.get(k.agent_id, k.agent_id) for k in keys}


def traces_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    store = port.store

    @r.get("/traces")
    async def traces_page(
        request: Request, session: PageSession, agent: AgentQ = None, day: DayQ = None, span: SpanQ = 7
    ) -> Response:
        """The day's statistics, for one agent or all, and the days before it as daily bars."""
        d = _day(port, day)
        flt = _filter(port, agent or None, d)
        stats = trace_stats(store, flt)
        assert flt.since_us is not None and flt.until_us is not None
        series = daily_stats(store, TraceFilter(flt.agent_id, flt.until_us - span * DAY_US, flt.until_us))
        label = {x["since_us"]: datetime.fromtimestamp(x["since_us"] / 1e6, UTC).date().isoformat() for x in series}
        daily = {
            "turns": bars({label[x["since_us"]]: x["turns"] for x in series}),
            "tokens": bars({label[x["since_us"]]: x["tokens"] for x in series}),
            "cost": bars({label[x["since_us"]]: x["cost_usd"] for x in series}, "${:,.4f}"),
            "latency p50 (ms)": bars({label[x["since_us"]]: x["model_latency_ms"]["p50"] for x in series}, "{:,.1f}"),
            "latency p95 (ms)": bars({label[x["since_us"]]: x["model_latency_ms"]["p95"] for x in series}, "{:,.1f}"),
        }
        per = stats["agents"]
        charts = {
            "turns": bars({n: a["turns"] for n, a in per.items()}),
            "tokens": bars({n: a["tokens_per_turn"]["total"] for n, a in per.items()}),
            "cost": bars({n: a["cost_usd"] for n, a in per.items()}, "${:,.4f}"),
        }
        return page(
            request, session, "traces.html", page="traces", stats=stats, charts=charts, day=d.isoformat(),
            daily=daily, span=span,
            agent=agent or "", agents=sorted(a.name for a in store.agents()), bar_width=BAR_WIDTH,
            owners=_turn_agents(
                port, [t["turn_id"] for t in stats["slowest_tools"]] + [t for e in stats["errors"] for t in e["turns"]]
            ),
        )  # fmt: skip

    @r.get("/agents/{agent}/turns/{turn_id}/spans")
    async def spans_page(request: Request, agent: str, turn_id: str, session: PageSession) -> Response:
        """One turn as spans (the AGENT root, its LLM, TOOL and CHAIN children), as exported."""
        try:
            a = store.agent(agent)
            keys = store.ledger.find_keys(
                EventQuery(types=("turn.started",), agent_id=a.agent_id, turn_id=turn_id[:128], limit=1)
            )
            if not keys:
                raise NotFoundError(f"no turn {turn_id[:128]!r} of agent {a.name}")
        except NotFoundError as e:
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        turn = TraceReader(store, TraceFilter(a.agent_id)).turn(keys[0].seq, a.agent_id, turn_id)
        spans = turn_spans(turn, project="holon", store=store)
        start = min(s.start_ns for s in spans)
        total = max(max(s.end_ns for s in spans) - start, 1)
        rows = [
            {"span": s, "x": round(BAR_WIDTH * (s.start_ns - start) / total, 2),
             "width": max(round(BAR_WIDTH * (s.end_ns - s.start_ns) / total, 2), 1.0),
             "ms": round((s.end_ns - s.start_ns) / 1e6, 1)}
            for s in spans
        ]  # fmt: skip
        return page(request, session, "spans.html", page="traces", agent=a, turn_id=turn_id, rows=rows,
                    bar_width=BAR_WIDTH)  # fmt: skip

    @r.get("/ui/traces/export")
    async def export(
        session: PageSession,
        format: Annotated[Literal["halo-jsonl", "otlp-json"], Query()] = "halo-jsonl",
        agent: AgentQ = None,
        day: DayQ = None,
    ) -> Response:
        """The day's traces as a download, exactly as ``holon trace export --format F`` writes them."""
        d = _day(port, day)
        out = io.StringIO()
        write_traces(store, out, fmt=format, flt=_filter(port, agent or None, d))
        name = f"holon-traces-{agent or 'all'}-{d.isoformat()}.{'jsonl' if format == 'halo-jsonl' else 'json'}"
        headers = {"Content-Disposition": f'attachment; filename="{name}"'}
        return Response(out.getvalue(), media_type="application/x-ndjson", headers=headers)

    return r
