"""Deterministic extraction of durable-memory candidates from a finished turn (RFC 0006).

Pure functions: events in, candidates out. No clock (times come from events), no I/O, no model.
Four kinds of candidate, each with a rule a reader can check by hand:

* **operator preferences and identity**: sentences of the operator's own messages that state a
  preference explicitly ("always ...", "never ...", "I prefer ...", "总是/永远不要/我更喜欢 ...")
  or who they are ("my name is ...", "call me ...", "I am a ..."). These are *proposals*: they only
  become durable once the operator accepts them.
* **workspace facts**: what the operator asks to be remembered ("remember that ...", "note that
  ...", "FYI ...", "for the record ...") or says has changed ("X is now Y", "X moved to Y"). The
  subject is the thing named before the verb, so a later "the staging host is now db2" supersedes
  "remember that the staging host is db1".
* **procedures that worked**: the ``run_command`` calls that exited 0 within a work item the turn
  completed.
* **recurring blockers**: a failure (a tool error, a non-zero exit) whose normalized message was
  also seen in an earlier turn.

Subjects are normalized keys (``pref:use tabs``, ``fact:staging host``): entries with the same
scope, owner and subject are about the same thing, and a newer one supersedes the older.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from holon.ledger import Event
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry, DurableType, MemoryScope, SkillDraft, Verification
from holon.memory.text import STOP_WORDS, content_words, fold, stem, words

__all__ = [
    "Candidate",
    "FailureSeen",
    "TurnFacts",
    "blocker_signature",
    "extract",
    "identity_subject",
    "is_preference",
    "needs_consent",
    "operator_sentences",
    "statement",
    "skill_draft",
    "subject_key",
    "terms",
]

DAY_S = 86_400

#: How long each type of entry stays fresh without being observed again (``None``: never stale).
STALE_AFTER_S: dict[str, int | None] = {
    "preference": None,
    "identity": None,
    "fact": 30 * DAY_S,
    "procedure": 180 * DAY_S,
    "blocker": 14 * DAY_S,
    "reference": 30 * DAY_S,
}
VERIFICATION: dict[str, Verification] = {
    "preference": "none",
    "identity": "none",
    "fact": "verify_before_use",
    "procedure": "verify_before_use",
    "blocker": "recheck",
    "reference": "verify_before_use",
}

#: Words that carry the polarity or politeness of a preference, not what it is about: "always use
#: tabs" and "never use tabs" share the subject ``use tabs``.
_PREF_NOISE = frozenset(
    ["always", "never", "please", "dont", "don't", "do", "not", "no", "prefer", "prefers", "preferred",
     "rather", "would", "like", "want", "avoid", "every", "time", "ever", "again", "from", "now", "on",
     "make", "sure"]
)  # fmt: skip
_MAX_SUBJECT_WORDS = 3
_MAX_TEXT = 400


def terms(text: str) -> list[str]:
    """Content terms of ``text`` as the search index sees them (stemmed; CJK as bigrams)."""
    return content_words(text)


def subject_key(prefix: str, text: str, *, n: int = _MAX_SUBJECT_WORDS) -> str:
    """``prefix:`` and the first ``n`` content words of ``text``, stemmed (polarity words dropped)."""
    text = _PREFERENCE_CJK.sub(" ", text)
    kept = content_words(text, drop=_PREF_NOISE)
    return f"{prefix}:{' '.join(kept[:n]) or _digest(text)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _shorten(text: str, limit: int = _MAX_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- what a turn gives the extractor -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailureSeen:
    """One failed tool call: where, and its normalized signature."""

    seq: int
    turn_id: str | None
    tool: str
    signature: str
    first_line: str


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What extraction reads: the turn's events, and the bits of history the rules compare with."""

    agent_id: str
    turn_id: str
    owner_self: str
    """``agent:<id>``."""
    owner_workspace: str | None
    """``workspace:<path>``, or ``None`` when the agent has no workspace of its own."""
    events: Sequence[Event]
    """The turn's events, turn.started to turn.settled, plus the inputs it took."""
    completed_items: dict[str, tuple[str, Sequence[Event]]] = field(default_factory=dict)
    """work item id -> (title, that item's run_command call/result events), for items the turn completed."""
    past_failures: Sequence[FailureSeen] = ()
    """Failures of earlier turns (newest last)."""
    recent_episodes: Sequence[ev.EpisodeSealed] = ()
    """The agent's newest sealed episodes up to this turn (oldest first): context for the model."""
    remembered: Sequence[str] = ()
    """Texts of the active durable entries the agent already recalls (so the model need not repeat them)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    entry: DurableEntry
    proposal: bool
    """Needs the operator's consent before it is durable."""
    rule: str
    """Which rule produced it (for the audit trail and the tests)."""


