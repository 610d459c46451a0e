"""Evolve (RFC 0006): extraction, the job queue, proposals, staleness, supersession, recall, replay."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.evolve import DAY_S, run_turns

from holon.clock import FakeClock
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.errors import ConflictError, NotFoundError
from holon.evolve import review
from holon.evolve.extract import TurnFacts, blocker_signature, extract, subject_key
from holon.evolve.jobs import JobQueue
from holon.evolve.worker import Evolver, load_facts
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.memory.recall import RecallLimits, recall
from holon.projections import Store
from holon.projections.durable import DurableState
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


def _msg(seq: int, text: str, authority: str = "operator") -> Event:
    p = ev.MessageReceived(text=text)
    return Event(
        seq, f"e{seq}", "agt", p.type, 1, seq * 1000, "operator:test", authority, "t1", None, None, None, None, p, "h"
    )  # type: ignore[arg-type]


def _extract(*texts: str, authority: str = "operator"):  # type: ignore[no-untyped-def]
    facts = TurnFacts(
        "agt", "t1", "agent:agt", "workspace:/w", [_msg(i + 1, t, authority) for i, t in enumerate(texts)]
    )
    return extract(facts)


# --- extraction --------------------------------------------------------------------------------


def test_explicit_preferences_and_identity_are_proposals_in_the_operator_scope() -> None:
    found = {
        c.entry.subject: c for c in _extract("Always use tabs for indentation. My name is Ada. I prefer short answers.")
    }
    assert set(found) == {"pref:use tab", "identity:name", "pref:short answer"}
    assert all(c.proposal and c.entry.scope == "operator" and c.entry.owner == "operator" for c in found.values())
    assert found["identity:name"].entry.kind == "identity"
    assert found["pref:use tab"].entry.stale_after_s is None


def test_opposite_preferences_share_a_subject_so_the_newer_supersedes() -> None:
    assert subject_key("pref", "Always use tabs for indentation", n=2) == subject_key("pref", "Never use tabs!", n=2)


def test_questions_other_agents_and_chatter_state_nothing() -> None:
    assert _extract("Should we always use tabs?", "Can you check the build?", "Thanks, looks good.") == []
    assert _extract("Always use tabs.", authority="external") == []  # not the operator's word


def test_workspace_facts_name_their_subject() -> None:
    [first] = _extract("Remember that the staging server is db1.example.com.")
    [second] = _extract("The staging server is now db2.example.com")
    assert first.entry.subject == second.entry.subject == "fact:stag server"
    assert not first.proposal and first.entry.scope == "workspace" and first.entry.owner == "workspace:/w"
    assert first.entry.text == "The staging server is db1.example.com."
    assert first.entry.verification == "verify_before_use" and first.entry.stale_after_s == 30 * DAY_S


def test_chinese_statements() -> None:
    kinds = sorted((c.entry.kind, c.proposal) for c in _extract("以后都用中文回答。我叫小明。"))
    assert kinds == [("identity", True), ("preference", True)]


def test_blocker_signatures_ignore_numbers_paths_and_quotes() -> None:
    a, _ = blocker_signature("run_command", "exit code: 2\nls: cannot access '/tmp/a1': No such file or directory")
    b, _ = blocker_signature("run_command", "exit code: 2\nls: cannot access '/var/b22': No such file or directory")
    assert a == b


# --- the job queue -----------------------------------------------------------------------------


def _turns(store: Store, clock: FakeClock, agent_id: str, *texts: str) -> None:
    run_turns(store, clock, agent_id, [(t, ["ok"]) for t in texts])


def test_one_job_per_settled_turn_however_often_it_is_queued(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "hello", "again")
    queue = JobQueue(store)
    assert queue.enqueue(clock.now_us()) == 2
    assert queue.enqueue(clock.now_us()) == 0
    assert queue.counts()["queued"] == 2


def test_an_expired_lease_is_taken_again_and_a_job_dies_after_its_last_attempt(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "hello")
    # The caller's (fake) clock times the lease on both engines here; the database's clock, the
    # default on PostgreSQL, is the next test's.
    queue = JobQueue(store, lease_s=10, max_attempts=2, backoff_s=1, lease_time="caller")
    queue.enqueue(clock.now_us())
    job = queue.lease("w1", clock.now_us())
    assert job is not None and job.attempts == 1
    assert queue.lease("w2", clock.now_us()) is None  # leased
    clock.advance(seconds=11)
    again = queue.lease("w2", clock.now_us())
    assert again is not None and again.attempts == 2 and again.lease_owner == "w2"
    # The first worker's lease is gone: it may not complete or fail the job any more.
    with store.ledger.transaction() as tx:
        assert not queue.complete(tx.conn, job, clock.now_us())
    assert queue.fail(job, "late", clock.now_us()) == "lost"
    assert queue.fail(again, "boom", clock.now_us()) == "dead"
    assert queue.counts()["dead"] == 1
    assert queue.jobs(status="dead")[0].last_error == "boom"
    assert queue.retry_dead(clock.now_us()) == 1


def test_on_postgresql_a_lease_runs_out_on_the_database_clock_whatever_the_workers_clocks_say(
    store: Store, clock: FakeClock, ada, engine: EngineTarget
) -> None:  # type: ignore[no-untyped-def]
    """RFC 0008 step 6: nodes share the queue, so a lease is written and expires in the database's
    time. Workers whose clocks are an hour apart cannot steal a live lease, and the job is taken
    again once the database says the lease ran out (polled, no fixed sleep)."""
    if engine.name == "sqlite":
        with pytest.raises(ValueError, match="needs PostgreSQL"):
            JobQueue(store, lease_time="database")
        assert JobQueue(store).lease_time == "caller"
        return
    _turns(store, clock, ada.agent_id, "hello")
    queue = JobQueue(store, lease_s=0.3)
    assert queue.lease_time == "database"
    queue.enqueue(clock.now_us())
    job = queue.lease("w1", clock.now_us())
    assert job is not None and job.lease_until_us is not None
    (db_now,) = store.ledger.query("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)", ())[0]
    assert abs(job.lease_until_us - 300_000 - db_now) < 60_000_000  # the database's time, not the fake clock's
    assert abs(job.lease_until_us - clock.now_us()) > 3600 * 1_000_000
    hour_ahead = clock.now_us() + 3600 * 1_000_000
    assert queue.lease("w2", hour_ahead) is None  # a fast clock does not expire a live lease
    deadline = time.monotonic() + 10
    while (again := queue.lease("w2", clock.now_us())) is None:  # a stopped clock does not keep it
        assert time.monotonic() < deadline, "the lease never ran out on the database's clock"
        time.sleep(0.05)
    assert again.attempts == 2 and again.lease_owner == "w2"
    with store.ledger.transaction() as tx:
        assert not queue.complete(tx.conn, job, clock.now_us())
        assert queue.complete(tx.conn, again, clock.now_us())
    assert queue.counts()["done"] == 1


def test_a_failing_job_backs_off_and_never_blocks_the_others(store: Store, clock: FakeClock, ada, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _turns(
        store,
        clock,
        ada.agent_id,
        "Remember that the build host is ci7.",
        "Remember that the cache dir is /var/cache/x.",
    )
    evolver = Evolver(store, clock=clock)
    from holon.evolve import worker

    real = worker.extract
    calls = []

    def flaky(facts):  # type: ignore[no-untyped-def]
        calls.append(facts.turn_id)
        if len(calls) == 1:
            raise RuntimeError("extractor fell over")
        return real(facts)

    monkeypatch.setattr(worker, "extract", flaky)
    assert evolver.drain() == 2  # two attempts: the first job failed (it backs off), the second ran
    assert evolver.queue.counts() == {"queued": 1, "running": 0, "done": 1, "dead": 0}
    clock.advance(seconds=60)
    assert evolver.drain() == 1
    assert evolver.queue.counts()["done"] == 2
    assert len(review.list_entries(store, status="active")) == 2


# --- proposals ---------------------------------------------------------------------------------


def test_preferences_are_never_durable_until_the_operator_accepts(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Always answer in English. My name is Ada.")
    Evolver(store, clock=clock).drain()
    assert review.list_entries(store) == []
    pending = {p.entry.kind: p for p in review.list_proposals(store)}  # type: ignore[union-attr]
    assert set(pending) == {"preference", "identity"}
    # Unconfirmed proposals may be shown to the turn, marked as such.
    shown = recall(store, store.agent("ada"), "answer", clock.now_us())
    assert all(r.unconfirmed for r in shown.entries) and len(shown.entries) == 2

    edited = review.accept(store, pending["preference"].proposal_id[:5], text="Always answer in British English.")
    assert edited.outcome == "accepted"
    [entry] = review.list_entries(store, status="active")
    assert (
        entry.entry.text == "Always answer in British English."
        and entry.proposal_id == pending["preference"].proposal_id
    )
    assert entry.source == "proposal"
    review.dismiss(store, pending["identity"].proposal_id, reason="not relevant")
    assert len(review.list_entries(store)) == 1
    with pytest.raises(ConflictError):
        review.accept(store, pending["identity"].proposal_id)
    with pytest.raises(NotFoundError):
        review.accept(store, "p-nothere")
    # The markdown view of the operator scope shows the accepted entry.
    index = Path(store.agent("ada").home) / "memory" / "durable" / "operator" / "MEMORY.md"
    assert "British English" in index.read_text()


def test_two_surfaces_deciding_at_once_record_one_decision(store: Store, clock: FakeClock, ada, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The CLI and the daemon's API may both read a proposal as pending before either appends."""
    _turns(store, clock, ada.agent_id, "Always answer in English.")
    Evolver(store, clock=clock).drain()
    [stale] = review.list_proposals(store)
    review.accept(store, stale.proposal_id, origin="operator:api")
    monkeypatch.setattr(review, "find_proposal", lambda _store, _ref: stale)  # the other surface's view
    with pytest.raises(ConflictError, match="decided elsewhere"):
        review.dismiss(store, stale.proposal_id)
    with pytest.raises(ConflictError, match="decided elsewhere"):
        review.accept(store, stale.proposal_id, text="Answer in French.")
    review.accept(store, stale.proposal_id, origin="operator:cli")  # the same decision again: a no-op
    types = [e.type for e in store.ledger.read(0) if e.type.startswith(("proposal.", "durable.recorded"))]
    assert types == ["proposal.created", "proposal.accepted", "durable.recorded"]
    assert len(review.list_entries(store, status="active")) == 1


