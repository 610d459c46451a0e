"""Optional model-assisted extraction (``[evolve] model_extraction = true``), behind two gates.

The model reads a compact transcript of the finished turn and answers JSON candidates. A
candidate is kept only when

* its ``confidence`` is at least ``[evolve] min_confidence``, and
* its ``evidence`` is a verbatim quote (case and spacing aside) of the operator's messages, the
  agent's replies or tool output in that turn: the model may summarise, never invent.

Operator-scope candidates, preferences and identity facts become proposals exactly like the
deterministic ones; the rest are recorded with ``source = "model"`` and the model's confidence.
Without a model, or when the call fails, the deterministic path alone runs: a failed call is
logged and the job goes on without model candidates.

Every call is accounted for: the extractor returns an ``evolve.model_used`` payload (model, tokens,
cost, how many candidates passed the gates, or the error) that the job appends with its output.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from holon.evolve.extract import (
    STALE_AFTER_S,
    VERIFICATION,
    Candidate,
    TurnFacts,
    identity_subject,
    needs_consent,
    operator_sentences,
    statement,
    subject_key,
)
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry, DurableType, MemoryScope
from holon.logs import get_logger

__all__ = [
    "PROMPT",
    "Extraction",
    "ModelAnswer",
    "ModelCall",
    "background",
    "gated_candidates",
    "model_extractor",
    "transcript",
]

log = get_logger("holon.evolve")


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """What a model call gave: its text and what it cost."""

    text: str
    model: str = ""
    usage: ev.Usage = field(default_factory=ev.Usage)
    cost_usd: float | None = None


#: ``(agent id, chat messages) -> the answer`` (a bare string when nothing is known of its cost);
#: raises on failure.
ModelCall = Callable[[str, list[dict[str, Any]]], "ModelAnswer | str"]


@dataclass(frozen=True, slots=True)
class Extraction:
    candidates: list[Candidate]
    used: ev.EvolveModelUsed | None
    """The call's record (``None`` when no call was made)."""


PROMPT = """You maintain an agent's durable memory. Read one finished turn and list what is worth
remembering in later turns, if anything: stable facts about the workspace, procedures that worked,
failures that keep recurring, the operator's explicit preferences or who they are.
Answer only JSON: {"candidates": [{"scope": "operator|workspace|agent",
"kind": "preference|identity|fact|procedure|blocker|reference", "subject": "a short key",
"text": "one sentence", "confidence": 0.0-1.0, "evidence": "an exact quote from the turn"}]}.
Answer {"candidates": []} when nothing qualifies. Never guess; quote the evidence exactly."""

#: Most characters of turn transcript sent to the model.
TRANSCRIPT_CAP = 6_000
#: Most characters of background (recent episodes, what is already remembered) sent with it.
BACKGROUND_CAP = 2_000


class _Proposed(BaseModel):
    model_config = ConfigDict(extra="ignore")

    scope: MemoryScope
    kind: DurableType
    subject: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=1000)
    confidence: float = Field(ge=0, le=1)
    evidence: str = Field(min_length=8, max_length=1000)


def transcript(facts: TurnFacts) -> str:
    lines = []
    for e in facts.events:
        p = e.payload
        match p:
            case ev.MessageReceived() if isinstance(p.text, str):
                lines.append(f"[{e.authority}] {p.text}")
            case ev.ModelResponded() if isinstance(p.content, str) and p.content:
                lines.append(f"[agent] {p.content}")
            case ev.ToolResulted():
                out = p.output if isinstance(p.output, str) else p.output.preview
                lines.append(f"[tool {p.tool}] {out[:800]}")
    text = "\n".join(lines)
    return text[-TRANSCRIPT_CAP:]


def background(facts: TurnFacts) -> str:
    """What the job read besides the turn: recent episodes and current durable memory. Context
    only: evidence must still be quoted from the turn itself."""
    lines = []
    if facts.recent_episodes:
        lines.append("Recent episodes (context; do not quote):")
        lines += [f"- {p.objective or p.topic or p.boundary}: {p.summary}"[:300] for p in facts.recent_episodes]
    if facts.remembered:
        lines.append("Already remembered (list one again only if this turn changes it):")
        lines += [f"- {t}"[:300] for t in facts.remembered]
    return "\n".join(lines)[:BACKGROUND_CAP]


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _json(reply: str) -> Any:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", reply, re.S)
    body = fenced.group(1) if fenced else reply
    start, end = body.find("{"), body.rfind("}")
    return json.loads(body[start : end + 1]) if start >= 0 and end > start else None


def gated_candidates(reply: str, facts: TurnFacts, min_confidence: float) -> list[Candidate]:
    """The model's candidates that pass both gates (malformed answers yield none)."""
    return _gate(_answered(reply), facts, min_confidence)


def _answered(reply: str) -> list[Any]:
    """The raw candidate list of an answer (at most 20; a malformed answer has none)."""
    try:
        data = _json(reply)
    except ValueError:
        return []
    items = data.get("candidates") if isinstance(data, dict) else None
    return items[:20] if isinstance(items, list) else []


