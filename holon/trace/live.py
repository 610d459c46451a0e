"""Live export: each settled turn's spans pushed to an OTLP/HTTP endpoint (``[trace] otlp_endpoint``).

The one module that imports the OpenTelemetry SDK. The spans are the same as ``holon trace
export`` writes (same ids, so a later file export of the same turns is the same trace), plus
``gen_ai.*`` semantic-convention attributes for collectors that read those. Export never blocks or
fails a turn: spans go into a ``BatchSpanProcessor`` queue and leave from its own thread; a dead
endpoint costs a logged warning (the SDK's, and ours if building the spans fails).
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from holon import __version__
from holon.config import TraceSettings
from holon.logs import get_logger
from holon.projections import Store
from holon.trace.formats import SCOPE
from holon.trace.spans import Span, TraceReader, turn_spans

__all__ = ["LiveExporter", "gen_ai_attributes", "headers_from_env"]

log = get_logger("holon.trace")

_STATUS = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR, "UNSET": StatusCode.UNSET}
_OPERATION = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent", "CHAIN": "assemble_context"}


def headers_from_env(name: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` from the variable ``name`` (secrets stay in the environment, never in config)."""
    raw = os.environ.get(name, "") if name else ""
    out = {}
    for part in raw.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def gen_ai_attributes(span: Span) -> dict[str, Any]:
    a = span.attributes
    out: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATION[span.kind],
        "gen_ai.agent.name": a.get("inference.agent_name", ""),
        "gen_ai.agent.id": a.get("inference.agent_id", ""),
        "gen_ai.conversation.id": a.get("session.id", ""),
    }
    if span.kind == "LLM":
        out.update({
            "gen_ai.system": "litellm",
            "gen_ai.request.model": a.get("llm.model_name", ""),
            "gen_ai.response.model": a.get("llm.model_name", ""),
            "gen_ai.usage.input_tokens": a.get("llm.token_count.prompt", 0),
            "gen_ai.usage.output_tokens": a.get("llm.token_count.completion", 0),
        })  # fmt: skip
    if span.kind == "TOOL":
        out["gen_ai.tool.name"] = a.get("tool.name", "")
    return out


class LiveExporter:
    def __init__(self, store: Store, settings: TraceSettings, *, schedule_delay_ms: float = 500) -> None:
        self.store = store
        self.settings = settings
        self.resource = Resource.create({"service.name": settings.service_name, "service.version": __version__})
        self.scope = InstrumentationScope(SCOPE, __version__)
        exporter = OTLPSpanExporter(
            endpoint=settings.otlp_endpoint,
            headers=headers_from_env(settings.otlp_headers_env),
            timeout=settings.timeout_s,
        )
        self.processor = BatchSpanProcessor(exporter, schedule_delay_millis=schedule_delay_ms)

    def _readable(self, s: Span) -> ReadableSpan:
        ctx = SpanContext(int(s.trace_id, 16), int(s.span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
        parent = (
            SpanContext(int(s.trace_id, 16), int(s.parent_span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
            if s.parent_span_id else None
        )  # fmt: skip
        return ReadableSpan(
            s.name, context=ctx, parent=parent, resource=self.resource,
            attributes={**s.attributes, **gen_ai_attributes(s)},
            kind=SpanKind.CLIENT if s.kind == "LLM" else SpanKind.INTERNAL,
            status=Status(_STATUS[s.status], s.status_message or None) if s.status == "ERROR" else Status(_STATUS[s.status]),
            start_time=s.start_ns, end_time=s.end_ns, instrumentation_scope=self.scope,
        )  # fmt: skip

    def turn_settled(self, agent_id: str, turn_id: str) -> int:
        """Queue the spans of a settled turn; returns how many (0 when anything went wrong)."""
        try:
            reader = TraceReader(self.store)
            rows = self.store.ledger.query(
                "SELECT seq FROM events WHERE agent_id = ? AND type = 'turn.started' AND turn_id = ? LIMIT 1",
                (agent_id, turn_id),
            )
            if not rows:
                return 0
            turn = reader.turn(int(rows[0][0]), agent_id, turn_id)
            spans = turn_spans(turn, project=self.settings.project, store=self.store)
            for s in spans:
                self.processor.on_end(self._readable(s))
            return len(spans)
        except Exception as e:  # export must never fail a turn
            log.warning("trace.live_export_failed", agent_id=agent_id, turn_id=turn_id, error=str(e))
            return 0

    def flush(self, timeout_s: float = 5.0) -> bool:
        return bool(self.processor.force_flush(int(timeout_s * 1000)))

    def close(self) -> None:
        self.processor.shutdown()
