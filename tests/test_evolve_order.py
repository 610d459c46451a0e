"""Evolve jobs that finish out of order, or run again, never undo newer memory (RFC 0006).

A job's lease is held by a slow worker while a newer turn's job runs; the slow one then finishes.
The ledger is real, the clock injected; nothing of holon's own is faked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.evolve import run_turns

from holon.clock import FakeClock
from holon.evolve import review
from holon.evolve.worker import Evolver
from holon.memory.recall import recall
from holon.projections import Store
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


def _turns(store: Store, clock: FakeClock, agent_id: str, *texts: str) -> None:
    run_turns(store, clock, agent_id, [(t, ["ok"]) for t in texts])


def _newest_job_first(store: Store, clock: FakeClock) -> Evolver:
    """The older turn's job is leased by a slow worker; the newer one runs; then the slow one finishes."""
    evolver = Evolver(store, clock=clock, worker="fast")
    evolver.queue.enqueue(clock.now_us())
    held = evolver.queue.lease("slow", clock.now_us())
    assert held is not None
    report = evolver.run_once()
    assert report is not None and report.job.settled_seq > held.settled_seq and report.error is None
    clock.advance(seconds=5)
    evolver.run(held)
    counts = evolver.queue.counts()
    assert (counts["queued"], counts["running"], counts["dead"]) == (0, 0, 0)
    return evolver


def _durable_events(store: Store) -> list[tuple[int, str]]:
    return [(e.seq, e.type) for e in store.ledger.read(0) if e.type.startswith(("durable.", "proposal.", "brief."))]


def test_an_older_fact_finishing_late_is_history_not_the_current_fact(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Remember that the staging server is db1.", "The staging server is now db2.")
    _newest_job_first(store, clock)
    entries = {s.entry.text: s for s in review.list_entries(store)}
    old, new = entries["The staging server is db1."], entries["The staging server is now db2."]
    assert new.status == "active"
    assert (old.status, old.superseded_by) == ("superseded", new.entry_id)  # kept as history, not deleted
    [shown] = recall(store, store.agent("ada"), "staging server", clock.now_us()).entries
    assert shown.text == "The staging server is now db2."
    store.write_projections()  # the projector writes its rows every few commits: write them now
    before = store.ledger.query("SELECT kind, key, state FROM projection_rows WHERE kind = 'durable' ORDER BY key")
    assert store.replay().ok
    after = store.ledger.query("SELECT kind, key, state FROM projection_rows WHERE kind = 'durable' ORDER BY key")
    assert after == before
    view = (Path(store.agent("ada").home) / "memory" / "durable" / "workspace" / "MEMORY.md").read_text()
    assert "db2" in view and "db1" not in view


def test_an_older_sighting_of_the_current_fact_does_not_restart_its_freshness(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Remember that the cache is redis.")
    Evolver(store, clock=clock).drain()
    _turns(store, clock, ada.agent_id, "Remember that the cache is redis.", "Remember that the cache is redis.")
    _newest_job_first(store, clock)
    [entry] = review.list_entries(store)
    verified = [e for e in store.ledger.read(0) if e.type == "durable.verified"]
    assert len(verified) == 1  # the newer sighting; the older one, finishing later, adds nothing
    assert entry.verified_us == verified[0].payload.observed_us  # type: ignore[union-attr]  # the newer sighting's time


def test_an_older_preference_finishing_late_does_not_displace_the_newer_proposal(
    store: Store, clock: FakeClock, ada
) -> None:  # type: ignore[no-untyped-def]
    _turns(store, clock, ada.agent_id, "Always use tabs.", "Never use tabs.")
    _newest_job_first(store, clock)
    assert [p.entry.text for p in review.list_proposals(store)] == ["Never use tabs."]  # type: ignore[union-attr]


def test_running_every_finished_job_again_changes_nothing(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    _turns(
        store, clock, ada.agent_id,
        "Remember that the staging server is db1. Always tag releases.",
        "The staging server is now db2. My name is Ada.",
        "The staging server is now db2.",
    )  # fmt: skip
    evolver = Evolver(store, clock=clock)
    assert evolver.drain() == 3
    before = _durable_events(store)
    assert before
    # An operator re-arms every job (as a retry of dead jobs would).
    with store.ledger.transaction() as tx:
        tx.conn.execute("UPDATE evolve_jobs SET status = 'queued', attempts = 0, not_before_us = 0")
    clock.advance(seconds=60)
    assert evolver.drain() == 3
    assert evolver.queue.counts() == {"queued": 0, "running": 0, "done": 3, "dead": 0}
    assert _durable_events(store) == before  # no conflict, no duplicate, no spurious verification


# --- a workspace shared by two agents --------------------------------------------------------------


def test_two_agents_on_one_workspace_see_the_same_views_and_recall(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    ws = tmp_path / "shared"
    ws.mkdir()
    ada = create_agent(store, "ada", workspace=str(ws))
    create_agent(store, "cy", workspace=str(ws) + "/")  # the same directory, spelled differently
    create_agent(store, "loner")
    _turns(store, clock, ada.agent_id, "Remember that the db is postgres.")
    Evolver(store, clock=clock).drain()

    def index(name: str) -> Path:
        return Path(store.agent(name).home) / "memory" / "durable" / "workspace" / "MEMORY.md"

    assert "The db is postgres." in index("ada").read_text()
    assert "The db is postgres." in index("cy").read_text()  # recorded through ada, shown to cy too
    assert not index("loner").exists()
    [seen] = recall(store, store.agent("cy"), "db", clock.now_us()).entries
    assert seen.text == "The db is postgres."
    assert recall(store, store.agent("loner"), "db", clock.now_us()).entries == ()

    [entry] = review.list_entries(store)
    review.forget(store, entry.entry_id)
    for name in ("ada", "cy"):
        assert "postgres" not in index(name).read_text(), name  # no stale copy left for search to find
        assert recall(store, store.agent(name), "db", clock.now_us()).entries == ()
