"""Running evolve jobs: load a settled turn, extract candidates, record or propose them (RFC 0006).

``Evolver.run_once()`` queues jobs for newly settled turns, leases the oldest ready one and runs
it. A job's output (``durable.*`` and ``proposal.*`` events, plus a brief for a background agent
when proposals wait) is appended in the same transaction that marks the job done, so a job killed
at any point has either produced everything or nothing; it is then leased again when its lease
expires. Event ids and idempotency keys are derived from the job key and the subject, so even a
job that ran twice could not record an entry twice.

What a job decides, for each candidate (``plan``), in observation order, not job order (jobs
may finish out of order: an older turn's job retried after a newer one's is done):

* this job already recorded or proposed the subject (it is running again): nothing;
* an active entry with the same owner, subject and text (for a blocker: the same failure
  signature) exists: ``durable.verified`` (it was seen again, so its freshness restarts), unless
  this sighting is older than its last verification;
* otherwise, for a candidate that needs consent: a ``proposal.created`` (unless the same proposal
  already waits, or a newer entry or proposal of the subject exists; an older pending proposal for
  the subject is dismissed as superseded);
* otherwise: ``durable.recorded``, superseding the active entries of the same subject; or, when
  an active entry of the subject was observed later, recorded as history, already superseded by
  it (an older observation never supersedes a newer one).

A procedure whose commands also completed another work item is drafted as a skill proposal.
After the commit, the markdown views of the scopes that changed are refreshed.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from holon.clock import Clock, SystemClock
from holon.config import EvolveSettings
from holon.errors import ConflictError, NotFoundError
from holon.evolve.extract import (
    Candidate,
    TurnFacts,
    extract,
    failures,
    procedure_commands,
    skill_draft,
)
from holon.evolve.jobs import Job, JobQueue
from holon.evolve.model_extract import Extraction
from holon.evolve.render import render_for_sharers, write_skill_draft
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry, SkillDraft
from holon.logs import get_logger
from holon.memory.access import owner_of
from holon.memory.files import is_background
from holon.projections import Store
from holon.projections.durable import DurableState, ProposalState
from holon.projections.state import AgentState

__all__ = ["Evolver", "JobReport", "load_facts", "merge", "plan"]

log = get_logger("holon.evolve")

#: Most events of one turn, or of one work item, a job reads.
MAX_EVENTS = 5_000
#: Earlier failures compared with this turn's.
PAST_FAILURES = 300
#: Newest sealed episodes a job reads (the work the turn belongs to, and what came just before).
RECENT_EPISODES = 6
#: Most active durable entries passed along as "already remembered".
REMEMBERED = 30

ModelExtractor = Callable[[TurnFacts, str], Extraction]


def _h(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def entry_id_for(job_key: str, owner: str, subject: str) -> str:
    return f"mem-{_h(job_key, owner, subject)[:12]}"


def proposal_id_for(job_key: str, owner: str, subject: str) -> str:
    return f"p-{_h('proposal', job_key, owner, subject)[:8]}"


# --- loading a turn ----------------------------------------------------------------------------


def load_facts(store: Store, agent: AgentState, job: Job) -> TurnFacts | None:
    """What extraction needs from the ledger for ``job``'s turn; ``None`` if the turn is gone."""
    ledger = store.ledger
    started = [
        seq for seq, _t, turn in ledger.recent_index(agent.agent_id, ("turn.started",), limit=64, before=job.settled_seq)
        if turn == job.turn_id
    ]  # fmt: skip
    if not started:
        return None
    first = started[-1]
    turn_events = [
        e for e in ledger.read(first - 1, agent_id=agent.agent_id, limit=MAX_EVENTS) if e.seq <= job.settled_seq
    ]
    head = turn_events[0].payload if turn_events else None
    inputs = ledger.get_many(list(head.inputs)) if isinstance(head, ev.TurnStarted) else []
    # Sealed episodes: the one a completed work item was sealed into gives the exact ledger range
    # of that work (a work item's own opened seq is the fallback); the others are context.
    episodes = [
        (e.seq, e.payload) for e in ledger.recent(agent.agent_id, ("episode.sealed",), limit=RECENT_EPISODES)
        if isinstance(e.payload, ev.EpisodeSealed) and e.payload.seq_start <= job.settled_seq
    ]  # fmt: skip
    completed: dict[str, tuple[str, Sequence[Event]]] = {}
    for e in turn_events:
        if isinstance(e.payload, ev.WorkItemCompleted):
            item = store.work_item(e.payload.work_item_id)
            if item is None:
                continue
            sealed = [p for _seq, p in episodes if p.work_item_id == item.work_item_id]
            start, end = (sealed[-1].seq_start, sealed[-1].seq_end) if sealed else (item.opened_seq, e.seq)
            span = [
                x for x in ledger.read(start - 1, agent_id=agent.agent_id, limit=MAX_EVENTS)
                if x.seq <= end and x.type in ("tool.called", "tool.resulted")
            ]  # fmt: skip
            completed[item.work_item_id] = (item.title, span)
    owners = ["operator", owner_of(agent, "agent")] + ([owner_of(agent, "workspace")] if agent.workspace else [])
    remembered = [s.entry.text for owner in owners for s in active_entries(store, owner)][-REMEMBERED:]
    past = failures(ledger.recent(agent.agent_id, ("tool.resulted",), limit=PAST_FAILURES, before=first))
    return TurnFacts(
        agent_id=agent.agent_id,
        turn_id=job.turn_id,
        owner_self=owner_of(agent, "agent"),
        owner_workspace=owner_of(agent, "workspace") if agent.workspace else None,
        events=[*inputs, *turn_events],
        completed_items=completed,
        past_failures=past,
        recent_episodes=[p for _seq, p in episodes],
        remembered=remembered,
    )


