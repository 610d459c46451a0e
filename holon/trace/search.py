"""Regular-expression search over the full texts of spans, bounded in time (``trace_search``).

Span attributes are capped for export (16,000 characters each), but a search's counts must be
exact, so the texts searched here come from the ledger itself: each span's input, output and
error in full, with the same span ids as ``turn_spans`` (a pruned blob counts over its preview,
the only text left).

Python's ``re`` has no time limit and does not release the GIL while it matches, so a pattern
that backtracks catastrophically (``(a+)+$`` on a long run of ``a``) would hang the turn, and the
whole process, for hours. The match therefore runs in a child interpreter (stdlib only, started
with ``-I -S``) that is killed when ``timeout_s`` runs out: :class:`SearchTimeout`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import dataclass

from holon.errors import HolonError
from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store
from holon.trace.spans import Turn, span_id

__all__ = ["Match", "SearchTimeout", "SpanText", "count_matches", "span_texts"]


class SearchTimeout(HolonError):
    """The pattern ran past its time limit and was stopped."""


@dataclass(frozen=True, slots=True)
class SpanText:
    """The searchable texts of one span: ``input``, ``output`` and ``error``, in full."""

    turn_id: str
    agent: str
    span_id: str
    kind: str
    name: str
    fields: dict[str, str]

    @property
    def size(self) -> int:
        return sum(len(t) for t in self.fields.values())


@dataclass(frozen=True, slots=True)
class Match:
    """How often a pattern matched one text, and where it matched first."""

    count: int
    first: tuple[int, int] | None


def _full(store: Store, value: ev.LargeText | None) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    try:
        blob = store.ledger.resolve(value)
    except HolonError:
        return value.preview
    if blob is None or isinstance(blob, str):
        return blob or ""
    return blob.text if blob.text is not None else blob.preview


def _calls(calls: list[ev.ToolCallSpec]) -> str:
    return json.dumps([{"name": c.tool, "arguments": c.arguments} for c in calls], ensure_ascii=False) if calls else ""


def span_texts(turn: Turn, store: Store) -> list[SpanText]:
    """Every span of ``turn`` (root first, then in ledger order) with its texts in full."""
    name = turn.agent_name
    inputs = "\n\n".join(_full(store, e.payload.text) for e in turn.inputs if isinstance(e.payload, ev.MessageReceived))
    prompts: dict[int, str] = {}
    requested: dict[int, Event] = {}
    called: dict[str, Event] = {}
    out: list[tuple[int, SpanText]] = []
    reply, error = "", ""

    def add(start: Event, kind: str, label: str, **fields: str) -> None:
        out.append((start.seq, SpanText(turn.turn_id, name, span_id(start.id), kind, label, fields)))

    for e in turn.events:
        match e.payload:
            case ev.ContextAssembled() as p:
                prompts[p.round] = _full(store, p.prompt)
                add(e, "CHAIN", f"context assembly (round {p.round})",
                    input=json.dumps(p.summary, sort_keys=True, ensure_ascii=False))  # fmt: skip
            case ev.ModelRequested() as p:
                requested[p.round] = e
            case ev.ModelResponded() as p:
                content = _full(store, p.content)
                reply = content or reply
                add(requested.pop(p.round, e), "LLM", f"llm {p.model}", input=prompts.get(p.round, ""),
                    output="\n".join(t for t in (content, _calls(p.tool_calls)) if t), error=p.error or "")  # fmt: skip
            case ev.ToolCalled() as p:
                called[p.call_id] = e
            case ev.ToolResulted() as p:
                start = called.pop(p.call_id, e)
                args = _full(store, start.payload.arguments) if isinstance(start.payload, ev.ToolCalled) else ""
                add(start, "TOOL", f"tool {p.tool}", input=args, output=_full(store, p.output),
                    error="" if p.status == "ok" else p.status)  # fmt: skip
            case ev.TurnSettled() as p:
                error = p.reason or ""
    for start in requested.values():
        assert isinstance(start.payload, ev.ModelRequested)
        add(start, "LLM", f"llm {start.payload.model}", input=prompts.get(start.payload.round, ""))
    for start in called.values():
        assert isinstance(start.payload, ev.ToolCalled)
        add(start, "TOOL", f"tool {start.payload.tool}", input=_full(store, start.payload.arguments))
    root = SpanText(turn.turn_id, name, span_id(turn.events[0].id), "AGENT", f"agent {name} turn",
                    {"input": inputs, "output": reply, "error": error})  # fmt: skip
    return [root, *(s for _, s in sorted(out, key=lambda pair: pair[0]))]


# The child: read {"pattern", "texts"} from stdin, write [[count, start, end], ...] to stdout.
_CHILD = """
import json, re, sys
req = json.loads(sys.stdin.buffer.read())
rx = re.compile(req["pattern"])
out = []
for text in req["texts"]:
    n, first = 0, None
    for m in rx.finditer(text):
        n += 1
        if first is None:
            first = [m.start(), m.end()]
    out.append([n] + (first or []))
sys.stdout.write(json.dumps(out))
"""


async def count_matches(pattern: str, texts: list[str], *, timeout_s: float) -> list[Match]:
    """Exact match counts of ``pattern`` in each text, computed in a child killed after ``timeout_s``.

    The pattern must already compile (the caller checks, to give the model a clear error).
    """
    re.compile(pattern)
    data = json.dumps({"pattern": pattern, "texts": texts}).encode("ascii")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-c", _CHILD,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SearchTimeout(
            f"the pattern ran for over {timeout_s:g} s on {sum(map(len, texts)):,} characters and was stopped"
        ) from None
    if proc.returncode != 0:
        raise HolonError(f"the search process failed ({proc.returncode}): {err.decode(errors='replace')[-300:]}")
    return [Match(row[0], (row[1], row[2]) if len(row) == 3 else None) for row in json.loads(out)]
