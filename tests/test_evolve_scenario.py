"""Issue 7's 50-turn scenario, run by the real daemon with the model behind litellm's HTTP path.

An operator states a preference early (proposed, then accepted), a workspace fact changes midway
and a command fails the same way in two turns. At the end, recall shows the accepted preference,
the current fact (the old one superseded) and the blocker, within its caps and token budget.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from holon.clock import SystemClock
from holon.config import load_settings, resolve_home
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.daemon import Daemon
from holon.evolve import review
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory.recall import recall
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelSettings
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.testing import FakeLLM

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


TURNS = 50
PREFERENCE = "Always use tabs for indentation."
OLD_FACT = "Remember that the staging server is db1.example.com."
NEW_FACT = "The staging server is now db2.example.com."
FAILING = "check the fixtures"


def _operator_text(i: int) -> str:
    if i == 1:
        return f"Hi, we are setting up the billing service. {PREFERENCE}"
    if i == 4:
        return OLD_FACT
    if i == 25:
        return NEW_FACT
    if i in (15, 35):
        return f"Please {FAILING} before the next step."
    topics = ["the parser", "the invoice totals", "the retry logic", "the export job", "the test data"]
    return f"Let us look at {topics[i % len(topics)]} next (step {i})."


def _model(body: dict[str, Any]) -> dict[str, Any]:
    """Answer like a terse agent; run the failing command when asked to check the fixtures."""
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return {"content": "The command failed; I will report it."}
    content = last.get("content")
    text = content if isinstance(content, str) else str(content)
    if FAILING in text:
        return {
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": "ls /holon-missing-fixtures", "wait_s": 30}}
            ]
        }
    return {"content": "Noted."}


@pytest.mark.slow  # fifty turns with commands
def test_fifty_turns_preference_changed_fact_and_recurring_blocker(tmp_path: Path) -> None:
    home = resolve_home(tmp_path / "home")
    base = load_settings(home)
    settings = base.model_copy(update={"daemon": base.daemon.model_copy(update={"tick_s": 0.05})})
    ws = tmp_path / "ws"
    ws.mkdir()
    with FakeLLM(_model) as fake, Store.open(home, settings) as store:
        agent = create_agent(store, "ada", workspace=str(ws))
        model = ModelSettings(model="openai/fake", api_base=fake.url, timeout_s=30, context_window=32_000)
        provider = LiteLLMProvider(env={})

        async def scenario() -> None:
            daemon = Daemon(store, resolver=lambda a: (provider, model), poll_s=0.01)
            async with daemon.running(grace_s=1):
                for i in range(1, TURNS + 1):
                    daemon.submit("ada", _operator_text(i), origin="operator:test", authority="operator", sender="operator", channel="test")  # fmt: skip
                    await daemon.until_idle(timeout_s=60)
                    if i == 10:  # the operator reviews what waits: the early preference
                        await _until_evolved(daemon)
                        [proposal] = review.list_proposals(store)
                        assert proposal.entry is not None and proposal.entry.text == PREFERENCE
                        assert not review.list_entries(store, scope="operator")  # not durable before consent
                        review.accept(store, proposal.proposal_id, origin="operator:test")
                await _until_evolved(daemon)
                assert daemon.status()["evolve"]["jobs"]["done"] == TURNS

        asyncio.run(scenario())
        assert len(fake.requests) == TURNS + 2  # one round per turn, two for each failing command

        # What durable memory holds now.
        entries = {(s.entry.kind, s.status): s for s in review.list_entries(store)}
        assert entries[("preference", "active")].entry.text == PREFERENCE
        assert entries[("fact", "active")].entry.text == NEW_FACT
        old = entries[("fact", "superseded")]
        assert old.entry.text == "The staging server is db1.example.com."
        assert old.superseded_by == entries[("fact", "active")].entry_id
        blocker = entries[("blocker", "active")]
        assert "No such file or directory" in blocker.entry.text

        # What the next turn recalls, and what its prompt shows.
        [inp] = store.append(
            NewEvent(
                agent.agent_id,
                ev.MessageReceived(text="Deploy the billing service to the staging server."),
                origin="operator:test",
                authority="operator",
            )
        )
        now = SystemClock().now_us()
        shown = recall(store, store.agent("ada"), "Deploy the billing service to the staging server.", now)
        texts = [r.text for r in shown.entries]
        assert len(shown.entries) <= 5
        assert PREFERENCE in texts and NEW_FACT in texts and blocker.entry.text in texts
        assert "The staging server is db1.example.com." not in texts
        view = gather(store, agent.agent_id, inputs=[inp.seq], started_seq=store.ledger.head() + 1, tools=[])
        counter = TokenCounter()
        section = {s.key: s for s in build_sections(view, counter)}["durable"]
        assert section.renderings[0].tokens <= 400
        assert "verify before relying on it" in section.renderings[0].text
        assert store.ledger.verify().ok
        assert store.replay().ok


async def _until_evolved(daemon: Daemon, timeout_s: float = 30) -> None:
    """Until the evolve queue has caught up with every settled turn."""
    evolver = daemon.evolver
    assert evolver is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        counts = await asyncio.to_thread(evolver.queue.counts)
        lag = await asyncio.to_thread(evolver.queue.lag)
        settled = len(daemon.store.ledger.query("SELECT 1 FROM events WHERE type = 'turn.settled'"))
        if counts["queued"] == counts["running"] == 0 and counts["done"] + counts["dead"] == settled and lag >= 0:
            return
        if loop.time() > deadline:
            raise TimeoutError(f"evolve did not catch up: {counts}, {settled} settled turns")
        await asyncio.sleep(0.05)
