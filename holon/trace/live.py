"""Live export: each settled turn's spans pushed to an OTLP/HTTP endpoint (``[trace] otlp_endpoint``).

The one module that imports the OpenTelemetry SDK. The spans are the same as ``holon trace
export`` writes (same ids, so a later file export of the same turns is the same trace), plus
``gen_ai.*`` semantic-convention attributes and OpenInference's flattened message keys for
collectors that read those.

``[trace] otlp_protocol`` picks the wire format: ``http/json`` (the default; the body
``formats.otlp_request`` builds, ``Content-Type: application/json``, which HALO's desktop app
reads) or ``http/protobuf`` (the SDK's own OTLP exporter). Either way the exporter runs inside a
``BatchSpanProcessor``.

Export never blocks or fails a turn: ``turn_settled`` only queues the turn's ids; a worker thread
reads the ledger and builds the spans (off the event loop), the processor's own thread sends them.
A dead endpoint costs a logged warning (``trace.live_export_failed``, once per outage; recovery is
logged too), and stopping is bounded by ``close(timeout_s)``.

Turns settled outside the daemon's own path are pushed too, by ledger position
(``settled_since``): those crash recovery settles ``interrupted`` when the daemon starts, and
``holon run``'s in-process turns (``push_settled_since``, with a bounded wait before the CLI
exits). Ids are deterministic, so a turn sent twice is the same spans again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from holon import __version__
from holon.config import TraceSettings
from holon.ledger import EventQuery
from holon.logs import get_logger
from holon.projections import Store
from holon.trace.formats import SCOPE, otlp_request
from holon.trace.spans import Span, TraceReader, flat_messages, turn_spans

__all__ = [
    "LiveExporter",
    "OtlpJsonExporter",
    "gen_ai_attributes",
    "headers_from_env",
    "push_settled_since",
    "start_live_export",
]

log = get_logger("holon.trace")

_STATUS = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR, "UNSET": StatusCode.UNSET}
_STATUS_NAME = {v: k for k, v in _STATUS.items()}
_OPERATION = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}


def headers_from_env(name: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` from the variable ``name`` (secrets stay in the environment, never in config)."""
    raw = os.environ.get(name, "") if name else ""
    out = {}
    for part in raw.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _provider(model: str) -> str:
    """``gen_ai.provider.name`` from a litellm model name: its ``provider/`` prefix, else litellm."""
    prefix, sep, _ = model.partition("/")
    return prefix if sep and prefix else "litellm"


def gen_ai_attributes(span: Span) -> dict[str, Any]:
    """OpenTelemetry GenAI semantic-convention attributes for ``span`` (CHAIN spans get none of their own)."""
    a = span.attributes
    out: dict[str, Any] = {
        "gen_ai.agent.name": a.get("inference.agent_name", ""),
        "gen_ai.agent.id": a.get("inference.agent_id", ""),
        "gen_ai.conversation.id": a.get("session.id", ""),
    }
    if span.kind in _OPERATION:
        out["gen_ai.operation.name"] = _OPERATION[span.kind]
    if span.kind == "LLM":
        model = str(a.get("llm.model_name", ""))
        out.update({
            "gen_ai.provider.name": _provider(model),
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": a.get("llm.token_count.prompt", 0),
            "gen_ai.usage.output_tokens": a.get("llm.token_count.completion", 0),
        })  # fmt: skip
        if a.get("holon.finish_reason"):
            out["gen_ai.response.finish_reasons"] = (str(a["holon.finish_reason"]),)
    if span.kind == "TOOL":
        out["gen_ai.tool.name"] = a.get("tool.name", "")
        if a.get("holon.tool.call_id"):
            out["gen_ai.tool.call.id"] = a["holon.tool.call_id"]
    return out


class _Health:
    """Logs an endpoint's outages once each (and their end), rather than once per batch."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.failing = False
        self.dropped = 0

    def report(self, ok: bool, spans: int, error: str = "") -> None:
        if ok and self.failing:
            log.info("trace.live_export_recovered", endpoint=self.endpoint, dropped_spans=self.dropped)
            self.failing, self.dropped = False, 0
        elif not ok:
            self.dropped += spans
            if not self.failing:
                log.warning("trace.live_export_failed", endpoint=self.endpoint, error=error, spans=spans)
                self.failing = True


def _span_of(r: ReadableSpan) -> Span:
    """A queued ``ReadableSpan`` back as holon's ``Span``, for the JSON body."""
    attrs = dict(r.attributes or {})
    ctx = r.context
    assert ctx is not None
    return Span(
        f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", f"{r.parent.span_id:016x}" if r.parent else "", r.name,
        str(attrs.get("openinference.span.kind", "CHAIN")), r.start_time or 0, r.end_time or 0,
        _STATUS_NAME[r.status.status_code], r.status.description or "", attrs,
    )  # fmt: skip


