"""Recall: the few durable-memory entries a turn is shown, chosen within fixed caps (RFC 0006).

Pure selection over projection rows; no model. For each turn:

* candidates are the agent's active entries (its own, its workspace's and the operator's);
* each is scored by its match with the current input and the active work item, two signals:
  the terms it shares with them (the search index's analyzer: light stems, CJK bigrams) and its
  rank in the search index (``holon.memory.index.durable_matches``: FTS5 with Porter stems and
  bm25, over the subject and kind as well as the text); then a prior by type (a preference
  matters even when no word is shared), its confidence and its freshness; a stale entry scores
  less and a stale reference is left out. The index is read, never caught up, on the turn path
  (the daemon keeps it current): an entry it does not hold yet is matched on shared terms only;
* at most ``limit`` (5) are kept, one per subject, per-type caps apply, and operator-scope entries
  take at most ``operator_cap`` (2) places while entries of other scopes compete for them;
* up to ``pending`` of the agent's proposals still waiting for the operator are added, marked
  unconfirmed.

Each kept entry carries a freshness note ("observed 40 days ago; verify before relying on it").
What was left out is returned with the reason, for the context manifest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from holon.memory.access import owners_for
from holon.memory.index import durable_matches
from holon.memory.text import content_terms
from holon.projections import Store
from holon.projections.durable import DurableState, is_stale
from holon.projections.state import AgentState

__all__ = ["Recall", "RecallLimits", "Recalled", "content_terms", "freshness_note", "recall"]

DAY_US = 86_400 * 1_000_000

PRIOR = {"preference": 0.5, "identity": 0.4, "blocker": 0.3, "procedure": 0.2, "fact": 0.2, "reference": 0.1}
TYPE_CAPS = {"preference": 3, "identity": 2, "fact": 3, "procedure": 2, "blocker": 2, "reference": 2}
STALE_FACTOR = 0.4
#: What the best search-index match adds to an entry's score (sharing one word of a five-word
#: entry adds about 0.45).
INDEX_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class RecallLimits:
    limit: int = 5
    operator_cap: int = 2
    pending: int = 2
    type_caps: dict[str, int] = field(default_factory=lambda: dict(TYPE_CAPS))


@dataclass(frozen=True, slots=True)
class Recalled:
    ref: str
    """``durable:<entry id>`` or ``proposal:<proposal id>``."""
    kind: str
    scope: str
    subject: str
    text: str
    note: str
    score: float
    stale: bool = False
    unconfirmed: bool = False


@dataclass(frozen=True, slots=True)
class Recall:
    entries: tuple[Recalled, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    """(ref, why) of candidates not shown."""


def _ago(now_us: int, then_us: int) -> str:
    days = max(0, (now_us - then_us) // DAY_US)
    return "today" if days == 0 else ("1 day ago" if days == 1 else f"{days} days ago")


def freshness_note(s: DurableState, now_us: int) -> str:
    ago = _ago(now_us, s.verified_us)
    stale = is_stale(s, now_us)
    match s.entry.verification:
        case "none":
            head = f"stated {ago}" + (" by the operator" if s.entry.scope == "operator" else "")
        case "recheck":
            head = f"last seen {ago}; it may be fixed by now, recheck"
        case _:
            head = f"observed {ago}; verify before relying on it"
    return head + ("; STALE" if stale else "")


def _score(s: DurableState, query: frozenset[str], now_us: int, indexed: float = 0.0) -> float:
    """``indexed``: the entry's relevance in the search index (0 when it did not match)."""
    e = s.entry
    terms = content_terms(f"{e.subject.split(':', 1)[-1]} {e.text}")
    overlap = len(query & terms) / math.sqrt(len(terms)) if terms and query else 0.0
    match = overlap + INDEX_WEIGHT * max(0.0, min(1.0, indexed))
    age_days = max(0.0, (now_us - s.verified_us) / DAY_US)
    score = (PRIOR.get(e.kind, 0.1) + match) * (0.5 + 0.5 * e.confidence) + 0.1 * math.exp(-age_days / 30)
    return score * (STALE_FACTOR if is_stale(s, now_us) else 1.0)


