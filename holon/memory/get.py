"""MemoryGet: read what a memory reference points at, whole or by parts, within a size cap.

A read is one ``MemoryGetRequest``: the reference and the options (mode, heading, line range,
tail, expand, size cap), checked once where the request is made (the tool, the HTTP API, the MCP
server, the CLI) and passed whole from there. ``memory_get(store, agent, request)`` resolves the
parsed reference from canonical storage (``holon.memory.documents``), selects the part the mode
asks for (``holon.memory.markdown``) and returns a ``MemoryRead``. A selection larger than ``max_chars`` is never cut short: the read
returns no content, but the sizes (the whole document, its largest sections or events) and the
exact calls that would get what is needed (headers, a section, a line range, the tail, a narrower
search). A model that sees content knows it is the whole of what it asked for.

A line is the smallest part a read selects, so a line longer than the largest read (a 64 KiB hook
body on one line) could never be read at all: every read but a ``full`` one that fits works on
the document with such lines cut into lines of ``WRAP_CHARS`` (and a note saying so).

Only ``HolonError`` s leave this module: ``UsageError`` for a malformed reference or option,
``NotFoundError`` for a reference that is not the agent's to read.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from holon.errors import UsageError
from holon.memory.documents import Document, resolve
from holon.memory.markdown import MODES, Mode, Selection, headings, select, split_lines
from holon.memory.refs import EpisodeRef, Ref, RefKind, parse_ref
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = [
    "DEFAULT_MAX_CHARS",
    "LARGE_READ_CHARS",
    "MAX_MAX_CHARS",
    "WRAP_CHARS",
    "MemoryGetRequest",
    "MemoryRead",
    "NextCall",
    "memory_get",
    "wrap_long_lines",
]

DEFAULT_MAX_CHARS = 12_000
LARGE_READ_CHARS = 32_000
"""The largest cap a model may ask for (the tool's limit); over-cap reads up to it suggest it."""
MAX_MAX_CHARS = 1_000_000
"""The largest cap at all (the CLI)."""
MIN_MAX_CHARS = 200
WRAP_CHARS = 8_000
"""Longest line of a document read by parts (below ``DEFAULT_MAX_CHARS``, so one line always fits)."""


@dataclass(frozen=True, slots=True)
class NextCall:
    """A call that would get (part of) what a capped read could not return, and why."""

    arguments: dict[str, Any]
    why: str
    tool: str = "memory_get"

    def render(self) -> str:
        return f"{self.tool} {json.dumps(self.arguments, ensure_ascii=False)}  ({self.why})"


@dataclass(frozen=True, slots=True)
class MemoryRead:
    ref: str
    kind: RefKind
    title: str
    content: str | None
    """The selected text, whole; ``None`` when it was larger than the cap."""
    size: int
    """Characters of the whole document (not only the selection)."""
    summary: str
    """What the content is, or, without content, the sizes that explain why."""
    next_calls: tuple[NextCall, ...] = ()

    def render(self) -> str:
        """The read as text for a tool result or a terminal."""
        if self.content is not None:
            hint = "".join(f"\n- {c.render()}" for c in self.next_calls)
            return f"[{self.summary}]\n{self.content}" + (f"\n[next:{hint}]" if hint else "")
        calls = "\n".join(f"- {c.render()}" for c in self.next_calls)
        return f"[{self.summary}]\nNo content returned. Calls that get what you need:\n{calls}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MemoryRead:
        """A read back from ``as_json`` (what the API answers), to render it the same way."""
        calls = tuple(NextCall(c["arguments"], c["why"], c.get("tool", "memory_get")) for c in data["next_calls"])
        return cls(data["ref"], data["kind"], data["title"], data["content"], data["size"], data["summary"], calls)

    def as_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "kind": self.kind,
            "title": self.title,
            "content": self.content,
            "size": self.size,
            "summary": self.summary,
            "next_calls": [{"tool": c.tool, "arguments": c.arguments, "why": c.why} for c in self.next_calls],
        }


