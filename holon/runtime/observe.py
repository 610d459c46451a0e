"""What a rendered prompt shows of the ledger: observed from the text, attributed by the manifest.

The scenario verdict used to trust each section's declared refs: a section citing ``event:42``
counted as showing it, an episode summary cited only its own id, and a work item or a wait was
never reported at all. Here every known event's text is looked for in the text each section
actually rendered (``Assembly.chosen``), so a verdict says what a model would read.

An event is **shown** by a section when the section's text contains its text, whole or as a
substantial fragment (a shortened rendering keeps the head; a summary quotes a part):

* texts are compared as token sequences: case folded, punctuation and whitespace dropped, a CJK
  character one token (CJK has no spaces), a run of letters or digits one token otherwise;
* whole: the text's token sequence occurs in the section's;
* head: the first ``HEAD_CHARS`` characters' worth of its tokens occur in a row (a shortened
  rendering, an episode excerpt, a capped reply);
* most: at least ``SHINGLE_SHARE`` of its ``SHINGLE``-token windows occur in the section (a
  quoted part), for a text of at least ``MOST_MIN`` windows (a shorter one shares half its
  windows with any sentence on the same subject: "Understood: PostgreSQL for the orders
  service." is not shown by "we will use PostgreSQL for the orders service");
* a text of fewer than ``SHINGLE`` tokens ("yes", "好的") is shown only by a line of its own:
  its tokens would be found inside any sentence.

How it is shown: ``text`` by a section that renders evidence or state (turns, the input, the
work item, working memory, tasks and waits...), ``summary`` by a section that derives text from
it: an episode whose ledger range holds the event, or a decisions / key-point section.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from holon.context.assembler import Assembly, Rendering

__all__ = [
    "HEAD_CHARS",
    "MOST_MIN",
    "SHINGLE",
    "SHINGLE_SHARE",
    "Seen",
    "observe",
    "section_text",
    "shows",
    "tokens",
]

How = Literal["text", "summary"]
HEAD_CHARS = 30
"""A head this long (a CJK character counts two) is a substantial fragment of a longer text."""
SHINGLE = 4
SHINGLE_SHARE = 0.5
MOST_MIN = 8
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_VERBATIM = ("input", "resumed")
_VERBATIM_PREFIX = ("turn:", "round:")
_SUPERSEDED = re.compile(r"supersed|replaced by|no longer (applies|holds|valid)|取代|作废|已过时|不再适用", re.I)


@functools.lru_cache(maxsize=20_000)
def tokens(text: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(text.casefold()))


def _joined(toks: Iterable[str]) -> str:
    return " " + " ".join(toks) + " "


def _shingles(toks: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {toks[i : i + SHINGLE] for i in range(len(toks) - SHINGLE + 1)}


def _head(toks: tuple[str, ...]) -> tuple[str, ...] | None:
    """The shortest prefix worth ``HEAD_CHARS``; None when that is the whole text."""
    size = 0
    for i, t in enumerate(toks):
        size += sum(2 if _CJK.match(c) else 1 for c in t) + 1
        if size >= HEAD_CHARS:
            return toks[: i + 1] if i + 1 < len(toks) else None
    return None


@dataclass(frozen=True, slots=True)
class _Haystack:
    """A section's rendered text, prepared once for every event looked up in it."""

    lines: tuple[str, ...]
    line_tokens: frozenset[tuple[str, ...]]
    joined: str
    shingles: frozenset[tuple[str, ...]]

    @classmethod
    def of(cls, text: str) -> _Haystack:
        lines = tuple(line for line in text.splitlines() if line.strip())
        toks = tokens(text)
        return cls(lines, frozenset(tokens(line) for line in lines), _joined(toks), frozenset(_shingles(toks)))


@dataclass(frozen=True, slots=True)
class _Needle:
    """An event's text, prepared once for every section it is looked for in."""

    toks: tuple[str, ...]
    whole: str
    head: str | None
    shingles: frozenset[tuple[str, ...]]


@functools.lru_cache(maxsize=20_000)
def _needle(text: str) -> _Needle:
    toks = tokens(text)
    head = _head(toks)
    return _Needle(toks, _joined(toks), _joined(head) if head is not None else None, frozenset(_shingles(toks)))


