"""The budgeted assembler: sections in, messages and a manifest out. A pure function.

Each ``Section`` offers renderings from richest to leanest (``full``, then optionally
``compact``); omitting it is the last resort. Sections have a tier that fixes their place in the
prompt (``stable`` first, then ``agent``, then ``turn``), so the prompt's prefix stays the same
from turn to turn and providers can cache it.

**One budget** covers everything the request contains: system text, tool schemas, history, the
input, the current turn's rounds, and the tokens reserved for the reply.

Degradation follows fixed sequences of steps computed from the sections, never from the budget
(compact sections lowest priority first, then omit non-pinned ones lowest priority first, then a
pinned section's ``last_resort`` renderings, such as a long input shown only by reference):

1. The **stable tier** (system contract, AGENTS.md, memory files, tools) takes the first prefix
   of its sequence that fits in ``STABLE_SHARE`` of the budget. That choice depends on the budget
   alone, not on how long the conversation is, so the prompt's prefix stays byte-identical from
   turn to turn and providers can cache it.
2. Everything else degrades along its own sequence until it fits the **allowance**: the budget
   minus the stable tier, capped by what the next larger stable choice left. The cap makes the
   allowance grow with the budget, so a smaller budget runs a longer prefix of the same sequences
   and can never include something a larger budget dropped (monotone degradation).
3. Only if the pinned minimum still does not fit, the stable tier degrades further; if even that
   fails, ``ContextOverflow`` says by how much, and no request is sent.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from holon.errors import HolonError

__all__ = [
    "Assembly",
    "Budget",
    "ContextOverflow",
    "Manifest",
    "ManifestSection",
    "Part",
    "Rendering",
    "Section",
    "STABLE_SHARE",
    "assemble",
]

Tier = Literal["stable", "agent", "turn"]
Slot = Literal["system", "context", "history", "input", "rounds"]
Form = Literal["full", "compact", "omitted"]

_TIER_RANK = {"stable": 0, "agent": 1, "turn": 2}
_SLOT_RANK = {"system": 0, "context": 1, "history": 2, "input": 3, "rounds": 4}
_SORTED = orjson.OPT_SORT_KEYS


class ContextOverflow(HolonError):
    """Even the pinned minimum of a prompt does not fit the budget."""

    exit_code = 7


@dataclass(frozen=True, slots=True)
class Part:
    """A line of a text rendering that quotes or derives from ledger events (``refs``).

    When every one of its refs is already shown by another section of the prompt (a past turn,
    the input, a higher-priority summary), the part is left out at layout: the same evidence is
    never shown twice, and a summary stands in exactly for what the budget cut. A section whose
    ``essential`` parts are all left out is left out whole.
    """

    text: str
    refs: tuple[str, ...] = ()
    essential: bool = True


@dataclass(frozen=True, slots=True)
class Rendering:
    form: Literal["full", "compact"]
    tokens: int
    """Everything this rendering adds to the request, per-message overhead included."""
    text: str = ""
    """For the system and context slots: text joined into one system message."""
    messages: tuple[dict[str, Any], ...] = ()
    """For the history, input and rounds slots: chat messages."""
    tools: tuple[dict[str, Any], ...] = ()
    """Tool schemas (the tools section only)."""
    refs: tuple[str, ...] = ()
    """Ledger references this rendering carries (``event:42``, ``episode:ep_..``, ``file:memory/self.md``)."""
    parts: tuple[Part, ...] = ()
    """For a text rendering made of lines that quote events: its lines (``text`` is them joined)."""


@dataclass(frozen=True, slots=True)
class Section:
    key: str
    tier: Tier
    slot: Slot
    order: int
    """Position within its slot (older history first)."""
    priority: int
    """Higher survives longer. Ties break on ``key``, so the sequence is deterministic."""
    renderings: tuple[Rendering, ...]
    pinned: bool = False
    """Never omitted (may still be compacted)."""
    reason: str = ""
    """Why the section is a candidate, or why it is excluded (shown in the manifest)."""
    excluded: bool = False
    """Not a candidate at all (e.g. evidence of a paused work item): listed in the manifest only."""
    last_resort: int = 0
    """How many of a pinned section's leanest renderings are used only once every non-pinned
    section is omitted (the input by reference: a preview is worth less than any context)."""


@dataclass(frozen=True, slots=True)
class Budget:
    context_window: int
    output_reserve: int
    frame_tokens: int = 8
    """Fixed cost of the request itself (reply priming)."""

    @property
    def limit(self) -> int:
        return self.context_window - self.output_reserve - self.frame_tokens


@dataclass(frozen=True, slots=True)
class ManifestSection:
    """What became of one section: its representation, tokens, the reason and its references."""

    key: str
    tier: Tier
    representation: Form
    requested_tokens: int
    """Tokens of its full rendering."""
    allocated_tokens: int
    """Tokens of the rendering used (0 when omitted)."""
    reason: str
    excluded: bool
    refs_included: tuple[str, ...]
    refs_omitted: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "tier": self.tier,
            "representation": self.representation,
            "requested_tokens": self.requested_tokens,
            "allocated_tokens": self.allocated_tokens,
            "reason": self.reason,
            "excluded": self.excluded,
            "refs_included": list(self.refs_included),
            "refs_omitted": list(self.refs_omitted),
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one request contains and why; recorded (as ``to_json``) in ``context.assembled``."""

    context_window: int
    output_reserve: int
    limit: int
    used_tokens: int
    digest: str
    """sha256 of the messages and tools sent."""
    sections: tuple[ManifestSection, ...]
    """In prompt order, excluded sections included."""
    sections_json: tuple[bytes, ...] = field(default=(), compare=False, repr=False)
    """Each section's canonical JSON (``_SORTED``), when the assembler kept it: ``json_bytes``
    joins them instead of encoding every section again."""

    def to_json(self) -> dict[str, Any]:
        """The recorded form. Its layout is stored in the ledger: keep it stable."""
        return {
            "budget": {
                "context_window": self.context_window,
                "output_reserve": self.output_reserve,
                "limit": self.limit,
            },
            "used_tokens": self.used_tokens,
            "digest": self.digest,
            "sections": [s.to_json() for s in self.sections],
        }

    def json_bytes(self) -> bytes:
        """``to_json`` as canonical JSON (sorted keys, no whitespace): the same bytes as
        ``orjson.dumps(self.to_json(), option=OPT_SORT_KEYS)``, built from the sections' kept
        JSON (a manifest lists ~100 sections and most are the same from round to round)."""
        if len(self.sections_json) != len(self.sections):
            return orjson.dumps(self.to_json(), option=_SORTED)
        return self._framed(b",".join(self.sections_json))

    def _framed(self, sections: bytes) -> bytes:
        """The manifest's canonical JSON around its sections' joined JSON."""
        budget = orjson.dumps(
            {"context_window": self.context_window, "limit": self.limit, "output_reserve": self.output_reserve},
            option=_SORTED,
        )
        return b"".join(
            (
                b'{"budget":',
                budget,
                b',"digest":',
                orjson.dumps(self.digest),
                b',"sections":[',
                sections,
                b'],"used_tokens":',
                orjson.dumps(self.used_tokens),
                b"}",
            )
        )

    def json_bytes_against(self, base: Manifest) -> bytes:
        """``json_bytes`` with each section entry that ``base`` has too written as its index in
        ``base.sections`` (``holon.context.manifests.whole_manifest`` reads it back whole)."""
        if len(self.sections_json) != len(self.sections) or len(base.sections_json) != len(base.sections):
            return self.json_bytes()
        index = {entry: i for i, entry in enumerate(base.sections_json)}
        shown = [entry if (i := index.get(entry)) is None else str(i).encode() for entry in self.sections_json]
        return self._framed(b",".join(shown))

    def summary(self) -> dict[str, int]:
        """Counts for ``context.assembled``'s summary: sections by representation, references."""
        counts = {"full": 0, "compact": 0, "omitted": 0}
        excluded = included = omitted = 0
        for s in self.sections:  # one pass (twice per turn, ~100 sections)
            if s.excluded:
                excluded += 1
            else:
                counts[s.representation] += 1
            included += len(s.refs_included)
            omitted += len(s.refs_omitted)
        return {**counts, "excluded": excluded, "refs_included": included, "refs_omitted": omitted}


