"""The ledger as spans: one trace per turn (or per sealed episode), built from events alone.

Pure over events: ``turn_spans(events, ...)`` turns one turn's events into an AGENT root span with
CHAIN (context assembly), LLM (model call) and TOOL (tool call) children. Ids are derived from
ledger ids (sha256 of the turn id for the trace, of the starting event's id for a span), so an
export is the same bytes every time and re-sending it is idempotent.

``TraceReader`` reads the turns of a filter (agent, time range) from a ``Store`` in ledger order,
a turn at a time, so an export of a large ledger holds one turn in memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store

__all__ = [
    "MAX_VALUE_CHARS",
    "Span",
    "cap_json",
    "TraceFilter",
    "TraceReader",
    "Turn",
    "cap",
    "span_id",
    "trace_id",
    "turn_spans",
]

#: Longest attribute value exported; longer ones are cut with a marker giving the original size.
MAX_VALUE_CHARS = 16_000


def cap(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[truncated: original {len(text):,} characters]"


def cap_json(messages: list[dict[str, Any]], limit: int = MAX_VALUE_CHARS) -> str:
    """``messages`` as a JSON string of at most about ``limit`` characters that still parses."""
    text = json.dumps(messages, ensure_ascii=False)
    if len(text) <= limit:
        return text
    share = max(200, limit // (2 * max(1, len(messages))))
    shrunk = [{k: cap(v, share) if isinstance(v, str) else v for k, v in m.items()} for m in messages]
    text2 = json.dumps(shrunk, ensure_ascii=False)
    if len(text2) <= limit + 1_000:
        return text2
    return json.dumps([{"role": "note", "content": f"[truncated: original {len(text):,} characters]"}])


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


def _text(store: Store | None, value: ev.LargeText | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if store is None:
        return value.preview
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or ""
    return resolved.text if resolved.text is not None else resolved.preview


def _ns(us: int) -> int:
    return us * 1_000


def turn_spans(turn: Turn, *, project: str, store: Store | None = None, trace: str | None = None,
               parent: str = "") -> list[Span]:  # fmt: skip
    """The spans of one turn, root first then in ledger order of their starting events."""
    events = turn.events
    started = events[0]
    settled = events[-1] if isinstance(events[-1].payload, ev.TurnSettled) else None
    tid = trace or trace_id(turn.turn_id)
    root_id = span_id(started.id)
    common = {
        "inference.export.schema_version": "1",
        "inference.project_id": project,
        "inference.agent_name": turn.agent_name,
        "inference.agent_id": turn.agent_id,
        "session.id": turn.agent_id,
    }
    inputs = "\n\n".join(_text(store, e.payload.text) for e in turn.inputs if isinstance(e.payload, ev.MessageReceived))
    reply = ""
    spans: list[Span] = []
    requested: dict[int, Event] = {}
    contexts: dict[int, Event] = {}
    calls: dict[str, Event] = {}
    tokens_in = tokens_out = 0
    for e in events:
        p = e.payload
        match p:
            case ev.ContextAssembled():
                contexts[p.round] = e
                spans.append(
                    Span(
                        tid,
                        span_id(e.id),
                        root_id,
                        f"context assembly (round {p.round})",
                        "CHAIN",
                        _ns(e.ts_us),
                        _ns(e.ts_us),
                        attributes={
                            **common,
                            "openinference.span.kind": "CHAIN",
                            "inference.observation_kind": "CHAIN",
                            "input.value": cap(json.dumps(p.summary, sort_keys=True, ensure_ascii=False)),
                            "output.value": f"{p.used_tokens} of {p.budget_tokens} tokens",
                            "holon.context.manifest_digest": p.manifest_digest,
                        },
                    )
                )
            case ev.ModelRequested():
                requested[p.round] = e
            case ev.ModelResponded():
                start = requested.pop(p.round, e)
                ctx = contexts.get(p.round)
                prompt = _text(store, ctx.payload.prompt) if ctx is not None else ""  # type: ignore[union-attr]
                content = _text(store, p.content)
                if content:
                    reply = content
                tokens_in += p.usage.prompt_tokens
                tokens_out += p.usage.completion_tokens
                out_msg = {"role": "assistant", "content": content,
                           "tool_calls": [{"id": c.call_id, "name": c.tool, "arguments": c.arguments} for c in p.tool_calls]}  # fmt: skip
                req = start.payload if isinstance(start.payload, ev.ModelRequested) else None
                in_msgs = prompt or json.dumps([{"role": "note", "content": f"{req.messages if req else '?'} messages (prompt not recorded)"}])  # fmt: skip
                spans.append(
                    Span(
                        tid,
                        span_id(start.id),
                        root_id,
                        f"llm {p.model}",
                        "LLM",
                        _ns(start.ts_us),
                        _ns(e.ts_us),
                        "ERROR" if p.error else "OK",
                        p.error or "",
                        attributes={
                            **common,
                            "openinference.span.kind": "LLM",
                            "inference.observation_kind": "LLM",
                            "llm.model_name": p.model,
                            "inference.llm.model_name": p.model,
                            "inference.llm.input_tokens": p.usage.prompt_tokens,
                            "inference.llm.output_tokens": p.usage.completion_tokens,
                            "llm.token_count.prompt": p.usage.prompt_tokens,
                            "llm.token_count.completion": p.usage.completion_tokens,
                            "llm.token_count.total": p.usage.total_tokens,
                            "llm.input_messages": in_msgs
                            if len(in_msgs) <= MAX_VALUE_CHARS
                            else cap_json(json.loads(in_msgs)),
                            "llm.output_messages": cap_json([out_msg]),
                            "holon.round": p.round,
                            "holon.latency_ms": p.latency_ms,
                            **({"llm.cost_usd": p.cost_usd} if p.cost_usd is not None else {}),
                        },
                    )
                )
            case ev.ToolCalled():
                calls[p.call_id] = e
            case ev.ToolResulted():
                start = calls.pop(p.call_id, e)
                args = _text(store, start.payload.arguments) if isinstance(start.payload, ev.ToolCalled) else ""
                spans.append(
                    Span(
                        tid,
                        span_id(start.id),
                        root_id,
                        f"tool {p.tool}",
                        "TOOL",
                        _ns(start.ts_us),
                        _ns(e.ts_us),
                        "OK" if p.status == "ok" else "ERROR",
                        "" if p.status == "ok" else f"{p.status}: {_text(store, p.output)[:200]}",
                        attributes={
                            **common,
                            "openinference.span.kind": "TOOL",
                            "inference.observation_kind": "TOOL",
                            "tool.name": p.tool,
                            "input.value": cap(args),
                            "output.value": cap(_text(store, p.output)),
                            "holon.tool.status": p.status,
                            "holon.tool.duration_ms": p.duration_ms,
                        },
                    )
                )
    outcome = settled.payload.outcome if settled is not None else "running"  # type: ignore[union-attr]
    error = settled.payload.reason if settled is not None else None  # type: ignore[union-attr]
    end = settled.ts_us if settled is not None else events[-1].ts_us
    status = "OK" if outcome in ("completed", "waiting") else ("UNSET" if settled is None else "ERROR")
    root = Span(
        tid, root_id, parent, f"agent {turn.agent_name} turn", "AGENT", _ns(started.ts_us), _ns(end), status,
        "" if status != "ERROR" else f"{outcome}: {error or ''}".strip(": "),
        attributes={**common, "openinference.span.kind": "AGENT", "inference.observation_kind": "AGENT",
                    "input.value": cap(inputs), "output.value": cap(reply), "holon.turn_id": turn.turn_id,
                    "holon.outcome": outcome, "inference.llm.input_tokens": tokens_in,
                    "inference.llm.output_tokens": tokens_out, "llm.token_count.prompt": tokens_in,
                    "llm.token_count.completion": tokens_out, "llm.token_count.total": tokens_in + tokens_out},
    )  # fmt: skip
    return [root, *spans]


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
        sql = "SELECT seq, agent_id, turn_id FROM events WHERE type = 'turn.started'"
        params: list[object] = []
        f = self.flt
        if f.agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(f.agent_id)
        if f.since_us is not None:
            sql += " AND ts_us >= ?"
            params.append(f.since_us)
        if f.until_us is not None:
            sql += " AND ts_us < ?"
            params.append(f.until_us)
        return [(int(s), str(a), str(t)) for s, a, t in self.store.ledger.query(sql + " ORDER BY seq", params)]

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
        sql = "SELECT seq FROM events WHERE type = 'episode.sealed'"
        params: list[object] = []
        if self.flt.agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(self.flt.agent_id)
        seqs = [int(s) for (s,) in self.store.ledger.query(sql + " ORDER BY seq", params)]
        return self.store.ledger.get_many(seqs)


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
        root = Span(tid, root_id, "", f"agent {name} episode {p.topic or p.episode_id}", "AGENT", first, last,
                    attributes={"openinference.span.kind": "AGENT", "inference.observation_kind": "AGENT",
                                "inference.export.schema_version": "1", "inference.project_id": project,
                                "inference.agent_name": name, "inference.agent_id": sealed.agent_id,
                                "session.id": sealed.agent_id, "input.value": cap(" / ".join(p.excerpts)),
                                "output.value": cap(p.summary), "holon.episode_id": p.episode_id})  # fmt: skip
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
