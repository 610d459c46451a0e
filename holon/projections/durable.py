"""Durable memory and proposals as projections (RFC 0006).

Every change is a ledger event (``durable.recorded/verified/forgotten``, ``proposal.created/
accepted/dismissed``), so durable memory is replayable and auditable like any other state. An
entry's row is keyed by its id; a ``durable.recorded`` also routes to the rows it supersedes,
which is why these reducers are given the key they fold into.

Staleness is not stored: it is a function of the entry's freshness and the reader's clock
(``stale_at_us``), so no event is needed for time to pass.
"""

from __future__ import annotations

from typing import Literal, assert_never

from pydantic import Field

from holon.ledger import Event
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry, MemoryWriteDraft, SkillDraft
from holon.projections.state import State

__all__ = [
    "DurableEvent",
    "DurableState",
    "ProposalEvent",
    "ProposalState",
    "apply_durable",
    "apply_proposal",
    "is_stale",
    "stale_at_us",
]

DurableEvent = ev.DurableRecorded | ev.DurableVerified | ev.DurableForgotten
ProposalEvent = ev.ProposalCreated | ev.ProposalAccepted | ev.ProposalDismissed

DurableStatus = Literal["active", "superseded", "forgotten"]


class DurableState(State):
    entry_id: str
    agent_id: str
    """The agent whose history it came from (its owner may be wider: see ``entry.owner``)."""
    entry: DurableEntry
    status: DurableStatus = "active"
    recorded_us: int
    verified_us: int
    """When it was last observed (the observation time of the latest evidence, never the time a
    job ran); staleness counts from here."""
    verified_by: list[int] = Field(default_factory=list)
    """Evidence (ledger seqs) of the later sightings that verified it, oldest first, the newest
    ``MAX_VERIFIED_BY`` kept; ``entry.evidence`` is what it was first drawn from."""
    seq: int
    source: str = "evolve"
    proposal_id: str | None = None
    superseded_by: str | None = None


ProposalStatus = Literal["pending", "accepted", "dismissed"]


class ProposalState(State):
    proposal_id: str
    agent_id: str
    kind: Literal["memory", "skill", "memory_write"]
    entry: DurableEntry | None = None
    skill: SkillDraft | None = None
    write: MemoryWriteDraft | None = None
    reason: str = ""
    status: ProposalStatus = "pending"
    created_us: int
    seq: int
    decided_us: int | None = None
    text: str | None = None
    """The operator's edited text, when accepted with an edit."""


#: Most evidence seqs of later sightings kept in ``DurableState.verified_by``.
MAX_VERIFIED_BY = 50


def _verified(state: DurableState, event: Event, p: ev.DurableVerified) -> DurableState:
    """Provenance gains the sighting's evidence; freshness restarts from its observation time
    (never moves back: an older sighting that arrives late adds evidence, not freshness)."""
    seen = p.observed_us if p.observed_us is not None else event.ts_us
    added = [q for q in p.evidence if q not in state.verified_by and q not in state.entry.evidence]
    return state.model_copy(
        update={
            "verified_us": max(state.verified_us, seen),
            "verified_by": [*state.verified_by, *added][-MAX_VERIFIED_BY:],
        }
    )


def stale_at_us(state: DurableState) -> int | None:
    after = state.entry.stale_after_s
    return None if after is None else state.verified_us + after * 1_000_000


def is_stale(state: DurableState, now_us: int) -> bool:
    at = stale_at_us(state)
    return at is not None and now_us >= at


def apply_durable(state: DurableState | None, event: Event, key: str) -> DurableState | None:
    p = event.payload
    if not isinstance(p, DurableEvent):
        return state
    match p:
        case ev.DurableRecorded():
            if p.entry_id != key:  # ``key`` is an entry this one supersedes
                if state is not None and state.status == "active":
                    return state.model_copy(update={"status": "superseded", "superseded_by": p.entry_id})
                return state
            if state is not None:
                return state  # recorded once; a repeat changes nothing
            return DurableState(
                entry_id=p.entry_id,
                agent_id=event.agent_id,
                entry=p.entry,
                recorded_us=event.ts_us,
                verified_us=max(p.entry.observed_us, 0) or event.ts_us,
                seq=event.seq,
                source=p.source,
                proposal_id=p.proposal_id,
                status="superseded" if p.superseded_by else "active",
                superseded_by=p.superseded_by,
            )
        case ev.DurableVerified():
            return _verified(state, event, p) if state is not None and state.status == "active" else state
        case ev.DurableForgotten():
            if state is not None and state.status != "forgotten":
                return state.model_copy(update={"status": "forgotten"})
            return state
        case _:
            assert_never(p)


def apply_proposal(state: ProposalState | None, event: Event, key: str) -> ProposalState | None:
    p = event.payload
    if not isinstance(p, ProposalEvent):
        return state
    match p:
        case ev.ProposalCreated():
            if state is not None:
                return state  # created once
            return ProposalState(
                proposal_id=p.proposal_id,
                agent_id=event.agent_id,
                kind=p.kind,
                entry=p.entry,
                skill=p.skill,
                write=p.write,
                reason=p.reason,
                created_us=event.ts_us,
                seq=event.seq,
            )
        case ev.ProposalAccepted():
            if state is None or state.status != "pending":
                return state
            return state.model_copy(update={"status": "accepted", "decided_us": event.ts_us, "text": p.text})
        case ev.ProposalDismissed():
            if state is None or state.status != "pending":
                return state
            return state.model_copy(update={"status": "dismissed", "decided_us": event.ts_us})
        case _:
            assert_never(p)