@dataclass(frozen=True, slots=True)
class Assembly:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    manifest: Manifest
    used_tokens: int
    stable_prefix: str
    """The bytes of the stable tier, for prefix-stability checks and cache markers."""
    chosen: dict[str, Rendering] = field(default_factory=dict)
    """Section key -> the rendering used, for every section in the prompt (omitted and excluded
    ones are absent). Not part of the manifest: it lets a reader attribute each piece of prompt
    text to its section (the scenario verdict observes what the prompt shows, not what was declared)."""
    messages_json: bytes = b""
    """``messages`` as canonical JSON (sorted keys), encoded once for the digest and the record."""
    kept: _Kept | None = field(default=None, compare=False, repr=False)
    """What this layout was made of and made, for the next round's (``assemble(previous=)``)."""

    @property
    def digest(self) -> str:
        return self.manifest.digest

    @property
    def tools_json(self) -> bytes:
        """``tools`` as canonical JSON (sorted keys): the layout's, encoded once for the digest."""
        return self.kept.tools_json if self.kept is not None else orjson.dumps(self.tools, option=_SORTED)


@dataclass
class _Plan:
    sections: list[Section]
    level: dict[str, int] = field(default_factory=dict)
    """Section key -> index into its renderings, ``len(renderings)`` meaning omitted, for the
    sections degradation moved: every other one is at its first (an excluded one: omitted)."""

    def at(self, s: Section) -> int:
        i = self.level.get(s.key)
        if i is None:
            return len(s.renderings) if s.excluded else 0
        return i

    def tokens(self, s: Section) -> int:
        i = self.level.get(s.key)  # ``at``, inline
        if i is None:
            i = len(s.renderings) if s.excluded else 0
        return s.renderings[i].tokens if i < len(s.renderings) else 0