# --- operator statements -----------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n+")
#: A stated preference, wherever the sentence says it: "always ...", "when you commit, always ...",
#: "make sure to always ...", "you should never ...", "I prefer ...", "I'd prefer/rather ...",
#: "I don't want ...", "from now on ...".
_PREFERENCE = re.compile(
    r"\b(?:always|never|from\s+now\s+on)\b"
    r"|\b(?:i|we)(?:'d|\s+would|\s+really|\s+much)?\s+(?:prefer|rather)\b"
    r"|\b(?:i|we)\s+(?:do\s+not|don't|dont)\s+(?:ever\s+)?(?:like|want)\b",
    re.I,
)
#: Anything that may be about how the operator wants to be treated, or who they are. A sentence
#: that would otherwise be recorded as a fact, and a model candidate of any kind, that carries one
#: of these becomes a proposal instead: a false alarm costs the operator a dismissal, a miss would
#: change the agent's behaviour without consent.
_CONSENT = re.compile(
    r"\b(?:prefer|prefers|preferred|preference|preferences|rather|likes?|loves?|hates?|dislikes?|wants?|wish"
    r"|should|shouldn't|must|mustn't|make\s+sure|avoid|(?:do\s+not|don't|dont)\s+(?:ever\s+)?\w+"
    r"|i|i'm|i'd|i've|i'll|me|my|mine|myself|operator|operator's|user|user's)\b",
    re.I,
)
_PREFERENCE_CJK = re.compile(r"(总是|始终|永远不要|永远别|不要再|以后都|我更喜欢|我喜欢|我偏好|我希望你总是)")
_CONSENT_CJK = re.compile(r"(我(?!们)|喜欢|希望|偏好|不要|别|总是|永远|以后|必须|应该)")
_IDENTITY = (
    (re.compile(r"\bmy name is\s+([^,.;!?]+)", re.I), "identity:name"),
    (re.compile(r"\b(?:please\s+)?call me\s+([^,.;!?]+)", re.I), "identity:name"),
    (re.compile(r"\bi(?:'m| am)\s+(?:a|an|the)\s+([^,.;!?]+)", re.I), "identity:role"),
    (re.compile(r"\bi work (?:at|for|on|as)\s+([^,.;!?]+)", re.I), "identity:work"),
    (re.compile(r"我叫([^\uff0c。\uff1b\uff01\uff1f,.;!?]+)"), "identity:name"),
)


def is_preference(text: str) -> bool:
    """Whether ``text`` states a preference explicitly (the deterministic preference rule)."""
    return bool(_PREFERENCE.search(text) or _PREFERENCE_CJK.search(text))


def identity_subject(text: str) -> str | None:
    """``identity:name|role|work`` when ``text`` says who the speaker is, else ``None``."""
    for pattern, subject in _IDENTITY:
        m = pattern.search(text)
        if m and m.group(1).strip():
            return subject
    return None


def needs_consent(text: str) -> bool:
    """Whether ``text`` might be a preference or identity statement: then it may only ever become a
    proposal, whatever rule (or model) produced it. Deliberately broad (the first person singular,
    "should", "likes", "the operator" ...): see ``_CONSENT``."""
    return bool(is_preference(text) or identity_subject(text) or _CONSENT.search(text) or _CONSENT_CJK.search(text))


