"""The ledger as spans: one trace per turn (or per sealed episode), built from events alone.

Pure over events: ``turn_spans(events, ...)`` turns one turn's events into an AGENT root span with
CHAIN (context assembly), LLM (model call) and TOOL (tool call) children. A call that waited for
its model to start (``model.started``) gets a CHAIN span ``model.start`` for the wait, and its LLM
span begins where the wait ended: a cold start is never model latency. Ids are derived from
ledger ids (sha256 of the turn id for the trace, of the starting event's id for a span), so an
export is the same bytes every time and re-sending it is idempotent.

Token counts (``inference.llm.*``, ``llm.token_count.*``) sit on LLM spans only: HALO's index and
Phoenix add them up over every span of a trace, so a root carrying the turn's total would double
it. The root's totals are ``holon.turn.*_tokens``.

A large text whose blob body was pruned (``holon ledger prune``) is exported as its preview with a
``[pruned: original N bytes]`` marker; a pruned prompt becomes a one-message JSON note, never a
preview passed off as JSON.

``TraceReader`` reads the turns of a filter (agent, time range) from a ``Store`` in ledger order,
a turn at a time, so an export of a large ledger holds one turn in memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from holon.ledger import Event, EventQuery
from holon.ledger import events as ev
from holon.projections import Store

__all__ = [
    "MAX_STATUS_CHARS",
    "MAX_VALUE_CHARS",
    "SCHEMA_VERSION",
    "Span",
    "TraceFilter",
    "TraceReader",
    "Turn",
    "cap",
    "cap_json",
    "flat_messages",
    "span_id",
    "trace_id",
    "turn_spans",
]

#: Longest attribute value exported; longer ones are cut with a marker giving the original size.
MAX_VALUE_CHARS = 16_000
#: Longest status message (an error's text); longer ones are cut with the same marker.
MAX_STATUS_CHARS = 2_000
#: ``inference.export.schema_version``: HALO's verifier requires the integer 1.
SCHEMA_VERSION = 1
#: How many messages get flattened OpenInference keys (``llm.input_messages.N.message.*``).
MAX_FLAT_MESSAGES = 64


def cap(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[truncated: original {len(text):,} characters]"


def _note(content: str) -> dict[str, Any]:
    return {"role": "note", "content": content}


def cap_json(messages: list[dict[str, Any]], limit: int = MAX_VALUE_CHARS) -> str:
    """``messages`` as a JSON string of at most about ``limit`` characters that still parses.

    Long strings inside each message are cut first; if that is not enough the oldest messages are
    replaced by one note saying how many were left out (the newest are the ones a reader wants).
    """
    text = json.dumps(messages, ensure_ascii=False)
    if len(text) <= limit:
        return text
    share = max(200, limit // (2 * max(1, len(messages))))
    shrunk = [{k: cap(v, share) if isinstance(v, str) else v for k, v in m.items()} for m in messages]
    for start in range(len(shrunk)):
        kept = shrunk[start:]
        if start:
            kept = [_note(f"[truncated: {start} earlier messages left out, original {len(text):,} characters]"), *kept]
        text2 = json.dumps(kept, ensure_ascii=False)
        if len(text2) <= limit + 1_000:
            return text2
    return json.dumps([_note(f"[truncated: original {len(text):,} characters]")])


def trace_id(key: str) -> str:
    return hashlib.sha256(f"holon-trace:{key}".encode()).hexdigest()[:32]


def span_id(key: str) -> str:
    return hashlib.sha256(f"holon-span:{key}".encode()).hexdigest()[:16]


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    """OpenInference span kind: AGENT, LLM, TOOL or CHAIN."""
    start_ns: int
    end_ns: int
    status: str = "OK"
    """OK, ERROR or UNSET."""
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Turn:
    agent_id: str
    agent_name: str
    turn_id: str
    events: tuple[Event, ...]
    inputs: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class TraceFilter:
    agent_id: str | None = None
    since_us: int | None = None
    until_us: int | None = None


def _resolve(store: Store | None, value: ev.LargeText | None) -> tuple[str, int | None]:
    """(text, None) when the full text is at hand; (preview, original size in bytes) when not."""
    if value is None:
        return "", None
    if isinstance(value, str):
        return value, None
    if store is None:
        return value.preview, value.size
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or "", None
    if resolved.text is None:
        return resolved.preview, resolved.size
    return resolved.text, None


def _pruned(size: int) -> str:
    return f"[pruned: original {size:,} bytes]"


def _text(store: Store | None, value: ev.LargeText | None) -> str:
    """The full text, or the preview marked as pruned when the blob body is gone."""
    text, missing = _resolve(store, value)
    return text if missing is None else f"{text}…{_pruned(missing)}"


def _messages_json(store: Store | None, value: ev.LargeText | None, fallback: str) -> str:
    """A recorded prompt as a JSON list of messages that parses, whatever happened to it."""
    text, missing = _resolve(store, value)
    if missing is not None:
        return json.dumps([_note(f"{_pruned(missing)} prompt not available")])
    if not text:
        return json.dumps([_note(fallback)])
    try:
        messages = json.loads(text)
    except ValueError:
        return json.dumps([_note(cap(text))], ensure_ascii=False)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return json.dumps([_note(cap(text))], ensure_ascii=False)
    return cap_json(messages)


def flat_messages(span: Span) -> dict[str, Any]:
    """OpenInference's flattened message keys (``llm.input_messages.N.message.role`` ...) of an LLM span.

    Phoenix reads these rather than the JSON strings; the OTLP outputs carry both, the HALO file
    only the JSON strings (what HALO's index and tools read), which keeps each line small.
    """
    if span.kind != "LLM":
        return {}
    out: dict[str, Any] = {}
    for prefix in ("llm.input_messages", "llm.output_messages"):
        out.update(_flat(prefix, str(span.attributes.get(prefix, "[]"))))
    return out


def _flat(prefix: str, messages_json: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    messages = json.loads(messages_json)
    for i, m in enumerate(messages[-MAX_FLAT_MESSAGES:]):
        key = f"{prefix}.{i}.message"
        out[f"{key}.role"] = str(m.get("role", ""))
        content = m.get("content")
        if content is not None:
            out[f"{key}.content"] = cap(
                content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            )
        for j, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") or {}
            tkey = f"{key}.tool_calls.{j}.tool_call"
            out[f"{tkey}.id"] = str(call.get("id", ""))
            out[f"{tkey}.function.name"] = str(fn.get("name", ""))
            out[f"{tkey}.function.arguments"] = cap(str(fn.get("arguments", "")))
    return out


def _ns(us: int) -> int:
    return us * 1_000


@dataclass(slots=True)
class _Builder:
    """State of one turn's fold into spans: what is open, what is done, the running totals."""

    turn: Turn
    store: Store | None
    tid: str
    root_id: str
    common: dict[str, Any]
    spans: list[tuple[int, Span]] = field(default_factory=list)
    requested: dict[int, Event] = field(default_factory=dict)
    started: dict[int, Event] = field(default_factory=dict)
    contexts: dict[int, Event] = field(default_factory=dict)
    calls: dict[str, Event] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    reply: str = ""

    def add(self, start: Event, span: Span) -> None:
        self.spans.append((start.seq, span))

    def span(self, start: Event, name: str, kind: str, end_us: int, status: str, message: str,
             attributes: dict[str, Any], *, start_us: int | None = None) -> Span:  # fmt: skip
        begin = start.ts_us if start_us is None else start_us
        return Span(
            self.tid, span_id(start.id), self.root_id, name, kind, _ns(begin), _ns(max(end_us, begin)),
            status, cap(message, MAX_STATUS_CHARS),
            attributes={**self.common, "openinference.span.kind": kind, "inference.observation_kind": kind, **attributes},
        )  # fmt: skip

    def context(self, e: Event, p: ev.ContextAssembled) -> None:
        self.contexts[p.round] = e
        self.add(e, self.span(e, f"context assembly (round {p.round})", "CHAIN", e.ts_us, "OK", "", {
            "input.value": cap(json.dumps(p.summary, sort_keys=True, ensure_ascii=False)),
            "output.value": f"{p.used_tokens} of {p.budget_tokens} tokens",
            "holon.context.manifest_digest": p.manifest_digest,
        }))  # fmt: skip

    def prompt(self, start: Event) -> str:
        req = start.payload
        ctx = self.contexts.get(req.round) if isinstance(req, ev.ModelRequested | ev.ModelResponded) else None
        recorded = ctx.payload.prompt if ctx is not None and isinstance(ctx.payload, ev.ContextAssembled) else None
        count = req.messages if isinstance(req, ev.ModelRequested) else "?"
        return _messages_json(self.store, recorded, f"{count} messages (prompt not recorded)")

    def llm(self, start: Event, end_us: int, model: str, status: str, message: str, *,
            usage: ev.Usage | None = None, out_msg: dict[str, Any] | None = None,
            extra: dict[str, Any] | None = None, start_us: int | None = None) -> None:  # fmt: skip
        usage = usage or ev.Usage()
        self.tokens_in += usage.prompt_tokens
        self.tokens_out += usage.completion_tokens
        in_msgs = self.prompt(start)
        out_msgs = cap_json([out_msg]) if out_msg is not None else "[]"
        self.add(start, self.span(start, f"llm {model}", "LLM", end_us, status, message, {
            "llm.model_name": model,
            "inference.llm.model_name": model,
            "inference.llm.input_tokens": usage.prompt_tokens,
            "inference.llm.output_tokens": usage.completion_tokens,
            "llm.token_count.prompt": usage.prompt_tokens,
            "llm.token_count.completion": usage.completion_tokens,
            "llm.token_count.total": usage.total_tokens,
            "llm.input_messages": in_msgs,
            "llm.output_messages": out_msgs,
            **(extra or {}),
        }, start_us=start_us))  # fmt: skip

    def model_start(self, requested: Event, e: Event, p: ev.ModelStarted) -> int | None:
        """The cold-start span of a call; where the call proper begins. Recorded after the request,
        the call waited for the start: from the request, ``duration_ms`` long. Recorded before it
        (with ``turn.started``: the turn's question for the model's window waited for it, before
        the turn began), the span ends where the event was recorded and the call is all its own."""
        before = e.seq < requested.seq
        start_us = e.ts_us - round(p.duration_ms * 1000) if before else requested.ts_us
        ready_us = e.ts_us if before else min(requested.ts_us + round(p.duration_ms * 1000), e.ts_us)
        self.add(e, self.span(e, "model.start", "CHAIN", ready_us, "OK", "", {
            "input.value": p.what, "output.value": f"ready after {p.duration_ms:.0f} ms",
            "holon.model_start.what": p.what, "holon.model_start.duration_ms": p.duration_ms, "holon.round": p.round,
        }, start_us=start_us))  # fmt: skip
        return None if before else ready_us

    def responded(self, e: Event, p: ev.ModelResponded) -> None:
        start = self.requested.pop(p.round, e)
        started = self.started.pop(p.round, None)
        begin = None
        if started is not None and isinstance(started.payload, ev.ModelStarted):
            begin = self.model_start(start, started, started.payload)
        content = _text(self.store, p.content)
        if content:
            self.reply = content
        calls = [{"id": c.call_id, "type": "function", "function": {"name": c.tool, "arguments": c.arguments}}
                 for c in p.tool_calls]  # fmt: skip
        out_msg: dict[str, Any] = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
        extra: dict[str, Any] = {"holon.round": p.round, "holon.latency_ms": p.latency_ms}
        if p.cost_usd is not None:
            extra["llm.cost_usd"] = p.cost_usd
        if p.finish_reason:
            extra["holon.finish_reason"] = p.finish_reason
        if p.error_kind:
            extra["holon.error_kind"] = p.error_kind
        self.llm(start, e.ts_us, p.model, "ERROR" if p.error else "OK", p.error or "", usage=p.usage,
                 out_msg=out_msg, extra=extra, start_us=begin)  # fmt: skip

    def tool(self, start: Event, end_us: int, tool: str, status: str, message: str, extra: dict[str, Any]) -> None:
        args = _text(self.store, start.payload.arguments) if isinstance(start.payload, ev.ToolCalled) else ""
        call_id = start.payload.call_id if isinstance(start.payload, ev.ToolCalled | ev.ToolResulted) else ""
        self.add(start, self.span(start, f"tool {tool}", "TOOL", end_us, status, message, {
            "tool.name": tool, "input.value": cap(args), "holon.tool.call_id": call_id, **extra,
        }))  # fmt: skip

    def resulted(self, e: Event, p: ev.ToolResulted) -> None:
        start = self.calls.pop(p.call_id, e)
        output = _text(self.store, p.output)
        ok = p.status == "ok"
        self.tool(start, e.ts_us, p.tool, "OK" if ok else "ERROR", "" if ok else f"{p.status}: {output}", {
            "output.value": cap(output), "holon.tool.status": p.status, "holon.tool.duration_ms": p.duration_ms,
        })  # fmt: skip

    def unfinished(self, end_us: int, outcome: str | None) -> None:
        """Calls the ledger has no answer for (an interrupted or failed turn): spans that end with the turn."""
        status = "ERROR" if outcome is not None else "UNSET"
        settled = f" before the turn settled ({outcome})" if outcome is not None else ""
        for start in self.requested.values():
            p = start.payload
            assert isinstance(p, ev.ModelRequested)
            self.llm(start, end_us, p.model, status, f"no model response recorded{settled}" if settled else "",
                     extra={"holon.round": p.round, "holon.unfinished": True})  # fmt: skip
        for start in self.calls.values():
            q = start.payload
            assert isinstance(q, ev.ToolCalled)
            self.tool(start, end_us, q.tool, status, f"no tool result recorded{settled}" if settled else "",
                      {"output.value": "", "holon.unfinished": True})  # fmt: skip

    def fold(self, e: Event) -> None:
        p = e.payload
        match p:
            case ev.ContextAssembled():
                self.context(e, p)
            case ev.ModelRequested():
                self.requested[p.round] = e
            case ev.ModelStarted():
                self.started[p.round] = e
            case ev.ModelResponded():
                self.responded(e, p)
            case ev.ToolCalled():
                self.calls[p.call_id] = e
            case ev.ToolResulted():
                self.resulted(e, p)


def _common(project: str, agent_name: str, agent_id: str) -> dict[str, Any]:
    return {
        "inference.export.schema_version": SCHEMA_VERSION,
        "inference.project_id": project,
        "inference.agent_name": agent_name,
        "inference.agent_id": agent_id,
        "session.id": agent_id,
    }


def turn_spans(turn: Turn, *, project: str, store: Store | None = None, trace: str | None = None,
               parent: str = "") -> list[Span]:  # fmt: skip
    """The spans of one turn, root first then in ledger order of their starting events."""
    events = turn.events
    started = events[0]
    settled = events[-1].payload if isinstance(events[-1].payload, ev.TurnSettled) else None
    common = _common(project, turn.agent_name, turn.agent_id)
    b = _Builder(turn, store, trace or trace_id(turn.turn_id), span_id(started.id), common)
    for e in events:
        b.fold(e)
    end = events[-1].ts_us
    b.unfinished(end, settled.outcome if settled is not None else None)
    outcome = settled.outcome if settled is not None else "running"
    status = "OK" if outcome in ("completed", "waiting") else ("UNSET" if settled is None else "ERROR")
    message = f"{outcome}: {settled.reason or ''}".strip(": ") if status == "ERROR" and settled is not None else ""
    inputs = "\n\n".join(_text(store, e.payload.text) for e in turn.inputs if isinstance(e.payload, ev.MessageReceived))
    root = Span(
        b.tid, b.root_id, parent, f"agent {turn.agent_name} turn", "AGENT", _ns(started.ts_us), _ns(end), status,
        cap(message, MAX_STATUS_CHARS),
        attributes={**common, "openinference.span.kind": "AGENT", "inference.observation_kind": "AGENT",
                    "input.value": cap(inputs), "output.value": cap(b.reply), "holon.turn_id": turn.turn_id,
                    "holon.outcome": outcome, "holon.turn.input_tokens": b.tokens_in,
                    "holon.turn.output_tokens": b.tokens_out, "holon.turn.total_tokens": b.tokens_in + b.tokens_out},
    )  # fmt: skip
    return [root, *(s for _, s in sorted(b.spans, key=lambda pair: pair[0]))]


class TraceReader:
    """Turns of a filter, in ledger order, read a turn at a time."""

    def __init__(self, store: Store, flt: TraceFilter | None = None) -> None:
        self.store = store
        self.flt = flt or TraceFilter()
        self._names = {a.agent_id: a.name for a in store.agents()}

    def name_of(self, agent_id: str) -> str:
        return self._names.get(agent_id, agent_id)

    def turn_starts(self) -> list[tuple[int, str, str]]:
        """(seq, agent id, turn id) of every turn.started the filter selects."""
        f = self.flt
        q = EventQuery(types=("turn.started",), agent_id=f.agent_id, since_us=f.since_us, until_us=f.until_us)
        return [(k.seq, k.agent_id, str(k.turn_id)) for k in self.store.ledger.find_keys(q)]

    def turn(self, seq: int, agent_id: str, turn_id: str) -> Turn:
        events: list[Event] = []
        for e in self.store.ledger.read(seq - 1, agent_id=agent_id, chunk=500):
            if e.turn_id == turn_id:
                events.append(e)
                if e.type == "turn.settled":
                    break
            elif e.type == "turn.started":
                break  # the next turn began: this one never settled
        head = events[0].payload
        inputs = self.store.ledger.get_many(list(head.inputs)) if isinstance(head, ev.TurnStarted) else []
        return Turn(agent_id, self.name_of(agent_id), turn_id, tuple(events), tuple(inputs))

    def turns(self) -> Iterator[Turn]:
        for seq, agent_id, turn_id in self.turn_starts():
            yield self.turn(seq, agent_id, turn_id)

    def episodes(self) -> list[Event]:
        """``episode.sealed`` events of the filter's agents, in order."""
        return self.store.ledger.find(EventQuery(types=("episode.sealed",), agent_id=self.flt.agent_id))


def episode_traces(reader: TraceReader, *, project: str) -> Iterator[list[Span]]:
    """One trace per sealed episode: an AGENT root for the episode, the turns it covers under it."""
    starts = reader.turn_starts()
    for sealed in reader.episodes():
        p = sealed.payload
        assert isinstance(p, ev.EpisodeSealed)
        covered = [t for t in starts if t[1] == sealed.agent_id and p.seq_start <= t[0] <= p.seq_end]
        if not covered:
            continue
        tid = trace_id(f"episode:{p.episode_id}")
        root_id = span_id(f"episode:{p.episode_id}")
        turn_spans_: list[Span] = []
        for seq, agent_id, turn_id in covered:
            turn_spans_ += turn_spans(reader.turn(seq, agent_id, turn_id), project=project, store=reader.store,
                                      trace=tid, parent=root_id)  # fmt: skip
        first = min(s.start_ns for s in turn_spans_)
        last = max(s.end_ns for s in turn_spans_)
        name = reader.name_of(sealed.agent_id)
        failed = [s for s in turn_spans_ if s.parent_span_id == root_id and s.status == "ERROR"]
        root = Span(tid, root_id, "", f"agent {name} episode {p.topic or p.episode_id}", "AGENT", first, last,
                    "ERROR" if failed else "OK", f"{len(failed)} of {len(covered)} turns failed" if failed else "",
                    attributes={**_common(project, name, sealed.agent_id), "openinference.span.kind": "AGENT",
                                "inference.observation_kind": "AGENT", "input.value": cap(" / ".join(p.excerpts)),
                                "output.value": cap(p.summary), "holon.episode_id": p.episode_id,
                                "holon.episode.turns": len(covered)})  # fmt: skip
        yield [root, *turn_spans_]


def spans_of(reader: TraceReader, *, project: str, by: str = "turn") -> Iterator[list[Span]]:
    """Every trace of the filter: a list of spans per turn (``by="turn"``) or per episode."""
    if by == "episode":
        yield from episode_traces(reader, project=project)
        return
    for turn in reader.turns():
        yield turn_spans(turn, project=project, store=reader.store)


def token_totals(spans: Sequence[Span]) -> tuple[int, int]:
    """(prompt, completion) tokens over the LLM spans."""
    llm = [s for s in spans if s.kind == "LLM"]
    return (sum(int(s.attributes["llm.token_count.prompt"]) for s in llm),
            sum(int(s.attributes["llm.token_count.completion"]) for s in llm))  # fmt: skip