STABLE_SHARE = 0.6
"""The stable tier may use at most this share of the budget before it is compacted."""


def _steps(sections: list[Section]) -> list[tuple[Section, int]]:
    """A fixed degradation sequence: (section, new level)."""
    by_priority = sorted((s for s in sections if not s.excluded), key=lambda s: (s.priority, s.key))
    compact: list[tuple[Section, int]] = []
    omit: list[tuple[Section, int]] = []
    late: list[tuple[Section, int]] = []
    for s in by_priority:  # one pass, three sequences (in this order)
        n = len(s.renderings)
        if n > 1:
            keep = n - (s.last_resort if s.pinned else 0)
            compact += [(s, i) for i in range(1, keep)]
            late += [(s, i) for i in range(max(1, keep), n)]
        if not s.pinned:
            omit.append((s, n))
    return compact + omit + late


def _run(
    plan: _Plan, steps: list[tuple[Section, int]], total: int, limit: float, reasons: dict[str, str]
) -> tuple[int, int]:
    """Apply steps until ``total <= limit``; returns (steps applied, new total)."""
    done = 0
    for section, level in steps:
        if total <= limit:
            break
        before = plan.tokens(section)
        plan.level[section.key] = level
        total += plan.tokens(section) - before
        omitted = level >= len(section.renderings)
        reasons[section.key] = "omitted to fit the budget" if omitted else "compacted to fit the budget"
        done += 1
    return done, total


def _stable_prefix_totals(plan: _Plan, stable: list[Section], steps: list[tuple[Section, int]]) -> list[int]:
    """The stable tier's total after each prefix of its degradation sequence (plan left untouched)."""
    saved = dict(plan.level)
    totals = [sum(plan.tokens(s) for s in stable)]
    for section, level in steps:
        before = plan.tokens(section)
        plan.level[section.key] = level
        totals.append(totals[-1] + plan.tokens(section) - before)
    plan.level = saved
    return totals