#: The deterministic extractor's subject prefix for each kind, so that the same thing found by
#: both paths has one subject (and one entry or proposal).
SUBJECT_PREFIX: dict[str, str] = {
    "preference": "pref", "identity": "identity", "fact": "fact", "procedure": "procedure", "blocker": "blocker",
    "reference": "ref",
}  # fmt: skip
_KNOWN_PREFIXES = frozenset(SUBJECT_PREFIX) | frozenset(SUBJECT_PREFIX.values())


def _gate(items: list[Any], facts: TurnFacts, min_confidence: float) -> list[Candidate]:
    source = _norm(transcript(facts))
    out = []
    for raw in items:
        try:
            c = _Proposed.model_validate(raw)
        except ValidationError:
            continue
        if c.confidence < min_confidence or _norm(c.evidence) not in source:
            continue
        out.append(_candidate(c, facts))
    return out


def _candidate(c: _Proposed, facts: TurnFacts) -> Candidate:
    """A gated answer as a candidate. Consent is decided here, not by the model: anything that reads
    as a preference or identity (its text, or the operator's sentence it quotes) is a proposal in
    the operator scope, whatever kind and scope the model gave it."""
    said = _quoted_sentences(facts, c.evidence)
    consent = (
        c.scope == "operator"
        or c.kind in ("preference", "identity")
        or needs_consent(c.text)
        or any(needs_consent(s) for _e, s in said)
    )
    kind: DurableType = c.kind
    if consent and kind not in ("preference", "identity"):
        is_identity = identity_subject(c.text) or any(identity_subject(s) for _e, s in said)
        kind = "identity" if is_identity else "preference"
    scope: MemoryScope = "operator" if consent else c.scope
    if scope == "workspace" and facts.owner_workspace is None:
        scope = "agent"
    owner = {"operator": "operator", "workspace": facts.owner_workspace, "agent": facts.owner_self}[scope]
    assert owner is not None
    quoted = [e for e in facts.events if _norm(c.evidence) in _norm(_event_text(e))]
    entry = DurableEntry(
        scope=scope, kind=kind, subject=_subject(kind, owner, c.subject, said, facts), text=c.text, owner=owner,
        verification=VERIFICATION[kind], stale_after_s=STALE_AFTER_S[kind],
        evidence=sorted({e.seq for e in quoted})[-50:], observed_us=max((e.ts_us for e in quoted), default=0),
        confidence=c.confidence,
    )  # fmt: skip
    return Candidate(entry, consent, "model")


def _quoted_sentences(facts: TurnFacts, evidence: str) -> list[tuple[Any, str]]:
    """The operator's sentences the evidence quotes (those containing it, or contained in it)."""
    quote = _norm(evidence)
    return [(e, s) for e, s in operator_sentences(facts) if quote in _norm(s) or _norm(s) in quote]


def _subject(kind: str, owner: str, given: str, said: list[tuple[Any, str]], facts: TurnFacts) -> str:
    """The subject the deterministic rules give the quoted sentence, when they give it one of this
    kind and owner; else the model's subject under the deterministic prefix (``pref:``, not
    ``preference:``), with any prefix the model put on it dropped."""
    for e, sentence in said:
        for d in statement(facts, e, sentence):
            if d.entry.kind == kind and d.entry.owner == owner:
                return d.entry.subject
    head, sep, rest = given.partition(":")
    text = rest if sep and head.strip().casefold() in _KNOWN_PREFIXES else given
    if kind == "identity":  # the deterministic identity subjects are fixed: name, role, work
        named = next((f"identity:{w}" for w in ("name", "role", "work") if w in _norm(text).split()), None)
        if named is not None:
            return named
    return subject_key(SUBJECT_PREFIX[kind], text, n=2 if kind == "preference" else 3)


def _event_text(e: Any) -> str:
    p = e.payload
    for name in ("text", "content", "output"):
        value = getattr(p, name, None)
        if isinstance(value, str):
            return value
    return ""


def model_extractor(call: ModelCall, min_confidence: float) -> Callable[[TurnFacts, str], Extraction]:
    """``(facts, job key) -> Extraction``: one model call per turn, gated, with its record."""

    def extract_with_model(facts: TurnFacts, job: str) -> Extraction:
        body = transcript(facts)
        if not body.strip():
            return Extraction([], None)
        context = background(facts)
        user = f"{context}\n\nThe finished turn:\n{body}" if context else body
        messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": user}]
        started = time.perf_counter()

        def used(answer: ModelAnswer, **extra: Any) -> ev.EvolveModelUsed:
            return ev.EvolveModelUsed(
                job=job, turn_id=facts.turn_id, model=answer.model, usage=answer.usage, cost_usd=answer.cost_usd,
                latency_ms=round((time.perf_counter() - started) * 1000, 1), **extra,
            )  # fmt: skip

        try:
            reply = call(facts.agent_id, messages)
        except Exception as e:  # the deterministic path still runs
            log.warning("evolve.model_extraction_failed", agent_id=facts.agent_id, error=str(e))
            return Extraction([], used(ModelAnswer(""), error=f"{type(e).__name__}: {e}"[:500]))
        answer = ModelAnswer(reply) if isinstance(reply, str) else reply
        items = _answered(answer.text)
        kept = _gate(items, facts, min_confidence)
        return Extraction(kept, used(answer, candidates=len(items), kept=len(kept)))

    return extract_with_model