# --- deciding what to append ---------------------------------------------------------------------


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def active_entries(store: Store, owner: str) -> list[DurableState]:
    return store.durable_entries((owner,), active_only=True)


def proposals(store: Store, *, status: str | None = None) -> list[ProposalState]:
    return store.proposals(status=status)


@dataclass
class JobReport:
    job: Job
    recorded: int = 0
    verified: int = 0
    proposed: int = 0
    error: str | None = None
    """Set when the job failed (it is retried after a backoff, or dead)."""
    scopes: set[str] = field(default_factory=set)
    skills: list[tuple[str, str]] = field(default_factory=list)
    """(agent home, skill id) drafts to write after the commit."""


def merge(first: list[Candidate], then: list[Candidate]) -> list[Candidate]:
    """``first`` and those of ``then`` about another (owner, subject): deterministic candidates are
    passed first, so where the model found the same thing, the deterministic reading is kept (two
    different entries under one derived id would be an idempotency conflict, and a dead job)."""
    taken = {(c.entry.owner, c.entry.subject) for c in first}
    out = list(first)
    for c in then:
        if (c.entry.owner, c.entry.subject) not in taken:
            taken.add((c.entry.owner, c.entry.subject))
            out.append(c)
    return out


def plan(store: Store, agent: AgentState, job: Job, candidates: list[Candidate]) -> tuple[list[NewEvent], JobReport]:
    report = JobReport(job)
    out: list[NewEvent] = []
    pending = proposals(store, status="pending")

    def add(payload: ev.Payload, key: str) -> None:
        out.append(
            NewEvent(
                agent.agent_id, payload, origin=f"evolve:{job.key}", authority="runtime", turn_id=job.turn_id,
                idempotency_key=f"evolve:{job.key}:{key}",
            )
        )  # fmt: skip

    seen: set[tuple[str, str]] = set()
    for c in candidates:
        e = c.entry
        if (e.owner, e.subject) in seen:
            continue  # one decision per subject: the first candidate (the deterministic one) wins
        seen.add((e.owner, e.subject))
        if _done_before(store, job, e):
            continue  # this job ran before (an operator retried it): what it decided stands
        same = [s for s in active_entries(store, e.owner) if s.entry.subject == e.subject]
        newer = [s for s in same if s.entry.observed_us > e.observed_us]
        # A blocker's subject is its failure signature: seen again it is the same blocker, however
        # its text differs (the running count, the path in the first line), so it is verified.
        match = next((s for s in same if _same_text(s.entry.text, e.text) or e.kind == "blocker"), None)
        if match is not None:
            if e.observed_us > match.verified_us:  # a sighting older than the last one restarts nothing
                verified = ev.DurableVerified(entry_id=match.entry_id, evidence=e.evidence, observed_us=e.observed_us)
                add(verified, f"verify:{match.entry_id}")
                report.verified += 1
            continue
        if c.proposal:
            _propose(store, job, c, pending, newer, add, report)
            continue
        eid = entry_id_for(job.key, e.owner, e.subject)
        source: Literal["model", "evolve"] = "model" if c.rule == "model" else "evolve"
        if newer:  # observed before the active entry (its job finished late): history, not news
            latest = max(newer, key=lambda s: (s.entry.observed_us, s.seq))
            add(ev.DurableRecorded(entry_id=eid, entry=e, source=source, superseded_by=latest.entry_id), f"record:{eid}")  # fmt: skip
        else:
            add(ev.DurableRecorded(entry_id=eid, entry=e, supersedes=[s.entry_id for s in same], source=source), f"record:{eid}")  # fmt: skip
        report.recorded += 1
        report.scopes.add(e.scope)
        if e.kind == "procedure" and not newer:
            skill = _skill_for(store, agent, e.owner, e.subject, e.text, e.evidence)
            if skill is not None:
                pid = proposal_id_for(job.key, e.owner, skill.skill_id)
                add(ev.ProposalCreated(proposal_id=pid, kind="skill", skill=skill, reason="a procedure that completed several work items"), f"propose:{pid}")  # fmt: skip
                report.proposed += 1
                report.skills.append((agent.home, skill.skill_id))
    if report.proposed and is_background(agent):
        waiting = len(pending) + report.proposed
        text = f"{waiting} proposal(s) wait for your review (durable memory and skills): run /proposals in holon chat."
        add(ev.BriefDelivered(kind="question", text=text), "brief")
    return out, report


