"""Writing spans: HALO's JSONL (one span per line) and OTLP/JSON (one request body per trace).

``halo_line(span)`` is the JSON object HALO's index reads; ``check_halo_line`` validates one before
it is written, because one bad line breaks HALO's index build, and ``check_halo_trace`` checks a
trace's lines together (every parent present). The rules are those of HALO's engine
(``SpanRecord``) and its ``verify_traces.py``: a ``trace_state`` key, ``kind`` ``SPAN_KIND_*``,
``inference.export.schema_version`` the integer 1, ``inference.observation_kind`` one of HALO's
kinds. The exporter refuses to write a trace that fails (``ExportError``) rather than writing a
file HALO cannot read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from holon import __version__
from holon.clock import format_us
from holon.errors import HolonError
from holon.trace.spans import SCHEMA_VERSION, Span, flat_messages

__all__ = ["ExportError", "check_halo_line", "check_halo_trace", "halo_jsonl", "halo_line", "nano_time", "otlp_request"]

SCOPE = "holon.trace"
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$")
_STATUS = {"OK": "STATUS_CODE_OK", "ERROR": "STATUS_CODE_ERROR", "UNSET": "STATUS_CODE_UNSET"}
_OTLP_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
_KINDS = {"AGENT", "LLM", "TOOL", "CHAIN"}
#: ``inference.observation_kind`` values HALO accepts (verify_traces.py).
_OBSERVATION_KINDS = {"LLM", "TOOL", "AGENT", "CHAIN", "GUARDRAIL", "SPAN"}
_INT_ATTRS = ("inference.llm.input_tokens", "inference.llm.output_tokens", "llm.token_count.prompt",
              "llm.token_count.completion", "llm.token_count.total")  # fmt: skip
_JSON_ATTRS = ("llm.input_messages", "llm.output_messages")
_REQUIRED_ATTRS = ("openinference.span.kind", "inference.project_id", "inference.observation_kind",
                   "inference.agent_name", "inference.agent_id", "session.id")  # fmt: skip
_LLM_ATTRS = ("llm.model_name", "inference.llm.model_name", *_INT_ATTRS, *_JSON_ATTRS)


class ExportError(HolonError):
    exit_code = 5


def nano_time(ns: int) -> str:
    """Fixed-width UTC with nanoseconds: ``2026-11-24T15:53:10.123456789Z``."""
    seconds, frac = divmod(ns, 1_000_000_000)
    return format_us(seconds * 1_000_000)[:19] + f".{frac:09d}Z"


def halo_line(span: Span, *, service: str = "holon") -> dict[str, Any]:
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "trace_state": "",
        "name": span.name,
        "kind": "SPAN_KIND_INTERNAL" if span.kind != "LLM" else "SPAN_KIND_CLIENT",
        "start_time": nano_time(span.start_ns),
        "end_time": nano_time(span.end_ns),
        "status": {"code": _STATUS[span.status], "message": span.status_message},
        "resource": {"attributes": {"service.name": service, "service.version": __version__}},
        "scope": {"name": SCOPE, "version": __version__},
        "attributes": dict(sorted(span.attributes.items())),
    }


def check_halo_line(line: dict[str, Any]) -> list[str]:
    """Every way ``line`` breaks the shape HALO reads; empty when it is fine."""
    problems = []
    for key, kind in (("trace_id", str), ("span_id", str), ("parent_span_id", str), ("trace_state", str),
                      ("name", str), ("kind", str),
                      ("start_time", str), ("end_time", str), ("status", dict), ("resource", dict),
                      ("scope", dict), ("attributes", dict)):  # fmt: skip
        if not isinstance(line.get(key), kind):
            problems.append(f"{key}: missing or not a {kind.__name__}")
    if problems:
        return problems
    if not _HEX32.match(line["trace_id"]):
        problems.append("trace_id: not 32 lower-case hex digits")
    if not _HEX16.match(line["span_id"]):
        problems.append("span_id: not 16 lower-case hex digits")
    if line["parent_span_id"] and not _HEX16.match(line["parent_span_id"]):
        problems.append("parent_span_id: neither empty nor 16 hex digits")
    if not line["kind"].startswith("SPAN_KIND_"):
        problems.append(f"kind: {line['kind']!r} does not start with SPAN_KIND_")
    for key in ("start_time", "end_time"):
        if not _TIME.match(line[key]):
            problems.append(f"{key}: not a fixed-width UTC nanosecond time ending in Z")
    if line["start_time"] > line["end_time"]:
        problems.append("end_time before start_time")
    status = line["status"]
    if status.get("code") not in _STATUS.values() or not isinstance(status.get("message"), str):
        problems.append("status: code must be STATUS_CODE_OK|ERROR|UNSET with a string message")
    res = line["resource"].get("attributes", {})
    if not isinstance(res.get("service.name"), str) or not isinstance(res.get("service.version"), str):
        problems.append("resource.attributes: service.name and service.version are required strings")
    if not isinstance(line["scope"].get("name"), str) or not isinstance(line["scope"].get("version"), str):
        problems.append("scope: name and version are required strings")
    attrs = line["attributes"]
    for key in _REQUIRED_ATTRS:
        if not isinstance(attrs.get(key), str) or not attrs.get(key):
            problems.append(f"attributes.{key}: required non-empty string")
    version = attrs.get("inference.export.schema_version")
    if version != SCHEMA_VERSION or not isinstance(version, int) or isinstance(version, bool):
        problems.append(
            f"attributes.inference.export.schema_version: must be the integer {SCHEMA_VERSION}, not {version!r}"
        )
    if attrs.get("inference.observation_kind") not in _OBSERVATION_KINDS:
        problems.append(f"attributes.inference.observation_kind: {attrs.get('inference.observation_kind')!r} is not one of "
                        f"{', '.join(sorted(_OBSERVATION_KINDS))}")  # fmt: skip
    kind = attrs.get("openinference.span.kind")
    if kind not in _KINDS:
        problems.append(f"attributes.openinference.span.kind: {kind!r} is not AGENT, LLM, TOOL or CHAIN")
    if kind == "LLM":
        for key in _LLM_ATTRS:
            if key not in attrs:
                problems.append(f"attributes.{key}: required on LLM spans")
    if kind == "TOOL" and not isinstance(attrs.get("tool.name"), str):
        problems.append("attributes.tool.name: required on TOOL spans")
    for key in _INT_ATTRS:
        if key in attrs and (not isinstance(attrs[key], int) or isinstance(attrs[key], bool)):
            problems.append(f"attributes.{key}: must be an integer")
    for key in _JSON_ATTRS:
        if key in attrs:
            try:
                json.loads(attrs[key])
            except (TypeError, ValueError):
                problems.append(f"attributes.{key}: must be a JSON string")
    for key, value in attrs.items():
        if not isinstance(value, str | int | float | bool):
            problems.append(f"attributes.{key}: {type(value).__name__} is not a scalar")
    return problems


def check_halo_trace(lines: Sequence[dict[str, Any]]) -> list[str]:
    """What breaks a trace as a whole: a parent that is not in it, or a span id given twice."""
    ids = [line.get("span_id") for line in lines]
    repeated = sorted({i for i in ids if ids.count(i) > 1}, key=str)  # key: a missing id (None) sorts too
    problems = [f"span_id {sid}: appears more than once" for sid in repeated]
    known = set(ids)
    for line in lines:
        parent = line.get("parent_span_id")
        if parent and parent not in known:
            problems.append(
                f"span {line.get('span_id')}: parent_span_id {parent} is not in trace {line.get('trace_id')}"
            )
    return problems


def halo_jsonl(spans: Sequence[Span], *, service: str = "holon") -> list[str]:
    """Validated JSONL lines (without newlines) for one trace's ``spans``; ``ExportError`` on a bad one."""
    lines = []
    for span in spans:
        line = halo_line(span, service=service)
        problems = check_halo_line(line)
        if problems:
            raise ExportError(f"span {span.span_id} ({span.name}) would break HALO's index: {'; '.join(problems)}")
        lines.append(line)
    problems = check_halo_trace(lines)
    if problems:
        raise ExportError(f"trace {spans[0].trace_id} would break HALO's index: {'; '.join(problems)}")
    return [json.dumps(line, ensure_ascii=False, sort_keys=True, separators=(",", ":")) for line in lines]


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_otlp_value(v) for v in value]}}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def otlp_request(spans: list[Span], *, service: str = "holon") -> dict[str, Any]:
    """An OTLP/HTTP JSON ``ExportTraceServiceRequest`` body for ``spans``.

    LLM spans also get OpenInference's flattened message keys (``flat_messages``), which Phoenix
    and other OTLP readers use; the JSON-string forms stay for HALO.
    """
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [
                    {"key": "service.name", "value": {"stringValue": service}},
                    {"key": "service.version", "value": {"stringValue": __version__}},
                ]},
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE, "version": __version__},
                        "spans": [
                            {
                                "traceId": s.trace_id,
                                "spanId": s.span_id,
                                "parentSpanId": s.parent_span_id,
                                "name": s.name,
                                "kind": 3 if s.kind == "LLM" else 1,
                                "startTimeUnixNano": str(s.start_ns),
                                "endTimeUnixNano": str(s.end_ns),
                                "attributes": [{"key": k, "value": _otlp_value(v)}
                                               for k, v in sorted({**s.attributes, **flat_messages(s)}.items())],
                                "status": {"code": _OTLP_STATUS[s.status], "message": s.status_message},
                            }
                            for s in spans
                        ],
                    }
                ],
            }
        ]
    }  # fmt: skip