def _mode(mode: str | None, heading: str | None, start: int | None, end: int | None, lines: int | None) -> Mode:
    """The mode asked for, or implied by the options given; refuses options that contradict it."""
    implied: list[Mode] = []
    if heading is not None:
        implied.append("section")
    if start is not None or end is not None:
        implied.append("lines")
    if lines is not None:
        implied.append("tail")
    if mode is None:
        if len(implied) > 1:
            raise UsageError("give only one of heading (a section), start/end (lines) or lines (the tail)")
        return implied[0] if implied else "full"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    stray = [m for m in implied if m != mode]
    if stray:
        option = {"section": "heading", "lines": "start/end", "tail": "lines"}[stray[0]]
        raise UsageError(f"{option} goes with mode '{stray[0]}', not mode '{mode}'")
    return mode  # checked against MODES


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryGetRequest:
    """One MemoryGet read: whole (``full``) or by ``headers``, ``section``, ``tail`` or ``lines``.

    The mode defaults to what the options imply (``heading`` -> section, ``start``/``end`` ->
    lines, ``lines`` -> tail), else ``full``. ``expand`` lists an episode's exact events.
    Making one checks it (``UsageError`` for a malformed reference or options that contradict
    each other); whether the reference is the agent's to read is ``memory_get``'s question.
    """

    ref: str
    mode: str | None = None
    heading: str | None = None
    start: int | None = None
    end: int | None = None
    lines: int | None = None
    expand: bool = False
    max_chars: int = DEFAULT_MAX_CHARS
    parsed: Ref = field(init=False, repr=False, compare=False)
    """``ref`` parsed."""
    chosen: Mode = field(init=False, repr=False, compare=False)
    """The mode asked for or implied."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "parsed", parse_ref(self.ref))
        object.__setattr__(self, "chosen", _mode(self.mode, self.heading, self.start, self.end, self.lines))
        if not MIN_MAX_CHARS <= self.max_chars <= MAX_MAX_CHARS:
            raise UsageError(
                f"max_chars must be between {MIN_MAX_CHARS:,} and {MAX_MAX_CHARS:,}, not {self.max_chars:,}"
            )
        if self.expand and not isinstance(self.parsed, EpisodeRef):
            raise UsageError("expand applies to episode references only (it lists the events an episode covers)")

    def params(self) -> dict[str, Any]:
        """The request as the HTTP API's ``memory/get`` query parameters (as given, ``None`` left out)."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return {k: v for k, v in given.items() if v is not None}


def memory_get(store: Store, agent: AgentState, request: MemoryGetRequest) -> MemoryRead:
    """Read what ``request`` asks for as ``agent`` (``NotFoundError`` when it is not theirs)."""
    r = request
    doc = resolve(store, agent, r.parsed, expand=r.expand)
    if r.chosen != "full" or len(doc.text) > r.max_chars:  # a read by parts: lines it can select
        doc = dataclasses.replace(doc, text=wrap_long_lines(doc.text))
    selection = select(doc.text, r.chosen, heading=r.heading, start=r.start, end=r.end, lines=r.lines)
    if len(selection.text) > r.max_chars:
        return _too_large(doc, selection, r.chosen, r.max_chars)
    summary = f"{doc.ref}: {selection.description}, {len(selection.text):,} of {len(doc.text):,} characters"
    hints: tuple[NextCall, ...] = ()
    if isinstance(r.parsed, EpisodeRef) and not r.expand:
        hints = (NextCall({"ref": doc.ref, "expand": True}, "the exact events this episode covers"),)
    return MemoryRead(doc.ref, doc.kind, doc.title, selection.text, len(doc.text), summary, hints)


def wrap_long_lines(text: str) -> str:
    """``text`` with every line longer than ``WRAP_CHARS`` cut into lines of that length, and a
    closing note when any was; ``text`` itself otherwise."""
    lines = text.split("\n")
    if all(len(line) <= WRAP_CHARS for line in lines):
        return text
    out = [line[i : i + WRAP_CHARS] for line in lines for i in range(0, max(len(line), 1), WRAP_CHARS)]
    note = (
        f"[lines longer than {WRAP_CHARS:,} characters are cut into lines of {WRAP_CHARS:,} here, so that "
        "mode lines can read them a part at a time; the text itself has no such line breaks]"
    )
    return "\n".join([*out, note]) + "\n"


# --- reads over the cap -----------------------------------------------------------------------


def _fits_forward(sizes: list[int], first: int, last: int, cap: int) -> int | None:
    """The last line of the longest run from ``first`` that fits ``cap`` characters (1-based)."""
    used, end = 0, None
    for n in range(first, last + 1):
        used += sizes[n - 1]
        if used > cap:
            break
        end = n
    return end