def _done_before(store: Store, job: Job, e: DurableEntry) -> bool:
    """Whether this job already recorded or proposed ``e``'s subject (the job is running again)."""
    return (
        store.durable_entry(entry_id_for(job.key, e.owner, e.subject)) is not None
        or store.proposal(proposal_id_for(job.key, e.owner, e.subject)) is not None
    )


def _propose(
    store: Store, job: Job, c: Candidate, pending: list[ProposalState], newer: list[DurableState],
    add: Callable[[ev.Payload, str], None], report: JobReport,
) -> None:  # fmt: skip
    """Propose ``c`` unless the same proposal waits, or something newer on its subject already
    exists (an active entry or a waiting proposal observed later: an older statement that
    arrived late must not displace it)."""
    e = c.entry
    waiting = [p for p in pending if p.entry is not None and p.entry.owner == e.owner and p.entry.subject == e.subject]
    if any(p.entry is not None and _same_text(p.entry.text, e.text) for p in waiting):
        return
    if newer or any(p.entry is not None and p.entry.observed_us > e.observed_us for p in waiting):
        return
    pid = proposal_id_for(job.key, e.owner, e.subject)
    for old in waiting:
        add(ev.ProposalDismissed(proposal_id=old.proposal_id, reason=f"superseded by proposal {pid}"), f"dismiss:{old.proposal_id}")  # fmt: skip
    add(ev.ProposalCreated(proposal_id=pid, kind="memory", entry=e, reason=f"stated by the operator ({c.rule})"), f"propose:{pid}")  # fmt: skip
    report.proposed += 1


