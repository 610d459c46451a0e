"""Page 3's diff: a turn's prompt against the previous turn's, message by message, line by line.

The prompt holon sends is the assembled sections in a fixed order (``holon.context.assembler``):
the stable sections as one system message, the context sections as a second, then the history
and the turn's own messages. So the messages are the units that stay or change between turns: the
leading run of equal messages is the stable prefix a provider's prompt cache reuses, and within a
message that changed, a line diff (``difflib``) says what did. Messages are aligned with
``difflib.SequenceMatcher`` over their canonical JSON, so a history message that moved along keeps
matching its earlier self. Pure functions of the two prompts; the template only shows the result.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["MAX_LINES", "Block", "Line", "ToolChange", "diff_prompts", "diff_tools", "message_text"]

MAX_LINES = 400
"""Diff lines shown per message (a whole new history can be long); the rest is counted."""
CONTEXT = 2
"""Unchanged lines shown around each change."""

LineOp = Literal["same", "added", "removed", "gap"]
BlockKind = Literal["same", "changed", "added", "removed"]


@dataclass(frozen=True, slots=True)
class Line:
    op: LineOp
    text: str


@dataclass(frozen=True, slots=True)
class Block:
    """One message of the new prompt (or one the previous prompt had and this one lacks)."""

    kind: BlockKind
    role: str
    index: int | None
    """Its position in this turn's prompt (``None``: removed)."""
    before: int | None
    """Its position in the previous turn's prompt (``None``: added)."""
    stable: bool = False
    """Part of the stable prefix: this and every message before it equal the previous prompt's."""
    chars: int = 0
    lines: list[Line] = field(default_factory=list)
    hidden: int = 0
    """Diff lines not shown (beyond ``MAX_LINES``)."""

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.op == "added")

    @property
    def removed(self) -> int:
        return sum(1 for line in self.lines if line.op == "removed")


def message_text(message: dict[str, Any]) -> str:
    """A message as the diff compares it: its text, then each tool call (name and arguments)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    parts = [str(content or "")]
    for call in message.get("tool_calls") or ():
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        parts.append(f"[tool call {fn.get('name', '?')}] {fn.get('arguments', '')}")
    if message.get("tool_call_id"):
        parts.insert(0, f"[result of {message['tool_call_id']}]")
    return "\n".join(p for p in parts if p)


def _key(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)


def _lines(before: str, now: str) -> tuple[list[Line], int]:
    """The line diff of one message, unchanged runs cut to ``CONTEXT`` lines around each change."""
    a, b = before.splitlines(), now.splitlines()
    out: list[Line] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(CONTEXT):
        if out:
            out.append(Line("gap", "…"))
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                out += [Line("same", t) for t in a[i1:i2]]
            if op in ("delete", "replace"):
                out += [Line("removed", t) for t in a[i1:i2]]
            if op in ("insert", "replace"):
                out += [Line("added", t) for t in b[j1:j2]]
    return out[:MAX_LINES], max(0, len(out) - MAX_LINES)


def _whole(op: LineOp, text: str) -> tuple[list[Line], int]:
    lines = [Line(op, t) for t in text.splitlines()]
    return lines[:MAX_LINES], max(0, len(lines) - MAX_LINES)


def diff_prompts(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[Block]:
    """Every message of ``now`` in order, each ``same``, ``changed`` (with its line diff against
    the message it replaced) or ``added``, and the messages of ``before`` that are gone
    (``removed``) where they were. The leading ``same`` run is marked ``stable``."""
    keys_now, keys_before = [_key(m) for m in now], [_key(m) for m in before]
    blocks: list[Block] = []
    matcher = difflib.SequenceMatcher(None, keys_before, keys_now, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for k in range(j2 - j1):
                m = now[j1 + k]
                blocks.append(Block("same", str(m.get("role", "?")), j1 + k, i1 + k, chars=len(message_text(m))))
            continue
        pairs = min(i2 - i1, j2 - j1) if op == "replace" else 0
        for k in range(pairs):  # the k-th old message became the k-th new one
            m, old = now[j1 + k], before[i1 + k]
            lines, hidden = _lines(message_text(old), message_text(m))
            blocks.append(Block("changed", str(m.get("role", "?")), j1 + k, i1 + k, chars=len(message_text(m)),
                                lines=lines, hidden=hidden))  # fmt: skip
        for k in range(i1 + pairs, i2):
            lines, hidden = _whole("removed", message_text(before[k]))
            blocks.append(Block("removed", str(before[k].get("role", "?")), None, k, lines=lines, hidden=hidden))
        for k in range(j1 + pairs, j2):
            text = message_text(now[k])
            lines, hidden = _whole("added", text)
            blocks.append(Block("added", str(now[k].get("role", "?")), k, None, chars=len(text), lines=lines,
                                hidden=hidden))  # fmt: skip
    stable = True
    for i, b in enumerate(blocks):
        stable = stable and b.kind == "same" and b.index == i
        if stable:
            blocks[i] = Block("same", b.role, b.index, b.before, stable=True, chars=b.chars)
    return blocks


@dataclass(frozen=True, slots=True)
class ToolChange:
    """A tool as sent this turn: its name, its schema as sent (pretty JSON) and how it compares
    with the previous turn's (``same``, ``changed``, ``added``; ``removed``: sent then, not now)."""

    name: str
    kind: BlockKind
    schema: str


def _tool_name(tool: dict[str, Any]) -> str:
    fn = tool.get("function")
    return str(fn.get("name") if isinstance(fn, dict) else tool.get("name", "?"))


def diff_tools(now: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> list[ToolChange]:
    """The tools sent (in the order sent) and the ones the previous turn sent that are gone;
    ``before`` ``None``: nothing to compare with (all ``same``)."""
    old = {_tool_name(t): _key(t) for t in before or []}
    out = []
    for tool in now:
        name = _tool_name(tool)
        kind: BlockKind = (
            "same" if before is None or old.get(name) == _key(tool) else "changed" if name in old else "added"
        )
        out.append(ToolChange(name, kind, json.dumps(tool, indent=2, sort_keys=True, ensure_ascii=False)))
    sent = {c.name for c in out}
    out += [ToolChange(n, "removed", "") for n in old if n not in sent]
    return out