def _fits_backward(sizes: list[int], first: int, last: int, cap: int) -> int:
    """How many lines at the end of ``first..last`` fit ``cap`` characters."""
    used, count = 0, 0
    for n in range(last, first - 1, -1):
        used += sizes[n - 1]
        if used > cap:
            break
        count += 1
    return count


def _too_large(doc: Document, sel: Selection, mode: Mode, cap: int) -> MemoryRead:
    """A read with no content: sizes, and the calls that would get the parts that fit."""
    lines = split_lines(doc.text)
    sizes = [len(line) for line in lines]
    whole = f"{doc.ref} is {len(doc.text):,} characters in {len(lines):,} lines"
    part = "" if sel.text == doc.text else f"; the {sel.description} is {len(sel.text):,} characters"
    facts = [f"{whole}{part}, more than max_chars={cap:,}, so nothing is returned"]
    # The parts of the selection: headings inside it, less those spanning all of it (a title, or
    # the selected section's own heading), at the shallowest level left.
    inside = [
        h
        for h in headings(doc.text)
        if sel.first_line <= h.line <= sel.last_line and not (h.line == sel.first_line and h.size >= len(sel.text))
    ]
    top = min((h.level for h in inside), default=0)
    children = [h for h in inside if h.level == top]
    if children:
        largest = sorted(children, key=lambda h: -h.size)[:6]
        facts.append(
            "largest sections: "
            + "; ".join(f"{h.text!r} ({h.size:,} chars, lines {h.line}-{h.end_line})" for h in largest)
        )
    if doc.parts:
        big = sorted(doc.parts, key=lambda p: -p.size)[:6]
        facts.append(
            f"{len(doc.parts)} events; the largest: " + "; ".join(f"{p.ref} {p.label} ({p.size:,} chars)" for p in big)
        )
    calls: list[NextCall] = []
    if len(sel.text) <= LARGE_READ_CHARS:
        calls.append(
            NextCall(
                {"ref": doc.ref, **_options(mode, sel), "max_chars": len(sel.text)},
                f"the same read with a larger cap: costs {len(sel.text):,} characters of your context",
            )
        )
    if mode != "headers" and headings(doc.text) and len(_headers_text(doc)) <= cap:
        calls.append(NextCall({"ref": doc.ref, "mode": "headers"}, "every heading with its line numbers and size"))
    for h in [h for h in children if h.size <= cap][:3]:
        calls.append(NextCall({"ref": doc.ref, "mode": "section", "heading": h.text}, f"{h.size:,} characters"))
    for p in sorted(doc.parts, key=lambda p: -p.size)[:3]:
        calls.append(NextCall({"ref": p.ref}, f"one event, {p.size:,} characters"))
    end = _fits_forward(sizes, sel.first_line, sel.last_line, cap) if mode != "headers" else None
    if mode == "headers":
        end = _fits_forward(sizes, 1, len(lines), cap)
        calls.append(NextCall({"ref": doc.ref, "mode": "tail", "lines": 40}, "the end of the text"))
    if end is not None:
        start = sel.first_line if mode != "headers" else 1
        calls.append(
            NextCall({"ref": doc.ref, "mode": "lines", "start": start, "end": end}, "the first part that fits")
        )
    if mode != "headers":
        count = _fits_backward(sizes, sel.first_line, sel.last_line, cap)
        if count and sel.last_line == len(lines):
            calls.append(NextCall({"ref": doc.ref, "mode": "tail", "lines": count}, "the last part that fits"))
        elif count:
            first = sel.last_line - count + 1
            calls.append(
                NextCall(
                    {"ref": doc.ref, "mode": "lines", "start": first, "end": sel.last_line}, "the last part that fits"
                )
            )
    calls.append(
        NextCall({"query": "<the words you are looking for>"}, "search for the part you need", "memory_search")
    )
    return MemoryRead(doc.ref, doc.kind, doc.title, None, len(doc.text), "; ".join(facts), tuple(calls))


def _options(mode: Mode, sel: Selection) -> dict[str, Any]:
    """The mode arguments that select ``sel`` again."""
    if mode == "section":
        return {"mode": "lines", "start": sel.first_line, "end": sel.last_line}
    if mode in ("lines", "tail"):
        return {"mode": "lines", "start": sel.first_line, "end": sel.last_line}
    return {"mode": mode}


def _headers_text(doc: Document) -> str:
    return select(doc.text, "headers").text
