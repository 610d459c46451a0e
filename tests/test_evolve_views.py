"""Durable memory views, recall through the search index, and provenance (RFC 0006).

* The markdown views under ``memory/durable/`` are rebuildable and complete: a daemon start
  brings back a view deleted or edited by hand (or never written: a crash between the append and
  the render) byte for byte, and an agent created on a workspace that already has durable memory
  shows it at once. Rendering twice writes nothing the second time.
* Recall uses the search index (FTS5, Porter stems) as a signal besides shared words; a
  forgotten or superseded entry leaves the index and is never recalled.
* ``holon memory inspect --stale`` / ``--status stale`` and the API's ``status=stale``; a
  verification adds its evidence to the entry's provenance and counts from its observation time.

Real SQLite ledger, real daemon start, the scripted provider for turns; the clock is injected.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.evolve import run_turns

from holon.clock import FakeClock
from holon.daemon import Daemon
from holon.evolve import review
from holon.evolve.render import render_all
from holon.evolve.worker import Evolver
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent


def _turns(store: Store, clock: FakeClock, agent_id: str, *texts: str) -> None:
    run_turns(store, clock, agent_id, [(t, ["Noted."]) for t in texts])


def _views(agent: AgentState) -> dict[str, bytes]:
    root = Path(agent.home) / "memory" / "durable"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _start_and_stop(store: Store, clock: FakeClock) -> None:
    async def go() -> None:
        async with Daemon(store, clock=clock, poll_s=0.01).running(grace_s=1):
            pass

    asyncio.run(go())


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _remembered(store: Store, clock: FakeClock, ws: Path) -> tuple[AgentState, AgentState]:
    """Two agents on ``ws`` with a workspace fact and an accepted operator preference."""
    ada = create_agent(store, "ada", workspace=str(ws))
    bob = create_agent(store, "bob", workspace=str(ws))
    _turns(store, clock, ada.agent_id, "Remember that the db is postgres.", "Always write tests first.")
    Evolver(store, clock=clock).drain()
    review.accept(store, review.list_proposals(store)[0].proposal_id)
    return store.agent("ada"), store.agent("bob")


def test_a_daemon_start_rebuilds_views_deleted_or_edited_by_hand_byte_for_byte(
    store: Store, clock: FakeClock, ws: Path
) -> None:
    ada, bob = _remembered(store, clock, ws)
    before_ada, before_bob = _views(ada), _views(bob)
    assert {"workspace/MEMORY.md", "workspace/fact.md", "operator/MEMORY.md", "operator/preference.md"} <= set(
        before_ada
    )
    assert b"The db is postgres." in before_ada["workspace/MEMORY.md"]
    assert before_bob == before_ada  # one workspace, one operator: the same bytes in both homes

    root_ada = Path(ada.home) / "memory" / "durable"
    root_bob = Path(bob.home) / "memory" / "durable"
    for p in sorted(root_ada.rglob("*"), reverse=True):  # the whole view, gone
        p.unlink() if p.is_file() else p.rmdir()
    (root_bob / "workspace" / "MEMORY.md").write_text("# edited by hand\n")
    (root_bob / "workspace" / "fact.md").write_bytes(b"\x00 garbage")
    (root_bob / "operator" / "stray.md").write_text("not generated")

    _start_and_stop(store, clock)
    assert _views(store.agent("ada")) == before_ada
    assert _views(store.agent("bob")) == before_bob


def test_a_crash_between_the_append_and_the_render_is_repaired_at_start(
    store: Store, clock: FakeClock, ws: Path
) -> None:
    ada, _bob = _remembered(store, clock, ws)
    owner = f"workspace:{ws.resolve()}"
    entry = ev.DurableEntry(scope="workspace", kind="fact", subject="fact:cache", text="The cache is redis.",
                            owner=owner, observed_us=clock.now_us())  # fmt: skip
    # Appended, then "crashed": nothing rendered it.
    store.append(NewEvent(ada.agent_id, ev.DurableRecorded(entry_id="mem-crash", entry=entry), origin="test", authority="runtime"))  # fmt: skip
    assert "The cache is redis." not in (Path(ada.home) / "memory/durable/workspace/MEMORY.md").read_text()

    _start_and_stop(store, clock)
    for name in ("ada", "bob"):
        assert "The cache is redis." in (Path(store.agent(name).home) / "memory/durable/workspace/MEMORY.md").read_text()


def test_rendering_again_writes_nothing(store: Store, clock: FakeClock, ws: Path) -> None:
    ada, _bob = _remembered(store, clock, ws)
    index = Path(ada.home) / "memory/durable/workspace/MEMORY.md"
    stamp = index.stat().st_mtime_ns
    assert render_all(store) == []
    assert index.stat().st_mtime_ns == stamp
    # An agent with nothing in a scope gets no empty view for it (no MEMORY.md files by thousands).
    loner = create_agent(store, "loner")
    assert not (Path(loner.home) / "memory/durable/workspace").exists()
    assert not (Path(loner.home) / "memory/durable/agent").exists()


def test_a_new_agent_on_a_workspace_shows_its_durable_memory_at_once(
    store: Store, clock: FakeClock, ws: Path, tmp_path: Path
) -> None:
    ada, _bob = _remembered(store, clock, ws)
    carol = create_agent(store, "carol", workspace=str(ws))
    assert _views(carol) == _views(store.agent("ada"))
    other = tmp_path / "elsewhere"
    other.mkdir()
    dave = create_agent(store, "dave", workspace=str(other))
    views = _views(dave)
    assert "workspace/MEMORY.md" not in views  # another workspace's facts are not dave's
    assert b"Always write tests first." in views["operator/MEMORY.md"]  # the operator's are everyone's