class OtlpJsonExporter(SpanExporter):
    """OTLP/HTTP with a JSON body (``formats.otlp_request``): one POST per batch, no retries.

    The OpenTelemetry SDK ships only the protobuf encoding for HTTP; HALO's desktop app and the
    issue's collectors read JSON. A failed POST drops the batch (export is best effort; the ledger
    still holds everything and ``holon trace export`` can be re-sent, ids being deterministic).
    """

    def __init__(self, endpoint: str, *, headers: dict[str, str], timeout_s: float, service: str) -> None:
        self.endpoint = endpoint
        self.service = service
        self.health = _Health(endpoint)
        self._closed = threading.Event()
        self._client = httpx.Client(timeout=timeout_s, headers={**headers, "Content-Type": "application/json"})

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed.is_set():
            return SpanExportResult.FAILURE
        try:
            body = json.dumps(otlp_request([_span_of(s) for s in spans], service=self.service), separators=(",", ":"))
            response = self._client.post(self.endpoint, content=body.encode("utf-8"))
            ok, error = response.is_success, f"HTTP {response.status_code}"
        except Exception as e:  # a closed client, a refused or timed-out connection: never raise here
            ok, error = False, f"{type(e).__name__}: {e}"
        self.health.report(ok, len(spans), error)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closed.set()
        self._client.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class _Reporting(SpanExporter):
    """The SDK's protobuf exporter, with the same once-per-outage warning as the JSON one."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self.inner = inner
        self.health = _Health(endpoint)
        self._closed = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as e:
            self.health.report(False, len(spans), f"{type(e).__name__}: {e}")
            return SpanExportResult.FAILURE
        self.health.report(result == SpanExportResult.SUCCESS, len(spans), "the collector refused or was unreachable")
        return result

    def shutdown(self) -> None:
        if self._closed.acquire(blocking=False):  # once: the SDK's exporter warns on a second call
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _exporter(settings: TraceSettings) -> SpanExporter:
    headers = headers_from_env(settings.otlp_headers_env)
    if settings.otlp_protocol == "http/json":
        return OtlpJsonExporter(
            settings.otlp_endpoint, headers=headers, timeout_s=settings.timeout_s, service=settings.service_name
        )
    inner = OTLPSpanExporter(endpoint=settings.otlp_endpoint, headers=headers, timeout=settings.timeout_s)
    return _Reporting(inner, settings.otlp_endpoint)


class LiveExporter:
    def __init__(self, store: Store, settings: TraceSettings, *, schedule_delay_ms: float = 500) -> None:
        self.store = store
        self.settings = settings
        self.resource = Resource.create({"service.name": settings.service_name, "service.version": __version__})
        self.scope = InstrumentationScope(SCOPE, __version__)
        self.exporter = _exporter(settings)
        self.processor = BatchSpanProcessor(self.exporter, schedule_delay_millis=schedule_delay_ms)
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="holon-trace-build")

    def _readable(self, s: Span) -> ReadableSpan:
        ctx = SpanContext(int(s.trace_id, 16), int(s.span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
        parent = (
            SpanContext(int(s.trace_id, 16), int(s.parent_span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
            if s.parent_span_id else None
        )  # fmt: skip
        return ReadableSpan(
            s.name, context=ctx, parent=parent, resource=self.resource,
            attributes={**s.attributes, **flat_messages(s), **gen_ai_attributes(s)},
            kind=SpanKind.CLIENT if s.kind == "LLM" else SpanKind.INTERNAL,
            status=Status(_STATUS[s.status], s.status_message or None) if s.status == "ERROR" else Status(_STATUS[s.status]),
            start_time=s.start_ns, end_time=s.end_ns, instrumentation_scope=self.scope,
        )  # fmt: skip

    def turn_settled(self, agent_id: str, turn_id: str) -> None:
        """Queue a settled turn for export; returns at once (the spans are built on a worker thread)."""
        try:
            self._builder.submit(self.queue_turn, agent_id, turn_id)
        except RuntimeError:  # closing: the turn is still in the ledger for a file export
            log.warning("trace.live_export_skipped", agent_id=agent_id, turn_id=turn_id, reason="exporter closed")

    def settled_since(self, seq: int) -> None:
        """Queue every turn settled after ledger position ``seq``; returns at once.

        For turns settled outside the daemon's own path (crash recovery at start-up, ``holon
        run``'s in-process turns). Sending a turn twice is harmless: its trace and span ids are
        derived from ledger ids, so a collector receives the same spans again."""
        try:
            self._builder.submit(self._queue_settled_since, seq)
        except RuntimeError:
            log.warning("trace.live_export_skipped", since_seq=seq, reason="exporter closed")

    def _queue_settled_since(self, seq: int) -> int:
        try:
            keys = self.store.ledger.find_keys(EventQuery(types=("turn.settled",), after=seq))
        except Exception as e:  # export must never fail what started it
            log.warning("trace.live_export_failed", since_seq=seq, error=str(e))
            return 0
        return sum(self.queue_turn(k.agent_id, str(k.turn_id)) for k in keys)

    def queue_turn(self, agent_id: str, turn_id: str) -> int:
        """Build a settled turn's spans and hand them to the processor; how many (0 when anything went wrong)."""
        try:
            q = EventQuery(types=("turn.started",), agent_id=agent_id, turn_id=turn_id, limit=1)
            seqs = self.store.ledger.find_seqs(q)
            if not seqs:
                return 0
            turn = TraceReader(self.store).turn(seqs[0], agent_id, turn_id)
            spans = turn_spans(turn, project=self.settings.project, store=self.store)
            for s in spans:
                self.processor.on_end(self._readable(s))
            return len(spans)
        except Exception as e:  # export must never fail a turn
            log.warning("trace.live_export_failed", agent_id=agent_id, turn_id=turn_id, error=str(e))
            return 0

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait for queued turns to be built, then send what the processor holds."""
        self._builder.submit(lambda: None).result(timeout=timeout_s)
        return bool(self.processor.force_flush(int(timeout_s * 1000)))

    def close(self, timeout_s: float | None = None) -> None:
        """Build what is queued, give the processor ``timeout_s`` (default: the request timeout plus a
        second) to send the rest, then stop; a dead or silent endpoint cannot hold the daemon's stop.

        (``BatchSpanProcessor.shutdown`` takes no deadline and may wait 30 s for its worker, so it
        runs on a thread of its own; past the deadline the exporter is shut, which makes the worker
        drop what is left instead of sending it.)"""
        self._builder.shutdown(wait=True)
        limit = self.settings.timeout_s + 1.0 if timeout_s is None else timeout_s
        stopper = threading.Thread(target=self.processor.shutdown, name="holon-trace-stop", daemon=True)
        stopper.start()
        stopper.join(limit)
        if stopper.is_alive():
            log.warning("trace.live_export_abandoned", endpoint=self.settings.otlp_endpoint, after_s=limit)
            self.exporter.shutdown()


def push_settled_since(store: Store, seq: int, *, timeout_s: float | None = None) -> None:
    """For a process that settles turns and exits (``holon run``): push every turn settled after
    ``seq`` when ``[trace] otlp_endpoint`` is set, waiting at most ``timeout_s`` (default: the
    request timeout plus a second) for the endpoint. Never raises; a dead or silent endpoint costs
    a logged warning and that bounded wait, never a hung exit."""
    if not store.settings.trace.otlp_endpoint:
        return
    exporter = start_live_export(store, store.settings.trace)
    if exporter is not None:
        exporter.settled_since(seq)
        exporter.close(timeout_s)


def start_live_export(store: Store, settings: TraceSettings) -> LiveExporter | None:
    """A ``LiveExporter``, or ``None`` with a warning when it cannot be built: live export is
    optional, so a bad endpoint or exporter must never keep the daemon from starting."""
    try:
        return LiveExporter(store, settings)
    except Exception as e:
        log.warning("trace.live_export_disabled", endpoint=settings.otlp_endpoint, error=f"{type(e).__name__}: {e}")
        return None
