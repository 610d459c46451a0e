"""Evolve rules the other tests leave open (RFC 0006): the backoff schedule, recall's one entry per
subject and every per-type cap, and which commands make a procedure."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.evolve import run_turns

from holon.clock import FakeClock
from holon.evolve import review
from holon.evolve.jobs import JobQueue
from holon.evolve.worker import Evolver
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory.recall import TYPE_CAPS, RecallLimits, recall
from holon.projections import Store

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


# --- the backoff schedule ----------------------------------------------------------------------


def test_a_failing_job_backs_off_exponentially_then_dies(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    run_turns(store, clock, ada.agent_id, [("hello", ["ok"])])
    queue = JobQueue(store, max_attempts=4, backoff_s=5)
    queue.enqueue(clock.now_us())
    waits = []
    job = queue.lease("w", clock.now_us())
    while job is not None and queue.fail(job, f"boom {job.attempts}", clock.now_us()) == "queued":
        waited = 0
        while (job := queue.lease("w", clock.now_us())) is None:
            clock.advance(seconds=1)
            waited += 1
        waits.append(waited)
    assert waits == [5, 10, 20]  # backoff_s * 2^(attempt-1) after attempts 1, 2, 3
    assert queue.counts()["dead"] == 1
    [dead] = queue.jobs(status="dead")
    assert (dead.attempts, dead.last_error) == (4, "boom 4")
    clock.advance(seconds=3600)
    assert queue.lease("w", clock.now_us()) is None  # dead stays dead until an operator retries it
    assert queue.retry_dead(clock.now_us()) == 1
    again = queue.lease("w", clock.now_us())
    assert again is not None and again.attempts == 1


# --- recall --------------------------------------------------------------------------------------


def _record(store: Store, agent_id: str, n: int, *, scope: str, kind: str, owner: str, subject: str, text: str) -> None:
    entry = ev.DurableEntry(scope=scope, kind=kind, subject=subject, text=text, owner=owner,  # type: ignore[arg-type]
                            stale_after_s=None, observed_us=1)  # fmt: skip
    store.append(
        NewEvent(agent_id, ev.DurableRecorded(entry_id=f"mem-{n}", entry=entry), origin="test", authority="runtime")
    )


def test_recall_shows_one_entry_per_subject_across_scopes(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    aid, ws = ada.agent_id, f"workspace:{Path(ada.workspace).resolve()}"
    _record(store, aid, 1, scope="workspace", kind="fact", owner=ws, subject="fact:db", text="The db is postgres.")
    _record(
        store, aid, 2, scope="agent", kind="fact", owner=f"agent:{aid}", subject="fact:db", text="The db is sqlite."
    )
    _record(store, aid, 3, scope="agent", kind="fact", owner=f"agent:{aid}", subject="fact:cache", text="The db cache is redis.")  # fmt: skip
    result = recall(store, store.agent("ada"), "which db", clock.now_us())
    subjects = [r.subject for r in result.entries]
    assert sorted(subjects) == ["fact:cache", "fact:db"]
    assert ("another entry of the same subject was chosen") in dict(result.left_out).values()


def test_every_per_type_cap_holds(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    aid, me = ada.agent_id, f"agent:{ada.agent_id}"
    n = 0
    for kind in TYPE_CAPS:
        for i in range(TYPE_CAPS[kind] + 2):
            n += 1
            _record(
                store, aid, n, scope="agent", kind=kind, owner=me, subject=f"{kind}:s{i}", text=f"deploy {kind} {i}"
            )
    limits = RecallLimits(limit=100, operator_cap=100, pending=0)
    result = recall(store, store.agent("ada"), "deploy", clock.now_us(), limits)
    counts = {kind: sum(1 for r in result.entries if r.kind == kind) for kind in TYPE_CAPS}
    assert counts == TYPE_CAPS
    assert sum(1 for why in dict(result.left_out).values() if why.startswith("over the cap for")) == 2 * len(TYPE_CAPS)


# --- procedures ----------------------------------------------------------------------------------


def test_a_procedure_lists_only_the_commands_that_exited_0_in_a_completed_item(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    run_turns(store, clock, ada.agent_id, [
        ("Please build it.", [
            [("create_work_item", {"title": "build it", "objective": "built"})],
            [("run_command", {"command": "echo compiled", "wait_s": 30})],
            [("run_command", {"command": "sh -c 'exit 3'", "wait_s": 30})],
            [("run_command", {"command": "ls /no-such-dir-anywhere", "wait_s": 30})],
            [("complete_work_item", {"report": "built"})],
            "done",
        ]),
        ("Please ship it.", [  # an item that is never completed teaches nothing
            [("create_work_item", {"title": "ship it", "objective": "shipped"})],
            [("run_command", {"command": "echo shipping", "wait_s": 30})],
            "still working on it",
        ]),
    ])  # fmt: skip
    outputs = [
        e.payload.output for e in store.ledger.read(0)
        if isinstance(e.payload, ev.ToolResulted) and e.payload.tool == "run_command"
    ]  # fmt: skip
    assert [str(o).split("\n")[0] for o in outputs] == ["exit code: 0", "exit code: 3", "exit code: 2", "exit code: 0"]
    Evolver(store, clock=clock).drain()
    [procedure] = [s for s in review.list_entries(store) if s.entry.kind == "procedure"]
    assert procedure.entry.subject == "procedure:build"
    assert "- `echo compiled`" in procedure.entry.text
    assert "exit 3" not in procedure.entry.text and "no-such-dir" not in procedure.entry.text
    assert "shipping" not in procedure.entry.text


# --- extraction quality --------------------------------------------------------------------------


def test_a_reported_state_is_not_a_fact_but_a_changed_value_is(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    said = "The build is now green. This is now done. The tests are now passing. The api port is now 9090."
    run_turns(store, clock, ada.agent_id, [(said, ["ok"])])
    Evolver(store, clock=clock).drain()
    assert [s.entry.text for s in review.list_entries(store)] == ["The api port is now 9090."]


def test_contradicting_choices_share_a_subject_so_the_newer_wins(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    evolver = Evolver(store, clock=clock)
    run_turns(store, clock, ada.agent_id, [("Always reply in English.", ["ok"])])
    evolver.drain()
    [english] = review.list_proposals(store)
    review.accept(store, english.proposal_id)
    run_turns(store, clock, ada.agent_id, [("Always reply in French.", ["ok"])])
    evolver.drain()
    [french] = review.list_proposals(store)
    assert french.entry is not None and french.entry.text == "Always reply in French."
    review.accept(store, french.proposal_id)
    entries = {s.entry.text: s for s in review.list_entries(store)}
    assert entries["Always reply in French."].status == "active"
    assert entries["Always reply in English."].status == "superseded"  # kept, never both active
    [shown] = recall(store, store.agent("ada"), "reply", clock.now_us()).entries
    assert shown.text == "Always reply in French."


def test_a_blocker_seen_again_is_verified_not_superseded(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    evolver = Evolver(store, clock=clock)
    for i in range(4):
        failing = [[("run_command", {"command": f"ls /nonexistent-dir-{i}", "wait_s": 30})], "it failed"]
        run_turns(store, clock, ada.agent_id, [(f"list it {i}", failing)])
        evolver.drain()
    [blocker] = review.list_entries(store, status=None)  # one entry, no pile of superseded ones
    assert blocker.status == "active" and blocker.entry.kind == "blocker"
    verified = [e for e in store.ledger.read(0) if e.type == "durable.verified"]
    # Freshness counts from the last sighting's observation (not from when its job ran).
    assert len(verified) == 2 and blocker.verified_us == verified[-1].payload.observed_us  # type: ignore[union-attr]