def recall(store: Store, agent: AgentState, query: str, now_us: int, limits: RecallLimits | None = None) -> Recall:
    limits = limits or RecallLimits()
    owners = owners_for(agent)
    active = store.durable_entries(owners, active_only=True)
    q = content_terms(query)
    # The index only ranks active entries: without any, it is not asked (a query per turn).
    indexed = durable_matches(store, owners, query) if active else {}
    left: list[tuple[str, str]] = []
    scored: list[tuple[float, DurableState]] = []
    for s in active:
        if s.entry.kind == "reference" and is_stale(s, now_us):
            left.append((f"durable:{s.entry_id}", "stale reference"))
            continue
        scored.append((_score(s, q, now_us, indexed.get(s.entry_id, 0.0)), s))
    scored.sort(key=lambda x: (-x[0], -x[1].seq))
    kept = _select(scored, limits, left)
    out = [
        Recalled(f"durable:{s.entry_id}", s.entry.kind, s.entry.scope, s.entry.subject, s.entry.text,
                 freshness_note(s, now_us), round(score, 4), stale=is_stale(s, now_us))
        for score, s in kept
    ]  # fmt: skip
    out += _pending(store, agent, q, now_us, limits.pending)
    return Recall(tuple(out), tuple(left))


def _select(
    scored: list[tuple[float, DurableState]], limits: RecallLimits, left: list[tuple[str, str]]
) -> list[tuple[float, DurableState]]:
    kept: list[tuple[float, DurableState]] = []
    subjects: set[str] = set()
    per_type: dict[str, int] = {}
    deferred: list[tuple[float, DurableState]] = []
    others = sum(1 for _sc, s in scored if s.entry.scope != "operator")
    for score, s in scored:
        ref = f"durable:{s.entry_id}"
        if len(kept) >= limits.limit:
            left.append((ref, f"over the recall limit of {limits.limit}"))
            continue
        if s.entry.subject in subjects:
            left.append((ref, "another entry of the same subject was chosen"))
            continue
        if per_type.get(s.entry.kind, 0) >= limits.type_caps.get(s.entry.kind, limits.limit):
            left.append((ref, f"over the cap for {s.entry.kind} entries"))
            continue
        operator_n = sum(1 for _sc, k in kept if k.entry.scope == "operator")
        if s.entry.scope == "operator" and operator_n >= limits.operator_cap and others > 0:
            deferred.append((score, s))
            continue
        kept.append((score, s))
        subjects.add(s.entry.subject)
        per_type[s.entry.kind] = per_type.get(s.entry.kind, 0) + 1
        if s.entry.scope != "operator":
            others -= 1
    for score, s in deferred:  # no other scope wanted the places: operator entries may fill them
        fits = per_type.get(s.entry.kind, 0) < limits.type_caps.get(s.entry.kind, limits.limit)
        if len(kept) < limits.limit and s.entry.subject not in subjects and fits:
            kept.append((score, s))
            subjects.add(s.entry.subject)
            per_type[s.entry.kind] = per_type.get(s.entry.kind, 0) + 1
        else:
            left.append((f"durable:{s.entry_id}", f"over the operator-scope cap of {limits.operator_cap}"))
    kept.sort(key=lambda x: (-x[0], -x[1].seq))
    return kept


def _pending(store: Store, agent: AgentState, q: frozenset[str], now_us: int, n: int) -> list[Recalled]:
    if n <= 0:
        return []
    mine = store.proposals(agent_id=agent.agent_id, status="pending")
    scored = []
    for p in mine:
        if p.entry is None:
            continue
        terms = content_terms(f"{p.entry.subject.split(':', 1)[-1]} {p.entry.text}")
        scored.append((len(q & terms), p.seq, p))
    scored.sort(key=lambda x: (-x[0], -x[1]))
    out = []
    for _n, _seq, p in scored[:n]:
        assert p.entry is not None
        out.append(
            Recalled(f"proposal:{p.proposal_id}", p.entry.kind, p.entry.scope, p.entry.subject, p.entry.text,
                     f"unconfirmed: proposed {_ago(now_us, p.created_us)}, awaiting the operator's review", 0.0,
                     unconfirmed=True)
        )  # fmt: skip
    return out