_REMEMBER = re.compile(
    r"^\s*(?:(?:please|and|also|ok|okay)[,\s]+)*(?:remember|note|fyi|for the record|keep in mind|记住|注意)"
    r"(?:\s*(?:that|:|,|\uff1a|\uff0c))?\s*(.+)$",
    re.I,
)
_CHANGED = re.compile(
    r"^\s*(?:(?:the|our|my)\s+)?(.{2,60}?)\s+(?:is|are|has|have)\s+(?:now|moved to|changed to|been moved to)\s+(.+)$",
    re.I,
)
_COPULA = re.compile(r"^\s*(?:(?:the|our|my)\s+)?(.{2,60}?)\s+(?:is|are|lives|runs|sits|moved to|uses)\s+(.+)$", re.I)


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def _operator_inputs(facts: TurnFacts) -> list[tuple[Event, str]]:
    out = []
    for e in facts.events:
        p = e.payload
        if isinstance(p, ev.MessageReceived) and e.authority == "operator" and isinstance(p.text, str):
            out.append((e, p.text))
    return out


def _fact_scope(facts: TurnFacts) -> tuple[MemoryScope, str]:
    if facts.owner_workspace is not None:
        return "workspace", facts.owner_workspace
    return "agent", facts.owner_self


def _entry(
    scope: MemoryScope, owner: str, kind: DurableType, subject: str, text: str, e: Event | Sequence[Event],
    *, confidence: float = 1.0,
) -> DurableEntry:  # fmt: skip
    evs = [e] if isinstance(e, Event) else list(e)
    return DurableEntry(
        scope=scope,
        kind=kind,
        subject=subject[:200],
        text=_shorten(text),
        owner=owner,
        verification=VERIFICATION[kind],
        stale_after_s=STALE_AFTER_S[kind],
        evidence=sorted({x.seq for x in evs})[-50:],
        observed_us=max(x.ts_us for x in evs),
        confidence=confidence,
    )


def _statements(facts: TurnFacts) -> list[Candidate]:
    out: list[Candidate] = []
    for e, text in _operator_inputs(facts):
        for sentence in _sentences(text):
            if sentence.endswith(("?", "\uff1f")):
                continue  # a question states nothing
            out.extend(_statement(facts, e, sentence))
    return out


def operator_sentences(facts: TurnFacts) -> list[tuple[Event, str]]:
    """Every sentence of the operator's messages in the turn, with the message it is from."""
    return [(e, sentence) for e, text in _operator_inputs(facts) for sentence in _sentences(text)]


def statement(facts: TurnFacts, e: Event, sentence: str) -> list[Candidate]:
    """What the deterministic rules make of one operator sentence (see ``_statement``)."""
    return _statement(facts, e, sentence)


def _statement(facts: TurnFacts, e: Event, sentence: str) -> list[Candidate]:
    """What one operator sentence yields. "Remember that ...", "note that ...", "FYI ..." only
    introduce what is said: the clause after them is read like a sentence of its own, so "Remember
    that I prefer short answers" is a preference (a proposal), never a workspace fact."""
    m = _REMEMBER.match(sentence)
    clause = m.group(1).strip() if m else None
    said = _capitalised(clause) if clause else sentence
    if (found := _identity(e, said)) or (found := _preference(e, said)):
        return found
    fact = _fact(facts, e, sentence, clause)
    if fact and needs_consent(said):  # a fact in form, but maybe about the operator: ask first
        return _preference(e, said, forced=True)
    return fact


def _capitalised(text: str) -> str:
    return text[0].upper() + text[1:] if text else text


def _preference(e: Event, sentence: str, *, forced: bool = False) -> list[Candidate]:
    if not (forced or is_preference(sentence)):
        return []
    # Two words: "always use tabs for indentation" and "never use tabs" are one subject; a choice
    # ("reply in English", "reply in French") is one subject whatever was chosen.
    subject = _choice_subject(sentence) or subject_key("pref", sentence, n=2)
    rule = "preference" if not forced else "preference (stated as a fact)"
    return [Candidate(_entry("operator", "operator", "preference", subject, sentence, e), True, rule)]


#: Prepositions that introduce a choice among alternatives: "reply in <language>", "format as
#: <format>", "indent with <character>", "test using <tool>".
_CHOICE = frozenset(["in", "as", "with", "using"])


