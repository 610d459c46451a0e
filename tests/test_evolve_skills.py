"""Accepted skills are opened by the agent through memory_get (``skill:<id>``), and only its own (RFC 0006)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from helpers.evolve import run_turns

from holon.clock import FakeClock
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.errors import NotFoundError, UsageError
from holon.evolve import review
from holon.evolve.worker import Evolver
from holon.ledger import events as ev
from holon.memory.get import MemoryGetRequest, memory_get
from holon.projections import Store
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


def _item(title: str) -> tuple[str, list[object]]:
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


def _proposed_skill(store: Store, clock: FakeClock, agent_id: str) -> str:
    run_turns(store, clock, agent_id, [_item("release the api"), _item("release the worker")])
    Evolver(store, clock=clock).drain()
    [skill] = [p for p in review.list_proposals(store) if p.kind == "skill"]
    assert skill.skill is not None
    return skill.skill.skill_id


def test_an_agent_with_a_workspace_opens_an_accepted_skill_with_memory_get(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    skill_id = _proposed_skill(store, clock, ada.agent_id)
    with pytest.raises(NotFoundError):  # a draft is not a skill until the operator accepts it
        memory_get(store, store.agent("ada"), MemoryGetRequest(ref=f"skill:{skill_id}"))
    [proposal] = [p for p in review.list_proposals(store) if p.kind == "skill"]
    review.accept(store, proposal.proposal_id)

    # The catalog in the prompt names the ref to open.
    view = gather(store, ada.agent_id, inputs=[], started_seq=store.ledger.head() + 1, tools=[])
    catalog = {s.key: s for s in build_sections(view, TokenCounter())}["skills"].renderings[0].text
    assert f"skill:{skill_id}" in catalog and "memory_get" in catalog

    # A real turn: the model follows the catalog and opens the skill through the tool.
    run_turns(store, clock, ada.agent_id, [("Release the docs the usual way.", [
        [("memory_get", {"ref": f"skill:{skill_id}"})],
        "Following the skill.",
    ])])  # fmt: skip
    [result] = [
        e.payload for e in store.ledger.read(0, agent_id=ada.agent_id)
        if isinstance(e.payload, ev.ToolResulted) and e.payload.tool == "memory_get"
    ]  # fmt: skip
    assert result.status == "ok"
    output = result.output if isinstance(result.output, str) else result.output.preview
    assert "## Steps" in output and "`echo build && true`" in output


def test_a_skill_ref_is_the_owners_only_and_well_formed(store: Store, clock: FakeClock, ada) -> None:  # type: ignore[no-untyped-def]
    skill_id = _proposed_skill(store, clock, ada.agent_id)
    [proposal] = [p for p in review.list_proposals(store) if p.kind == "skill"]
    review.accept(store, proposal.proposal_id, text="---\nname: edited\n---\n\n# Edited\n\n1. `make`\n")
    read = memory_get(
        store, store.agent("ada"), MemoryGetRequest(ref=f"skill:{skill_id}", mode="section", heading="Edited")
    )
    assert read.content is not None and "`make`" in read.content and read.kind == "skill"
    bob = create_agent(store, "bob")
    with pytest.raises(NotFoundError):  # another agent's skill, like a missing one
        memory_get(store, bob, MemoryGetRequest(ref=f"skill:{skill_id}"))
    for bad in ("skill:", "skill:../ada/skills", "skill:Skill-UPPER", "skill:a/b", "skill:" + "x" * 65):
        with pytest.raises(UsageError):
            memory_get(store, store.agent("ada"), MemoryGetRequest(ref=bad))
    with pytest.raises(NotFoundError):
        memory_get(store, store.agent("ada"), MemoryGetRequest(ref="skill:skill-nothere"))