def assemble(sections: list[Section], budget: Budget, *, previous: Assembly | None = None) -> Assembly:
    """The prompt of ``sections`` within ``budget``. ``previous`` (the same turn's last round's
    assembly) changes nothing in the result: the layout reuses what it finds unchanged there (the
    same section objects at the same levels and reasons), and lays out only the rest again."""
    by_key = {s.key: s for s in sections}
    if len(by_key) != len(sections):
        raise ValueError("section keys must be unique")
    plan = _Plan(sections)
    reasons: dict[str, str] = {}
    stable = [s for s in sections if s.tier == "stable"]
    rest = [s for s in sections if s.tier != "stable"]
    # 1. The stable tier, chosen from the budget alone (so the last round's choice holds when its
    # sections are the same objects and the budget the same).
    last = previous.kept.stable if previous is not None and previous.kept is not None else None
    if last is not None and last.limit == budget.limit and _same_objects(last.sections, stable):
        choice = last
    else:
        choice = _choose_stable(plan, stable, budget)
    plan.level.update(choice.level)
    reasons.update(choice.reasons)
    k, applied, stable_total, stable_steps = choice.k, choice.applied, choice.total, choice.steps
    allowance = budget.limit - stable_total
    if k > 0:
        allowance = min(allowance, int(choice.before * (1 / STABLE_SHARE - 1)))
    # 2. Everything else, within its allowance (its levels are all still 0).
    rest_total = sum(s.renderings[0].tokens for s in rest if not s.excluded)
    if rest_total > allowance:
        _done, rest_total = _run(plan, _steps(rest), rest_total, allowance, reasons)
    total = stable_total + rest_total
    # 3. Last resort: a leaner stable tier for an oversized pinned minimum.
    if total > budget.limit:
        if stable_steps is None:
            stable_steps = _steps(stable)
        _more, total = _run(plan, stable_steps[applied:], total, budget.limit, reasons)
    if total > budget.limit:
        raise ContextOverflow(
            f"the pinned minimum of this prompt is {total} tokens but the budget allows {budget.limit} "
            f"(context window {budget.context_window} minus {budget.output_reserve} reserved for the reply)"
        )
    made = None
    if previous is not None and previous.kept is not None:
        made = _relayout(plan, budget, total, reasons, previous.kept, by_key)
    if made is None:
        made = _layout(plan, budget, total, reasons, by_key)
    assert made.kept is not None
    made.kept.stable = choice
    return made


@dataclass(slots=True)
class _StableChoice:
    """The stable tier's degradation for one budget: a function of its sections and the budget."""

    sections: list[Section]
    limit: int
    k: int
    """Steps of its sequence taken to fit ``STABLE_SHARE`` of the budget."""
    applied: int
    total: int
    before: int
    """Its total with one step fewer (what caps the rest's allowance when ``k > 0``)."""
    level: dict[str, int]
    reasons: dict[str, str]
    steps: list[tuple[Section, int]] | None
    """Its degradation sequence, when it was built (``None``: it fits whole)."""


