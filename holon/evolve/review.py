"""The operator's side of durable memory: accept or dismiss proposals, forget entries (RFC 0006).

Every action is a ledger event with operator authority; the projections and markdown views
follow. These functions are what the CLI, the HTTP API and the REPL call, so the three behave the
same. Ids may be given in full or by a unique prefix.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

from holon.errors import ConflictError, IdempotencyConflict, NotFoundError, UsageError
from holon.evolve.render import install_skill, remove_skill_draft, render_owner
from holon.evolve.worker import _h, active_entries
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory.writes import write_file
from holon.projections import Store
from holon.projections.durable import DurableState, ProposalState, is_stale
from holon.projections.state import AgentState

__all__ = [
    "ENTRY_STATUSES",
    "Decision",
    "accept",
    "dismiss",
    "find_entry",
    "find_proposal",
    "forget",
    "list_entries",
    "list_proposals",
]


def _find(store: Store, kind: str, ref: str) -> str:
    ref = ref.strip()
    if not ref or len(ref) > 200:
        raise UsageError("give an id (or a unique prefix of one)")
    if store.state(kind, ref) is not None:
        return ref
    rows = store.keys_with_prefix(kind, ref, limit=2)
    what = "proposal" if kind == "proposal" else "durable memory entry"
    if not rows:
        raise NotFoundError(f"no {what} {ref!r}")
    if len(rows) > 1:
        raise UsageError(f"{ref!r} matches several of them; give more of the id")
    return rows[0]


def find_proposal(store: Store, ref: str) -> ProposalState:
    state = store.state("proposal", _find(store, "proposal", ref))
    assert isinstance(state, ProposalState)
    return state


def find_entry(store: Store, ref: str) -> DurableState:
    state = store.state("durable", _find(store, "durable", ref))
    assert isinstance(state, DurableState)
    return state


def list_proposals(store: Store, *, status: str | None = "pending", agent_id: str | None = None) -> list[ProposalState]:
    return list(store.rows("proposal", status=status, agent_id=agent_id))


#: What ``list_entries`` filters on: a stored status, or ``stale`` (active, past its stale-after time).
ENTRY_STATUSES = ("active", "superseded", "forgotten", "stale")


def list_entries(
    store: Store,
    *,
    scope: str | None = None,
    status: str | None = None,
    owners: list[str] | None = None,
    now_us: int | None = None,
) -> list[DurableState]:
    """Entries by scope, owners and status (``None``: any). ``stale`` is not stored (time makes
    an entry stale, no event does): it is the active entries stale at ``now_us``, which it needs."""
    if status is not None and status not in ENTRY_STATUSES:
        raise UsageError(f"unknown status {status!r}; statuses: {', '.join(ENTRY_STATUSES)}")
    stored = "active" if status == "stale" else status
    out = [s for s in store.rows("durable", status=stored) if isinstance(s, DurableState)]
    if status == "stale":
        if now_us is None:
            raise UsageError("the stale filter needs the time to judge staleness at")
        out = [s for s in out if is_stale(s, now_us)]
    if scope is not None:
        out = [s for s in out if s.entry.scope == scope]
    if owners is not None:
        out = [s for s in out if s.entry.owner in owners]
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    proposal: ProposalState
    outcome: Literal["accepted", "dismissed"]
    entry_id: str | None = None
    skill_path: str | None = None
    memory_file: str | None = None
    """For an accepted ``memory_write`` proposal: the file it changed (``file:operator/operator.md``)."""


def _check_pending(p: ProposalState) -> None:
    if p.status != "pending":
        raise ConflictError(f"proposal {p.proposal_id} was already {p.status}")


def _event(p: ProposalState, payload: ev.PayloadBase, origin: str, key: str) -> NewEvent:
    """A decision event. Its idempotency key makes a proposal decidable once even when two
    surfaces (say the CLI and the daemon's API) both saw it pending: the second append of a
    different decision is refused inside the writer's transaction; the same decision is a no-op."""
    return NewEvent(p.agent_id, payload, origin=origin, authority="operator", idempotency_key=f"{key}:{p.proposal_id}")


def _append_decision(store: Store, p: ProposalState, *events: NewEvent) -> None:
    try:
        store.append(*events)
    except IdempotencyConflict:
        raise ConflictError(f"proposal {p.proposal_id} was decided elsewhere at the same time") from None


def accept(store: Store, ref: str, *, text: str | None = None, origin: str = "operator:cli") -> Decision:
    """Accept a proposal, optionally with the operator's edited text; a memory proposal becomes durable."""
    p = find_proposal(store, ref)
    _check_pending(p)
    if text is not None:
        text = text.strip()
        if not text or len(text) > (4_000 if p.kind == "memory" else 20_000):
            raise UsageError(
                "the edited text must be non-empty and at most 4,000 characters (20,000 for a skill or a memory edit)"
            )
    accepted = _event(p, ev.ProposalAccepted(proposal_id=p.proposal_id, text=text), origin, "decision")
    try:
        agent = store.agent(p.agent_id)
    except NotFoundError:
        raise ConflictError(f"the agent that made proposal {p.proposal_id} was deleted; dismiss it instead") from None
    if p.kind == "memory_write":
        return _apply_write(store, p, agent, accepted, text, origin)
    if p.kind == "memory":
        assert p.entry is not None
        entry = p.entry if text is None else p.entry.model_copy(update={"text": text})
        entry_id = f"mem-{_h('accepted', p.proposal_id)[:12]}"
        same = [
            s.entry_id for s in active_entries(store, entry.owner)
            if s.entry.subject == entry.subject and s.entry_id != entry_id
        ]  # fmt: skip
        recorded = _event(
            p, ev.DurableRecorded(entry_id=entry_id, entry=entry, supersedes=same, source="proposal", proposal_id=p.proposal_id), origin, "recorded"
        )  # fmt: skip
        _append_decision(store, p, accepted, recorded)
        render_owner(store, entry.scope, entry.owner)
        return Decision(find_proposal(store, p.proposal_id), "accepted", entry_id=entry_id)
    assert p.skill is not None
    _append_decision(store, p, accepted)
    path = install_skill(agent.home, p.skill.skill_id, text or p.skill.body)
    return Decision(find_proposal(store, p.proposal_id), "accepted", skill_path=str(path))


def _apply_write(
    store: Store, p: ProposalState, agent: AgentState, accepted: NewEvent, text: str | None, origin: str
) -> Decision:
    """Apply an agent's proposed edit of operator memory, with the operator's authority: the
    decision first (so a second accept is refused), then the write (its own ``memory.written``)."""
    assert p.write is not None
    w = p.write
    if w.scope != "operator":
        raise ConflictError(f"proposal {p.proposal_id} edits {w.scope} memory; only operator memory is proposed")
    _append_decision(store, p, accepted)
    result = write_file(
        store, agent, "operator", w.path, w.op, text or w.text, origin=origin, authority="operator", heading=w.heading
    )
    return Decision(find_proposal(store, p.proposal_id), "accepted", memory_file=result.ref)


def dismiss(store: Store, ref: str, *, reason: str = "", origin: str = "operator:cli") -> Decision:
    p = find_proposal(store, ref)
    _check_pending(p)
    dismissed = ev.ProposalDismissed(proposal_id=p.proposal_id, reason=reason[:500] or "dismissed by the operator")
    _append_decision(store, p, _event(p, dismissed, origin, "decision"))
    if p.skill is not None:
        with contextlib.suppress(NotFoundError):
            remove_skill_draft(store.agent(p.agent_id).home, p.skill.skill_id)
    return Decision(find_proposal(store, p.proposal_id), "dismissed")


def forget(store: Store, ref: str, *, reason: str = "", origin: str = "operator:cli") -> DurableState:
    """Stop recalling an entry. Its events stay in the ledger (that is the audit trail)."""
    s = find_entry(store, ref)
    if s.status == "forgotten":
        return s
    store.append(NewEvent(s.agent_id, ev.DurableForgotten(entry_id=s.entry_id, reason=reason[:500] or "forgotten by the operator"), origin=origin, authority="operator"))  # fmt: skip
    render_owner(store, s.entry.scope, s.entry.owner)  # every home that shows it, even if its agent is gone
    return find_entry(store, s.entry_id)
