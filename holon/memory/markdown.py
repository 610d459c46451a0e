"""Reading markdown by parts: headings with sizes, one section, the last lines, a line range.

Pure functions over text. Curated memory files and the documents MemoryGet renders (events,
episodes) are markdown, so one reader serves them all; it lets a model ask for exactly the part it
needs instead of a whole file.

Lines are split on ``\\n`` only (a ``\\r`` stays part of its line), so line numbers agree with what
an editor shows. Headings are ATX headings (``# ...`` to ``###### ...``) outside fenced code
blocks. A section runs from its heading to the next heading of the same or a higher level, so it
includes its subsections; a ``Part`` runs to the next heading of any level (``parts`` cuts a text
into them: what the search index stores a memory file as, and what an outline shows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from holon.errors import UsageError

__all__ = [
    "MODES",
    "Heading",
    "Mode",
    "Part",
    "Selection",
    "find_section",
    "headers",
    "heading_key",
    "headings",
    "line_range",
    "parts",
    "select",
    "split_lines",
    "tail",
]

Mode = Literal["headers", "section", "tail", "lines", "full"]
MODES: tuple[Mode, ...] = get_args(Mode)

_HEADING = re.compile(r"^(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"[ \t]+#+$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Heading:
    line: int
    """1-based line number of the heading."""
    level: int
    text: str
    end_line: int
    """Last line of the section (before the next heading of the same or a higher level)."""
    size: int
    """Characters of the section, heading and subsections included."""


@dataclass(frozen=True, slots=True)
class Selection:
    """A part of a text: the text itself, the lines it spans and a phrase saying what it is."""

    text: str
    first_line: int
    last_line: int
    description: str


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept, so ``"".join(split_lines(t)) == t``."""
    if not text:
        return []
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _parse_heading(line: str) -> tuple[int, str] | None:
    m = _HEADING.match(line.rstrip("\n").rstrip("\r"))
    if m is None:
        return None
    title = _CLOSING_HASHES.sub("", m.group(2) or "").strip()
    return len(m.group(1)), title


def headings(text: str) -> list[Heading]:
    """Every heading with the line span and size of its section."""
    lines = split_lines(text)
    found: list[tuple[int, int, str]] = []
    fence: str | None = None
    for i, line in enumerate(lines, start=1):
        m = _FENCE.match(line)
        if m is not None:
            marker = m.group(1)[0] * 3
            fence = None if fence == marker else (fence or marker)
            continue
        if fence is None and (parsed := _parse_heading(line)) is not None:
            found.append((i, *parsed))
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = []
    for k, (line_no, level, title) in enumerate(found):
        end = next((n - 1 for n, lv, _ in found[k + 1 :] if lv <= level), len(lines))
        out.append(Heading(line_no, level, title, end, starts[end] - starts[line_no - 1]))
    return out


@dataclass(frozen=True, slots=True)
class Part:
    """A text from one heading to the next of any level (or the text before the first heading)."""

    heading: Heading | None
    """``None`` for the text before the first heading."""
    line: str
    """The heading's line as written, without its line end ("" before the first heading)."""
    body: tuple[str, ...]
    """The lines under the heading, without their line ends (fenced code included)."""

    @property
    def title(self) -> str:
        return self.heading.text if self.heading is not None else ""


def _bare(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def parts(text: str) -> list[Part]:
    """``text`` cut at every heading: the part before the first heading (possibly empty), then one
    part per heading. Joined again with line ends they give back every line of ``text``."""
    lines = [_bare(line) for line in split_lines(text)]
    found = headings(text)
    starts = [h.line for h in found]
    out = [Part(None, "", tuple(lines[: starts[0] - 1 if starts else len(lines)]))]
    for k, h in enumerate(found):
        end = starts[k + 1] - 1 if k + 1 < len(starts) else len(lines)
        out.append(Part(h, lines[h.line - 1], tuple(lines[h.line : end])))
    return out


def headers(text: str) -> str:
    """The outline: one line per heading with its line number and its section's size."""
    rows = [
        f"L{h.line} {'#' * h.level} {h.text} ({h.size:,} chars, lines {h.line}-{h.end_line})" for h in headings(text)
    ]
    return "\n".join(rows) + "\n" if rows else ""


def heading_key(s: str) -> str:
    """A heading as it is looked up: leading ``#`` s dropped, white space folded, case folded."""
    return " ".join(s.lstrip("#").split()).casefold()


def find_section(text: str, heading: str) -> Heading:
    """The section whose heading is ``heading`` (case-insensitive; a unique partial match also does)."""
    want = heading_key(heading)
    if not want:
        raise UsageError("heading is empty: give the text of a heading (mode=headers lists them)")
    all_headings = headings(text)
    exact = [h for h in all_headings if heading_key(h.text) == want]
    if exact:
        return exact[0]
    partial = [h for h in all_headings if want in heading_key(h.text)]
    if len(partial) == 1:
        return partial[0]
    if partial:
        names = "; ".join(repr(h.text) for h in partial[:8])
        raise UsageError(f"heading {heading!r} matches {len(partial)} headings ({names}); give one of them exactly")
    known = "; ".join(repr(h.text) for h in all_headings[:12]) or "none"
    raise UsageError(f"no heading {heading!r}; headings: {known}")


def line_range(text: str, start: int, end: int) -> Selection:
    """Lines ``start`` to ``end`` (1-based, inclusive; ``end`` past the last line stops there)."""
    lines = split_lines(text)
    if start < 1 or end < start:
        raise UsageError(f"bad line range {start}-{end}: start at 1 or more, end at start or more")
    if start > len(lines):
        raise UsageError(f"line {start} is past the end: the text has {len(lines)} lines")
    last = min(end, len(lines))
    return Selection("".join(lines[start - 1 : last]), start, last, f"lines {start}-{last} of {len(lines)}")


def tail(text: str, n: int) -> Selection:
    """The last ``n`` lines."""
    if n < 1:
        raise UsageError(f"lines must be 1 or more, not {n}")
    lines = split_lines(text)
    first = max(1, len(lines) - n + 1)
    return Selection("".join(lines[first - 1 :]), first, len(lines), f"last {len(lines) - first + 1} lines")


def select(
    text: str,
    mode: Mode,
    *,
    heading: str | None = None,
    start: int | None = None,
    end: int | None = None,
    lines: int | None = None,
) -> Selection:
    """The part of ``text`` a read in ``mode`` returns. Refuses options that do not fit the mode."""
    n_lines = len(split_lines(text))
    if mode == "full":
        return Selection(text, 1, n_lines, "full text")
    if mode == "headers":
        return Selection(headers(text), 1, n_lines, "headings with line numbers and section sizes")
    if mode == "section":
        if heading is None:
            raise UsageError("mode 'section' needs a heading (mode=headers lists them)")
        h = find_section(text, heading)
        body = line_range(text, h.line, h.end_line).text
        return Selection(body, h.line, h.end_line, f"section {h.text!r} (lines {h.line}-{h.end_line})")
    if mode == "tail":
        return tail(text, lines if lines is not None else 40)
    if mode == "lines":
        if start is None:
            raise UsageError("mode 'lines' needs start (and end; 1-based, inclusive)")
        return line_range(text, start, end if end is not None else start + 99)
    raise UsageError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