def _choice_subject(sentence: str) -> str | None:
    """``pref:<verb> <preposition>`` when the preference's first content word is followed by a
    choice preposition, so that contradicting choices share a subject and the newer supersedes."""
    said = words(fold(_PREFERENCE_CJK.sub(" ", sentence)))
    for i, w in enumerate(said):
        if w in STOP_WORDS or w in _PREF_NOISE:
            continue
        following = said[i + 1] if i + 1 < len(said) else None
        return f"pref:{stem(w)} {following}" if following in _CHOICE else None
    return None


def _identity(e: Event, sentence: str) -> list[Candidate]:
    subject = identity_subject(sentence)
    if subject is None:
        return []
    return [Candidate(_entry("operator", "operator", "identity", subject, sentence, e), True, "identity")]


#: "X is now <one of these>" reports a passing state, not a fact worth keeping ("the build is now
#: green", "this is now done"); and a pronoun names no subject a later sentence could update.
_TRANSIENT = frozenset(
    ["green", "red", "done", "fixed", "broken", "running", "stopped", "started", "passing", "failing", "working",
     "ready", "finished", "complete", "completed", "up", "down", "live", "deployed", "merged", "ok", "okay", "fine",
     "good", "bad", "back", "online", "offline", "open", "closed", "pending", "available", "unavailable", "in",
     "gone", "there", "here", "better", "worse", "clean", "stable", "resolved"]
)  # fmt: skip
_PRONOUNS = frozenset(["this", "that", "it", "these", "those", "everything", "something", "all", "he", "she", "they"])


def _transient(changed: re.Match[str]) -> bool:
    """Whether an "X is now Y" sentence only reports a state (see ``_TRANSIENT``)."""
    subject = words(fold(changed.group(1)))
    value = words(fold(changed.group(2)))
    return (len(subject) == 1 and subject[0] in _PRONOUNS) or (bool(value) and value[0] in _TRANSIENT)


def _fact(facts: TurnFacts, e: Event, sentence: str, clause: str | None) -> list[Candidate]:
    changed = _CHANGED.match(clause or sentence)
    if changed is not None and _transient(changed):
        changed = None  # reported, not asked to be kept: "remember that the build is now green" still is
    if clause is None and changed is None:
        return []
    target = changed or _COPULA.match(clause or "")
    subject_text = target.group(1) if target else (clause or sentence)
    scope, owner = _fact_scope(facts)
    text = _capitalised((clause or sentence).strip())
    return [Candidate(_entry(scope, owner, "fact", subject_key("fact", subject_text), text, e), False, "fact")]


# --- procedures and skills ---------------------------------------------------------------------

_EXIT = re.compile(r"^exit code: (-?\d+)")


def _command(arguments: object) -> str | None:
    import json

    if not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    cmd = parsed.get("command") if isinstance(parsed, dict) else None
    return " ".join(cmd.split()) if isinstance(cmd, str) and cmd.strip() else None


def succeeded_commands(events: Iterable[Event]) -> list[tuple[str, Event]]:
    """``run_command`` calls that exited 0, in order, each once (its first success)."""
    calls: dict[str, tuple[str, Event]] = {}
    out: dict[str, Event] = {}
    for e in events:
        p = e.payload
        if isinstance(p, ev.ToolCalled) and p.tool == "run_command":
            cmd = _command(p.arguments)
            if cmd is not None:
                calls[p.call_id] = (cmd, e)
        elif isinstance(p, ev.ToolResulted) and p.call_id in calls and p.status == "ok":
            output = p.output if isinstance(p.output, str) else p.output.preview
            m = _EXIT.match(output)
            if m and m.group(1) == "0":
                cmd, _called = calls[p.call_id]
                out.setdefault(cmd, e)
    return list(out.items())


def procedure_commands(text: str) -> list[str]:
    """The commands a procedure entry lists (its markdown code spans, one per line)."""
    return re.findall(r"^- `(.+)`$", text, re.M)


def _procedures(facts: TurnFacts) -> list[Candidate]:
    out = []
    scope, owner = _fact_scope(facts)
    for _item_id, (title, item_events) in sorted(facts.completed_items.items()):
        done = succeeded_commands(item_events)[-8:]
        if not done:
            continue
        lines = "\n".join(f"- `{cmd}`" for cmd, _e in done)
        text = f"To {title.rstrip('.')}: these commands worked (exit code 0):\n{lines}"
        subject = subject_key("procedure", title)
        entry = _entry(scope, owner, "procedure", subject, text, [e for _c, e in done])
        out.append(Candidate(entry.model_copy(update={"text": text[:4000]}), False, "procedure"))
    return out