def _skill_for(
    store: Store, agent: AgentState, owner: str, subject: str, text: str, evidence: list[int]
) -> SkillDraft | None:
    """A skill draft when the same commands already completed another work item, else ``None``."""
    commands = procedure_commands(text)
    if not commands:
        return None
    titles = []
    ev_seqs = list(evidence)
    for other in store.durable_entries((owner,)):
        if (
            other.entry.kind == "procedure"
            and other.entry.subject != subject
            and procedure_commands(other.entry.text) == commands
        ):
            titles.append(other.entry.subject.removeprefix("procedure:"))
            ev_seqs += other.entry.evidence
    if not titles:
        return None
    draft = skill_draft(commands, [*titles, subject.removeprefix("procedure:")], sorted(set(ev_seqs)))
    if (Path(agent.home) / "skills" / draft.skill_id).exists():
        return None
    if any(
        p.skill is not None and p.skill.skill_id == draft.skill_id for p in store.proposals(agent_id=agent.agent_id)
    ):
        return None
    return draft


# --- the worker ----------------------------------------------------------------------------------


class Evolver:
    def __init__(
        self,
        store: Store,
        settings: EvolveSettings | None = None,
        *,
        clock: Clock | None = None,
        worker: str | None = None,
        model_extractor: ModelExtractor | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or store.settings.evolve
        self.clock = clock or SystemClock()
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        s = self.settings
        self.queue = JobQueue(store, lease_s=s.lease_s, max_attempts=s.max_attempts, backoff_s=s.backoff_s,
                              backfill=s.backfill)  # fmt: skip
        self.model_extractor = model_extractor
        self.owned: Callable[[], Sequence[str]] | None = None
        """A node of several (RFC 0008): the agents whose jobs it may take (those it owns)."""

    def run_once(self) -> JobReport | None:
        """Queue new jobs, then run the oldest ready one; ``None`` when none was ready.

        A job that fails is recorded on the job (``report.error``), never raised."""
        now = self.clock.now_us()
        self.queue.enqueue(now)
        job = self.queue.lease(self.worker, now, agents=None if self.owned is None else self.owned())
        if job is None:
            return None
        try:
            return self.run(job)
        except Exception as e:  # a job's failure is recorded on the job, never raised into the daemon
            error = f"{type(e).__name__}: {e}"
            state = self.queue.fail(job, error, self.clock.now_us())
            log.warning("evolve.job_failed", job=job.key, attempt=job.attempts, now=state, error=str(e))
            return JobReport(job, error=error)

    def drain(self, *, max_jobs: int = 1_000, stop: Callable[[], bool] | None = None) -> int:
        """Run jobs until none is ready, ``max_jobs`` ran, or ``stop()`` says so; returns how many ran."""
        done = 0
        while done < max_jobs and not (stop is not None and stop()) and self.run_once() is not None:
            done += 1
        return done

    def run(self, job: Job) -> JobReport:
        try:
            agent = self.store.agent(job.agent_id)
        except NotFoundError:
            agent = None
        facts = load_facts(self.store, agent, job) if agent is not None else None
        candidates = extract(facts) if facts is not None else []
        used: ev.EvolveModelUsed | None = None
        if facts is not None and self.model_extractor is not None and self.settings.model_extraction:
            extraction = self.model_extractor(facts, job.key)
            candidates = merge(candidates, extraction.candidates)
            used = extraction.used
        events, report = plan(self.store, agent, job, candidates) if agent is not None else ([], JobReport(job))
        if used is not None:  # every model call is in the ledger, with the output it shaped
            events.insert(0, NewEvent(job.agent_id, used, origin=f"evolve:{job.key}", authority="runtime", turn_id=job.turn_id))  # fmt: skip
        with self.store.ledger.transaction() as tx:
            if events:
                tx.append(*events)
            if not self.queue.complete(tx.conn, job, self.clock.now_us()):
                raise ConflictError(f"evolve job {job.key} lost its lease before it finished")
        if agent is not None:
            for home, skill_id in report.skills:
                write_skill_draft(self.store, home, skill_id)
            if report.scopes or report.verified:
                render_for_sharers(self.store, agent, report.scopes or {"agent", "workspace", "operator"})
        log.info("evolve.job_done", job=job.key, recorded=report.recorded, verified=report.verified, proposed=report.proposed)  # fmt: skip
        return report