def test_a_restated_preference_is_not_proposed_twice(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Never push to main.", "Never push to main.")
    Evolver(store, clock=clock).drain()
    assert len(review.list_proposals(store)) == 1


# --- supersession, staleness, forgetting ------------------------------------------------------------


def test_a_changed_fact_supersedes_the_old_one_and_stale_entries_say_so(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    evolver = Evolver(store, clock=clock)
    _turns(store, clock, ada.agent_id, "Remember that the staging server is db1.example.com.")
    evolver.drain()
    clock.advance(seconds=10 * DAY_S)
    _turns(store, clock, ada.agent_id, "The staging server is now db2.example.com.")
    evolver.drain()
    entries = {s.entry.text: s for s in review.list_entries(store)}
    old, new = entries["The staging server is db1.example.com."], entries["The staging server is now db2.example.com."]
    assert (old.status, old.superseded_by) == ("superseded", new.entry_id) and new.status == "active"

    agent = store.agent("ada")
    [fresh] = recall(store, agent, "staging server", clock.now_us()).entries
    assert fresh.ref == f"durable:{new.entry_id}" and not fresh.stale
    assert fresh.note == "observed today; verify before relying on it"
    clock.advance(seconds=40 * DAY_S)
    [stale] = recall(store, agent, "staging server", clock.now_us()).entries
    assert stale.stale and stale.note == "observed 40 days ago; verify before relying on it; STALE"
    assert stale.score < fresh.score

    # Seen again: freshness restarts.
    _turns(store, clock, ada.agent_id, "The staging server is now db2.example.com.")
    evolver.drain()
    [again] = recall(store, agent, "staging server", clock.now_us()).entries
    assert not again.stale and again.ref == fresh.ref

    review.forget(store, new.entry_id, reason="moved off staging")
    assert recall(store, agent, "staging server", clock.now_us()).entries == ()
    assert review.find_entry(store, new.entry_id).status == "forgotten"


def _record(store: Store, agent_id: str, n: int, *, scope: str, kind: str, owner: str, subject: str, text: str,
            stale_after_s: int | None = None, observed_us: int = 1) -> str:  # fmt: skip
    entry = ev.DurableEntry(scope=scope, kind=kind, subject=subject, text=text, owner=owner,  # type: ignore[arg-type]
                            stale_after_s=stale_after_s, observed_us=observed_us)  # fmt: skip
    store.append(
        NewEvent(agent_id, ev.DurableRecorded(entry_id=f"mem-{n}", entry=entry), origin="test", authority="runtime")
    )
    return f"mem-{n}"


def test_recall_keeps_to_its_caps(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    aid, me, ws = ada.agent_id, f"agent:{ada.agent_id}", f"workspace:{Path(ada.workspace).resolve()}"
    for i in range(6):
        _record(
            store,
            aid,
            i,
            scope="operator",
            kind="preference",
            owner="operator",
            subject=f"pref:p{i}",
            text=f"Always do p{i} deploys.",
        )
    for i in range(6, 10):
        _record(
            store,
            aid,
            i,
            scope="workspace",
            kind="fact",
            owner=ws,
            subject=f"fact:f{i}",
            text=f"The deploy target f{i} is set.",
        )
    _record(store, aid, 10, scope="agent", kind="reference", owner=me, subject="ref:old", text="Deploy docs at wiki/deploy.",
            stale_after_s=1, observed_us=1)  # fmt: skip
    result = recall(
        store, store.agent("ada"), "deploy", clock.now_us(), RecallLimits(limit=5, operator_cap=2, pending=0)
    )
    kinds = [r.kind for r in result.entries]
    assert len(result.entries) == 5
    assert sum(1 for r in result.entries if r.scope == "operator") == 2
    assert kinds.count("fact") == 3  # the per-type cap for facts
    assert len({r.subject for r in result.entries}) == 5
    reasons = dict(result.left_out)
    assert reasons["durable:mem-10"] == "stale reference"
    assert any("operator-scope cap" in why or "recall limit" in why for why in reasons.values())

    # With nothing else competing, operator entries may take every place.
    alone = recall(store, store.agent("ada"), "deploy", clock.now_us(),
                   RecallLimits(limit=5, operator_cap=2, pending=0, type_caps={"preference": 5}))  # fmt: skip
    assert sum(1 for r in alone.entries if r.scope == "operator") >= 2


def test_an_agent_recalls_only_what_its_scopes_allow(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    bob = create_agent(store, "bob")
    _record(
        store,
        bob.agent_id,
        1,
        scope="agent",
        kind="fact",
        owner=f"agent:{bob.agent_id}",
        subject="fact:bob",
        text="Bob's deploy secret.",
    )
    _record(
        store,
        bob.agent_id,
        2,
        scope="operator",
        kind="preference",
        owner="operator",
        subject="pref:x",
        text="Always deploy on Mondays.",
    )
    seen = [r.text for r in recall(store, store.agent("ada"), "deploy", clock.now_us()).entries]
    assert seen == ["Always deploy on Mondays."]


def test_the_prompt_carries_recalled_memory_with_freshness_notes(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Remember that the release branch is rel-9.")
    Evolver(store, clock=clock).drain()
    clock.advance(seconds=3 * DAY_S)
    [inp] = store.append(
        NewEvent(
            ada.agent_id,
            ev.MessageReceived(text="cut the release branch"),
            origin="operator:test",
            authority="operator",
        )
    )
    view = gather(store, ada.agent_id, inputs=[inp.seq], started_seq=store.ledger.head() + 1, tools=[])
    sections = {s.key: s for s in build_sections(view, TokenCounter())}
    text = sections["durable"].renderings[0].text
    assert "The release branch is rel-9. (observed 3 days ago; verify before relying on it)" in text


def test_replay_rebuilds_durable_memory_byte_for_byte(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(
        store,
        clock,
        ada.agent_id,
        "Remember that the api port is 8080. Always run the linter.",
        "The api port is now 9090.",
    )
    Evolver(store, clock=clock).drain()
    review.accept(store, review.list_proposals(store)[0].proposal_id)
    store.write_projections()  # the projector writes its rows every few commits: write them now
    before = store.ledger.query(
        "SELECT kind, key, state FROM projection_rows WHERE kind IN ('durable', 'proposal') ORDER BY kind, key"
    )
    assert len(before) == 4
    result = store.replay()
    assert result.ok, result
    after = store.ledger.query(
        "SELECT kind, key, state FROM projection_rows WHERE kind IN ('durable', 'proposal') ORDER BY kind, key"
    )
    assert after == before
    assert all(isinstance(DurableState.model_validate_json(s), DurableState) for k, _key, s in after if k == "durable")


def test_markdown_views_are_rewritten_only_for_changed_scopes(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    evolver = Evolver(store, clock=clock)
    _turns(store, clock, ada.agent_id, "Remember that the db is postgres.")
    evolver.drain()
    root = Path(store.agent("ada").home) / "memory" / "durable"
    ws_index = root / "workspace" / "MEMORY.md"
    assert "The db is postgres." in ws_index.read_text()
    stamp = ws_index.stat().st_mtime_ns
    _turns(store, clock, ada.agent_id, "Always write tests first.")
    evolver.drain()
    review.accept(store, review.list_proposals(store)[0].proposal_id)
    assert ws_index.stat().st_mtime_ns == stamp
    assert "Always write tests first." in (root / "operator" / "MEMORY.md").read_text()


def test_a_procedure_that_completes_two_work_items_is_proposed_as_a_skill(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    def item(title: str) -> tuple[str, list[object]]:
        return (
            f"Please {title}.",
            [
                [("create_work_item", {"title": title, "objective": f"{title} done"})],
                [("run_command", {"command": "echo build && true", "wait_s": 30})],
                [("run_command", {"command": "echo test", "wait_s": 30})],
                [("complete_work_item", {"report": "built and tested"})],
                "done",
            ],
        )

    run_turns(store, clock, ada.agent_id, [item("release the api"), item("release the worker")])
    Evolver(store, clock=clock).drain()
    procedures = [s for s in review.list_entries(store) if s.entry.kind == "procedure"]
    assert len(procedures) == 2 and "- `echo build && true`" in procedures[0].entry.text
    [skill] = [p for p in review.list_proposals(store) if p.kind == "skill"]
    assert skill.skill is not None
    home = Path(store.agent("ada").home)
    assert (home / "evolve" / "skills" / skill.skill.skill_id / "SKILL.md").exists()
    decision = review.accept(store, skill.proposal_id)
    assert decision.skill_path == str(home / "skills" / skill.skill.skill_id / "SKILL.md")
    assert not (home / "evolve" / "skills" / skill.skill.skill_id).exists()
    view = gather(store, ada.agent_id, inputs=[], started_seq=store.ledger.head() + 1, tools=[])
    assert view.skills and view.skills[0][0] == skill.skill.skill_id
    catalog = {s.key: s for s in build_sections(view, TokenCounter())}["skills"].renderings[0].text
    assert skill.skill.skill_id in catalog


def test_a_job_reads_the_episode_its_work_item_was_sealed_into(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    run_turns(store, clock, ada.agent_id, [("Please bump the version.", [
        [("run_command", {"command": "echo before the item", "wait_s": 30})],
        [("create_work_item", {"title": "bump", "objective": "version bumped"})],
        [("run_command", {"command": "echo bump", "wait_s": 30})],
        [("complete_work_item", {"report": "bumped"})],
        "done",
    ])])  # fmt: skip
    queue = JobQueue(store)
    queue.enqueue(clock.now_us())
    job = queue.lease("test", clock.now_us())
    assert job is not None
    facts = load_facts(store, store.agent("ada"), job)
    assert facts is not None
    [episode] = [p for p in facts.recent_episodes if p.work_item_id]
    [(title, span)] = facts.completed_items.values()
    assert title == "bump" and span
    assert all(episode.seq_start <= e.seq <= episode.seq_end for e in span)
    # The episode covers the work from the turn's start, so a command run before the item was
    # opened counts as part of it (the item's own opened seq would have left it out).
    commands = [str(e.payload.arguments) for e in span if e.type == "tool.called"]
    assert any("echo before the item" in c for c in commands) and any("echo bump" in c for c in commands)


def test_a_failure_seen_in_two_turns_becomes_a_blocker(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    failing = [[("run_command", {"command": "ls /nonexistent-dir-1", "wait_s": 30})], "it failed"]
    run_turns(store, clock, ada.agent_id, [("list it", failing)])
    evolver = Evolver(store, clock=clock)
    evolver.drain()
    assert review.list_entries(store) == []  # once is not a pattern
    failing2 = [[("run_command", {"command": "ls /nonexistent-dir-22", "wait_s": 30})], "failed again"]
    run_turns(store, clock, ada.agent_id, [("list it again", failing2)])
    evolver.drain()
    [blocker] = review.list_entries(store)
    assert blocker.entry.kind == "blocker" and blocker.entry.verification == "recheck"
    assert "No such file or directory" in blocker.entry.text and "2 times in 2 turns" in blocker.entry.text


def test_a_background_agents_brief_says_when_proposals_wait(store: Store, clock: FakeClock) -> None:
    monitor = create_agent(store, "nightly", settings={"background": True})
    _turns(store, clock, monitor.agent_id, "From now on, never email the customers directly.")
    Evolver(store, clock=clock).drain()
    [brief] = [e.payload for e in store.ledger.read(0, agent_id=monitor.agent_id) if e.type == "brief.delivered"]
    assert brief.kind == "question" and "1 proposal(s) wait for your review" in brief.text


def test_memory_get_reads_a_recalled_entry_with_its_provenance_and_only_for_its_owners(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    from holon.memory.get import MemoryGetRequest, memory_get

    _turns(store, clock, ada.agent_id, "Remember that the release branch is rel-9.")
    Evolver(store, clock=clock).drain()
    [entry] = review.list_entries(store)
    read = memory_get(store, store.agent("ada"), MemoryGetRequest(ref=f"durable:{entry.entry_id}"))
    assert (
        read.content is not None
        and "The release branch is rel-9." in read.content
        and "evidence: event:" in read.content
    )
    bob = create_agent(store, "bob")
    with pytest.raises(NotFoundError):
        memory_get(store, bob, MemoryGetRequest(ref=f"durable:{entry.entry_id}"))