def shows(text: str, haystack: str | _Haystack) -> bool:
    """Whether ``haystack`` shows ``text`` whole or as a substantial fragment (module docstring)."""
    hay = haystack if isinstance(haystack, _Haystack) else _Haystack.of(haystack)
    n = _needle(text)
    if not n.toks:
        return False
    if len(n.toks) < SHINGLE:
        return n.toks in hay.line_tokens
    hit = len(n.shingles & hay.shingles)
    if hit == len(n.shingles) and n.whole in hay.joined:
        return True
    if len(n.shingles) >= MOST_MIN and hit >= SHINGLE_SHARE * len(n.shingles):
        return True
    return hit > 0 and n.head is not None and n.head in hay.joined


def _marked_superseded(text: str, hay: _Haystack) -> bool:
    """Whether every line of ``hay`` showing ``text`` says it was superseded."""
    showing = [line for line in hay.lines if shows(text, line)]
    return bool(showing) and all(_SUPERSEDED.search(line) for line in showing)


def section_text(r: Rendering) -> str:
    """Everything a rendering puts in front of the model, as one text."""
    parts = [r.text] if r.text else []
    for m in r.messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        for call in m.get("tool_calls") or ():
            parts.append(str(call.get("function", {}).get("arguments", "")))
    return "\n".join(parts)


def _summary_section(key: str) -> bool:
    return key.startswith("episode:") or any(w in key for w in ("decision", "key_point", "summary"))


def _verbatim(key: str) -> bool:
    return key in _VERBATIM or key.startswith(_VERBATIM_PREFIX)


@dataclass(frozen=True, slots=True)
class Seen:
    """Where the prompt shows one event: every section showing it (prompt order) and how."""

    seq: int
    places: tuple[tuple[str, How], ...]
    marked_superseded: bool
    """Every place that is not a verbatim turn says the event was superseded."""

    @property
    def shown(self) -> bool:
        return bool(self.places)

    @property
    def how(self) -> How | None:
        if not self.places:
            return None
        return "text" if any(h == "text" for _k, h in self.places) else "summary"

    @property
    def section(self) -> str | None:
        if not self.places:
            return None
        return next((k for k, h in self.places if h == self.how), None)

    def to_json(self) -> dict[str, Any]:
        return {"shown": self.shown, "how": self.how, "section": self.section}


def observe(assembly: Assembly, texts: Mapping[int, str], episodes: Mapping[str, tuple[int, int]]) -> dict[int, Seen]:
    """For each event (seq -> its text), the sections of ``assembly`` that show it.

    ``episodes`` maps an episode id to its ledger range (``seq_start``, ``seq_end``): an episode
    section counts only for the events in its range."""
    hays = [
        (key, _Haystack.of(section_text(r)))
        for key, r in ((s.key, assembly.chosen.get(s.key)) for s in assembly.manifest.sections)
        if r is not None
    ]
    # Which sections hold each shingle and each line: a text is looked for only where one of its
    # shingles (or, for a short text, its line) is.
    by_shingle: dict[tuple[str, ...], set[int]] = {}
    by_line: dict[tuple[str, ...], set[int]] = {}
    for i, (_key, hay) in enumerate(hays):
        for sh in hay.shingles:
            by_shingle.setdefault(sh, set()).add(i)
        for line in hay.line_tokens:
            by_line.setdefault(line, set()).add(i)
    out: dict[int, Seen] = {}
    for seq, text in texts.items():
        places: list[tuple[str, How]] = []
        marked = True
        n = _needle(text)
        found: set[int] = set(by_line.get(n.toks, ())) if len(n.toks) < SHINGLE else set()
        for sh in n.shingles:
            found |= by_shingle.get(sh, set())
        for key, hay in (hays[i] for i in sorted(found)):
            if key.startswith("episode:"):
                span = episodes.get(key.removeprefix("episode:"))
                if span is None or not span[0] <= seq <= span[1]:
                    continue
            if not shows(text, hay):
                continue
            places.append((key, "summary" if _summary_section(key) else "text"))
            if not _verbatim(key) and not _marked_superseded(text, hay):
                marked = False
        out[seq] = Seen(seq, tuple(places), marked and bool(places))
    return out