def _same_objects(a: list[Section], b: list[Section]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _choose_stable(plan: _Plan, stable: list[Section], budget: Budget) -> _StableChoice:
    """The stable tier's choice: the first prefix of its sequence that fits ``STABLE_SHARE`` of the
    budget. A degradation sequence is built only when the tier does not fit as it is (most prompts
    fit whole, and a sequence whose first step is never taken changes nothing; issue 18, step 6)."""
    whole = sum(s.renderings[0].tokens for s in stable if not s.excluded)  # every level is 0 here
    if whole <= STABLE_SHARE * budget.limit:  # the first prefix fits: ``k`` is 0
        return _StableChoice(stable, budget.limit, 0, 0, whole, whole, {}, {}, None)
    steps = _steps(stable)
    totals = _stable_prefix_totals(plan, stable, steps)
    k = next((i for i, t in enumerate(totals) if t <= STABLE_SHARE * budget.limit), len(totals) - 1)
    moved = _Plan(stable)
    reasons: dict[str, str] = {}
    applied, total = _run(moved, steps[:k], totals[0], -1, reasons)
    return _StableChoice(
        stable, budget.limit, k, applied, total, totals[k - 1] if k else whole, moved.level, reasons, steps
    )


def _chosen(plan: _Plan) -> dict[str, Rendering]:
    out = {}
    moved = plan.level
    for s in plan.sections:
        level = moved.get(s.key)
        if level is None:
            if not s.excluded:
                out[s.key] = s.renderings[0]
        elif level < len(s.renderings):
            out[s.key] = s.renderings[level]
    return out


def _deduplicate(plan: _Plan, chosen: dict[str, Rendering], reasons: dict[str, str]) -> None:
    """Leave out the parts of text renderings whose events other sections already show.

    Messages (past turns, the input, this turn's rounds) show their events verbatim, so they come
    first; text sections with parts follow, highest priority first, each seeing what the ones
    before it showed. A rendering that keeps only some parts is rebuilt from them; tokens stay
    counted at the rendering's full size (an upper bound: the budget still holds)."""
    shown = {ref for s in plan.sections if s.key in chosen and not chosen[s.key].parts for ref in chosen[s.key].refs}
    with_parts = sorted(
        (s for s in plan.sections if s.key in chosen and chosen[s.key].parts), key=lambda s: (-s.priority, s.key)
    )
    for s in with_parts:
        r = chosen[s.key]
        if all(shown.isdisjoint(p.refs) for p in r.parts):  # nothing to leave out: kept whole
            shown.update(r.refs)
            continue
        kept = tuple(
            Part(p.text, tuple(x for x in p.refs if x not in shown), p.essential)
            for p in r.parts
            if not (p.refs and set(p.refs) <= shown)
        )  # a kept part cites only what no other section shows
        if kept == r.parts:
            shown.update(r.refs)
            continue
        if not any(p.essential for p in kept):
            del chosen[s.key]
            reasons[s.key] = "left out: other sections of this prompt show its evidence"
            continue
        refs = tuple(sorted({ref for p in kept for ref in p.refs}))
        chosen[s.key] = replace(r, text="\n".join(p.text for p in kept), parts=kept, refs=refs)
        reasons.setdefault(s.key, "fits; lines other sections show are left out")
        shown.update(refs)


#: Where a chosen rendering goes in the request (``_group``): the system message, the context
#: message, the history messages, the messages after them (the input and this turn's rounds).
_SYSTEM, _CONTEXT, _HISTORY, _TAIL = 0, 1, 2, 3
_TOOLS = 4
"""The tools' "group": the sections whose chosen rendering has tool schemas."""

_OrderKey = tuple[int, int, int, str]


def _group(slot: str, r: Rendering) -> int:
    """``_layout``'s choice of where a chosen rendering goes, as a number."""
    if slot == "system" and r.text:
        return _SYSTEM
    if slot == "context" and r.text:
        return _CONTEXT
    if slot == "history" and r.messages:
        return _HISTORY
    if slot == "history" and r.text:
        return _CONTEXT  # a summary standing in for past turns
    return _TAIL


def _order_key(s: Section) -> _OrderKey:
    """A section's place in the prompt (keys are unique: a total order)."""
    return (_TIER_RANK[s.tier], _SLOT_RANK[s.slot], s.order, s.key)


def _text_json(text: str) -> bytes:
    """A system message of ``text`` as canonical JSON (none when ``text`` is empty)."""
    return orjson.dumps({"role": "system", "content": text}, option=_SORTED) if text else b""


def _messages_json(messages: list[dict[str, Any]]) -> bytes:
    """``messages`` as canonical JSON without the list's brackets: the pieces of a request's
    messages joined with commas are the JSON of the whole list (orjson writes no whitespace)."""
    return orjson.dumps(messages, option=_SORTED)[1:-1] if messages else b""


@dataclass(slots=True)
class _Index:
    """Where each chosen rendering of a layout went, and what its deduplication compared."""

    parts: frozenset[str]
    """Keys of the picked renderings with parts (the ones deduplication may change)."""
    relevant: frozenset[str]
    """Every reference those hold: what the other sections show matters to deduplication only
    through these."""
    group: dict[str, int]
    """Key -> ``_group`` of its chosen rendering."""
    members: list[list[str]]
    """Per group (and ``_TOOLS``), the keys of its sections in prompt order."""


@dataclass(slots=True, eq=False)
class _Kept:
    """A layout's inputs and what it made of them, for the next model round's layout
    (``_relayout``). Never changed once made (but for ``index``, derived on first use): a later
    layout copies what it changes."""

    sections: dict[str, Section]
    level: dict[str, int]
    """The plan's levels (``_Plan.level``: the sections degradation moved)."""
    reasons: dict[str, str]
    """The plan's reasons (before deduplication)."""
    picked: dict[str, Rendering]
    """The plan's renderings (before deduplication; omitted and excluded sections absent)."""
    chosen: dict[str, Rendering]
    """The renderings laid out (after deduplication)."""
    placed: list[tuple[_OrderKey, Section]]
    """The sections in prompt order, with their manifest entries in ``entries`` and the entries'
    canonical JSON in ``entries_json``."""
    entries: list[ManifestSection]
    entries_json: list[bytes]
    texts: list[str]
    """Per group: the system and the context message's text ("" when there is none)."""
    lists: list[list[dict[str, Any]]]
    """Per group: the history's and the tail's messages."""
    pieces: list[bytes]
    """Per group: its messages' canonical JSON without brackets (b"" when none)."""
    tools: list[dict[str, Any]]
    tools_json: bytes
    index: _Index | None = None
    stable: _StableChoice | None = None
    """The stable tier's choice (``assemble`` sets it)."""

    def indexed(self) -> _Index:
        """``index``, derived from the layout when a later one first needs it (a turn of one
        model round never does)."""
        if self.index is None:
            group: dict[str, int] = {}
            members: list[list[str]] = [[], [], [], [], []]
            for _o, s in self.placed:
                r = self.chosen.get(s.key)
                if r is not None:
                    g = group[s.key] = _group(s.slot, r)
                    members[g].append(s.key)
                    if r.tools:
                        members[_TOOLS].append(s.key)
            parts = frozenset(k for k, r in self.picked.items() if r.parts)
            self.index = _Index(parts, _relevant(self.picked, parts), group, members)
        return self.index


def _relevant(picked: dict[str, Rendering], parts: frozenset[str]) -> frozenset[str]:
    return frozenset(ref for k in parts for ref in (*picked[k].refs, *(x for p in picked[k].parts for x in p.refs)))


def _layout(plan: _Plan, budget: Budget, total: int, reasons: dict[str, str], by_key: dict[str, Section]) -> Assembly:
    placed = sorted([(_order_key(s), s) for s in plan.sections])  # keys are unique: never compares sections
    picked = _chosen(plan)
    plan_reasons = dict(reasons)
    chosen = dict(picked)
    _deduplicate(plan, chosen, reasons)
    system_parts: list[str] = []
    context_parts: list[str] = []
    history: list[dict[str, Any]] = []
    tail: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    entries: list[ManifestSection] = []
    entries_json: list[bytes] = []
    used: dict[str, Rendering] = {}
    by_id = _MANIFEST_BY_ID
    for _o, s in placed:  # ~100 sections: lookups kept local
        key = s.key
        r = chosen.get(key)
        reason = reasons.get(key) or ("pinned" if s.pinned else (s.reason or "fits"))
        full = s.renderings[0]
        found = by_id.get((key, s.tier, s.excluded, reason, id(full), id(r)))  # ``_manifest_section``'s
        if found is not None and found[0] is full and found[1] is r:
            entry, entry_json = found[2]
        else:
            entry, entry_json = _manifest_section(s, r, reason)
        entries.append(entry)
        entries_json.append(entry_json)
        if r is None:
            continue
        used[key] = r
        if r.tools:
            tools.extend(r.tools)
        slot = s.slot  # where it goes: ``_group``, inline
        if slot == "system" and r.text:
            system_parts.append(r.text)
        elif slot == "context" and r.text:
            context_parts.append(r.text)
        elif slot == "history" and r.messages:
            history.extend(r.messages)
        elif slot == "history" and r.text:
            context_parts.append(r.text)  # a summary standing in for past turns
        else:
            tail.extend(r.messages)
    texts = ["\n\n".join(system_parts), "\n\n".join(context_parts)]
    kept = _Kept(
        sections=by_key, level=plan.level, reasons=plan_reasons, picked=picked, chosen=chosen, placed=placed,
        entries=entries, entries_json=entries_json, texts=texts, lists=[[], [], history, tail],
        pieces=[_text_json(texts[0]), _text_json(texts[1]), _messages_json(history), _messages_json(tail)],
        tools=tools, tools_json=orjson.dumps(tools, option=_SORTED),
    )  # fmt: skip
    return _assembled(budget, total, kept, used)


def _changed(plan: _Plan, reasons: dict[str, str], prev: _Kept, by_key: dict[str, Section]) -> set[str]:
    """The keys of the sections a layout of ``plan`` lays out differently from ``prev``'s: another
    section object (or none), another level or another reason. Any other section is the same
    object at the same level with the same reason in both: the same in the prompt, but for what
    deduplication leaves out of it (``_relayout``)."""
    before = prev.sections
    dirty = {k for k, s in by_key.items() if before.get(k) is not s}
    if len(by_key) - len(dirty) != len(before):  # some of the previous sections are gone
        dirty.update(k for k in before if k not in by_key)
    level, last = plan.level, prev.level
    if level != last:
        dirty.update(k for k in level.keys() | last.keys() if level.get(k) != last.get(k))
    if reasons != prev.reasons:
        dirty.update(k for k in reasons.keys() | prev.reasons.keys() if reasons.get(k) != prev.reasons.get(k))
    return dirty


def _relayout(
    plan: _Plan, budget: Budget, total: int, reasons: dict[str, str], prev: _Kept, by_key: dict[str, Section]
) -> Assembly | None:
    """``_layout``'s result, made from the previous layout ``prev`` by laying out again only the
    sections that differ from it (``_changed``) and the parts of the request they are in; ``None``
    when most of it changed.

    Deduplication is kept when no changed section has parts (before or now) and none shows a
    reference that a section with parts holds (``_Index.relevant``): its outcome depends on what
    the others show only through those. Otherwise it runs again over every section."""
    dirty = _changed(plan, reasons, prev, by_key)
    if 2 * len(dirty) > len(by_key):
        return None
    index = prev.indexed()
    picked = dict(prev.picked)
    for k in dirty:
        s = by_key.get(k)
        i = -1 if s is None else plan.at(s)
        if s is not None and i < len(s.renderings):
            picked[k] = s.renderings[i]
        else:
            picked.pop(k, None)
    parts, relevant = index.parts, index.relevant
    if any(
        r is not None and (r.parts or not relevant.isdisjoint(r.refs))
        for k in dirty
        for r in (prev.picked.get(k), picked.get(k))
    ):  # deduplication again, over every section
        chosen = dict(picked)
        final = dict(reasons)
        _deduplicate(plan, chosen, final)
        new_parts = frozenset(k for k, r in picked.items() if r.parts)
        dirty |= parts | new_parts
        parts, relevant = new_parts, _relevant(picked, new_parts)
    else:  # the sections with parts and what they compare with are as before: so is their outcome
        chosen = dict(prev.chosen)
        final = reasons
        for k in dirty:
            r = picked.get(k)
            if r is None:
                chosen.pop(k, None)
            else:
                chosen[k] = r
    kept = _Kept(
        sections=by_key, level=plan.level, reasons=dict(reasons), picked=picked, chosen=chosen,
        placed=list(prev.placed), entries=list(prev.entries), entries_json=list(prev.entries_json),
        texts=list(prev.texts), lists=list(prev.lists),
        pieces=list(prev.pieces), tools=prev.tools, tools_json=prev.tools_json,
        index=_Index(parts, relevant, dict(index.group), [list(m) for m in index.members]),
    )  # fmt: skip
    _splice(kept, prev, dirty, final)
    return _assembled(budget, total, kept, dict(chosen))


def _splice(kept: _Kept, prev: _Kept, dirty: set[str], reasons: dict[str, str]) -> None:
    """Take the ``dirty`` sections out of ``kept`` (a copy of ``prev``'s lists) where ``prev`` had
    them, put them in where they go now, and lay out again the groups they were or are in."""
    assert kept.index is not None
    placed, entries, entries_json = kept.placed, kept.entries, kept.entries_json
    group, members = kept.index.group, kept.index.members
    changed: set[int] = set()
    for k in dirty:  # out
        old = prev.sections.get(k)
        if old is None:
            continue
        i = bisect.bisect_left(placed, (_order_key(old),))
        del placed[i], entries[i], entries_json[i]
        g = group.pop(k, None)
        if g is not None:
            changed.add(g)
            members[g].remove(k)
        r = prev.chosen.get(k)
        if r is not None and r.tools:
            changed.add(_TOOLS)
            members[_TOOLS].remove(k)
    by_key = kept.sections
    place = {}
    for k in sorted(dirty):  # in
        s = by_key.get(k)
        if s is None:
            continue
        o = place[k] = _order_key(s)
        r = kept.chosen.get(k)
        i = bisect.bisect_left(placed, (o,))
        placed.insert(i, (o, s))
        entry, entry_json = _manifest_section(s, r, reasons.get(k) or ("pinned" if s.pinned else (s.reason or "fits")))
        entries.insert(i, entry)
        entries_json.insert(i, entry_json)
        if r is None:
            continue
        g = group[k] = _group(s.slot, r)
        changed.add(g)
        members[g].append(k)
        if r.tools:
            changed.add(_TOOLS)
            members[_TOOLS].append(k)
    chosen = kept.chosen
    for g in changed:
        members[g].sort(key=lambda k: place[k] if k in place else _order_key(by_key[k]))
        laid = [chosen[k] for k in members[g]]
        if g == _TOOLS:
            kept.tools = [t for r in laid for t in r.tools]
            kept.tools_json = orjson.dumps(kept.tools, option=_SORTED)
        elif g in (_SYSTEM, _CONTEXT):
            kept.texts[g] = "\n\n".join(r.text for r in laid)
            kept.pieces[g] = _text_json(kept.texts[g])
        else:
            kept.lists[g] = [m for r in laid for m in r.messages]
            kept.pieces[g] = _messages_json(kept.lists[g])


def _assembled(budget: Budget, total: int, kept: _Kept, used: dict[str, Rendering]) -> Assembly:
    """The request a layout made: its messages, tools, digest and manifest."""
    system, context = kept.texts
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    if context:
        messages.append({"role": "system", "content": context})
    messages += kept.lists[_HISTORY]
    messages += kept.lists[_TAIL]
    # The messages' JSON from its groups' (the same bytes as encoding the list whole); the digest
    # covers ``[messages, tools]``, and the messages' own JSON is kept for the record.
    messages_json = b"".join((b"[", b",".join([p for p in kept.pieces if p]), b"]"))
    digest = hashlib.sha256(b"".join((b"[", messages_json, b",", kept.tools_json, b"]")))
    manifest = Manifest(
        context_window=budget.context_window,
        output_reserve=budget.output_reserve,
        limit=budget.limit,
        used_tokens=total,
        digest=digest.hexdigest(),
        sections=tuple(kept.entries),
        sections_json=tuple(kept.entries_json),
    )
    return Assembly(messages, list(kept.tools), manifest, total, system, used, messages_json, kept)


_MANIFEST_ENTRIES: dict[tuple[Any, ...], tuple[ManifestSection, bytes]] = {}
_MANIFEST_ENTRIES_LIMIT = 50_000
_MANIFEST_BY_ID: dict[tuple[Any, ...], tuple[Rendering, Rendering | None, tuple[ManifestSection, bytes]]] = {}


def _manifest_section(s: Section, chosen: Rendering | None, reason: str) -> tuple[ManifestSection, bytes]:
    """One section's manifest entry and its canonical JSON. Most sections (past turns, episodes,
    the stable tier) come back turn after turn with the same entry, so entries are kept by what
    they are made of."""
    full = s.renderings[0]
    # Renderings are frozen and mostly the same objects turn after turn (their builders keep
    # them): the entry is found by their identity first, without hashing their refs again.
    fast = (s.key, s.tier, s.excluded, reason, id(full), id(chosen))
    found = _MANIFEST_BY_ID.get(fast)
    if found is not None and found[0] is full and found[1] is chosen:
        return found[2]
    key = (
        s.key, s.tier, s.excluded, reason, full.tokens, full.refs,
        None if chosen is None else chosen.form, 0 if chosen is None else chosen.tokens,
        None if chosen is None else chosen.refs,
    )  # fmt: skip
    hit = _MANIFEST_ENTRIES.get(key)
    if hit is None:
        included = set(chosen.refs) if chosen else set()
        entry = ManifestSection(
            key=s.key,
            tier=s.tier,
            representation=chosen.form if chosen else "omitted",
            requested_tokens=full.tokens,
            allocated_tokens=chosen.tokens if chosen else 0,
            reason=reason,
            excluded=s.excluded,
            refs_included=tuple(sorted(included)),
            refs_omitted=tuple(sorted(set(full.refs) - included)),
        )
        if len(_MANIFEST_ENTRIES) >= _MANIFEST_ENTRIES_LIMIT:
            _MANIFEST_ENTRIES.clear()
        hit = _MANIFEST_ENTRIES[key] = (entry, orjson.dumps(entry.to_json(), option=_SORTED))
    if len(_MANIFEST_BY_ID) >= _MANIFEST_ENTRIES_LIMIT:
        _MANIFEST_BY_ID.clear()
    _MANIFEST_BY_ID[fast] = (full, chosen, hit)  # holds the renderings: their ids stay theirs
    return hit