def skill_draft(commands: Sequence[str], titles: Sequence[str], evidence: Sequence[int]) -> SkillDraft:
    """A ``SKILL.md`` for a command sequence that completed several work items."""
    signature = "\n".join(commands)
    skill_id = f"skill-{_digest(signature)[:10]}"
    name = f"Procedure: {' / '.join(c.split()[0] for c in commands[:3])}"
    description = "Worked for: " + "; ".join(dict.fromkeys(titles))
    steps = "\n".join(f"{i}. `{c}`" for i, c in enumerate(commands, 1))
    body = (
        f"---\nname: {name}\ndescription: {description[:300]}\n---\n\n"
        f"# {name}\n\n{description}.\n\n## Steps\n\n{steps}\n\n"
        "Each step exited 0 every time it was used. Check the workspace still matches before running them.\n"
    )
    return SkillDraft(
        skill_id=skill_id, name=name[:120], description=description[:1000], body=body, evidence=list(evidence)[-50:]
    )


# --- blockers ----------------------------------------------------------------------------------

_NOISE = (
    (re.compile(r"0x[0-9a-f]+", re.I), "H"),
    (re.compile(r"(?:/[\w.\-]+)+"), "P"),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "Q"),
)


def blocker_signature(tool: str, message: str) -> tuple[str, str]:
    """(signature, first line): the failure with numbers, paths, quotes and hex folded away."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not _EXIT.match(ln.strip())]
    first = next(
        (ln for ln in lines if re.search(r"error|fail|denied|not found|refused|timeout|exception", ln, re.I)), None
    )
    first = first or (lines[0] if lines else message.strip()[:200])
    sig = first.lower()
    for pattern, repl in _NOISE:
        sig = pattern.sub(repl, sig)
    return f"{tool}: {' '.join(sig.split())[:160]}", first[:300]


def failures(events: Iterable[Event]) -> list[FailureSeen]:
    """Every failed tool call among ``events``: an error status, or a command that exited non-zero."""
    out = []
    for e in events:
        p = e.payload
        if not isinstance(p, ev.ToolResulted):
            continue
        output = p.output if isinstance(p.output, str) else p.output.preview
        m = _EXIT.match(output)
        failed = p.status in ("error", "timeout") or (m is not None and m.group(1) != "0")
        if failed:
            sig, first = blocker_signature(p.tool, output)
            out.append(FailureSeen(e.seq, e.turn_id, p.tool, sig, first))
    return out


def _blockers(facts: TurnFacts) -> list[Candidate]:
    out = []
    scope, owner = _fact_scope(facts)
    now = failures(facts.events)
    for sig in dict.fromkeys(f.signature for f in now):
        mine = [f for f in now if f.signature == sig]
        earlier = [f for f in facts.past_failures if f.signature == sig and f.turn_id != facts.turn_id]
        turns = {f.turn_id for f in earlier} | {facts.turn_id}
        if len(turns) < 2:
            continue
        text = f"Recurring failure ({len(earlier) + len(mine)} times in {len(turns)} turns) in {mine[0].tool}: {mine[0].first_line}"
        seen = [e for e in facts.events if e.seq in {f.seq for f in mine}]
        entry = _entry(scope, owner, "blocker", f"blocker:{sig}", text, seen)
        evidence = sorted({f.seq for f in earlier} | {f.seq for f in mine})[-50:]
        out.append(Candidate(entry.model_copy(update={"evidence": evidence}), False, "blocker"))
    return out


# --- all of it ---------------------------------------------------------------------------------


def extract(facts: TurnFacts) -> list[Candidate]:
    """Every candidate the turn yields, one per subject (the last statement of a subject wins)."""
    found = _statements(facts) + _procedures(facts) + _blockers(facts)
    by_subject: dict[tuple[str, str], Candidate] = {}
    for c in found:
        by_subject.pop((c.entry.owner, c.entry.subject), None)
        by_subject[(c.entry.owner, c.entry.subject)] = c
    return list(by_subject.values())
