"""The record of a turn's prompts (issue 18): a later round's manifest is written against the
first round's (the entries it repeats by index), and is read back whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from helpers.runtime import assert_sound, make_host, payloads, running

from holon.clock import FakeClock
from holon.context.assembler import Assembly
from holon.context.manifests import turn_contexts
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls
from holon.runtime.turn import runner as runner_module


def test_a_later_round_records_only_what_changed_and_reads_back_whole(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = create_agent(store, "alice")
    made: list[Assembly] = []
    assemble = runner_module.assemble

    def keeping(*args: Any, **kwargs: Any) -> Assembly:
        made.append(assemble(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(runner_module, "assemble", keeping)
    provider = ScriptedProvider(
        [
            tool_calls(("create_work_item", {"title": "tidy", "objective": "tidy the desk"}), ("list_work_items", {})),
            tool_calls(("list_work_items", {})),
            reply("done"),
        ]
    )

    async def scenario() -> list[Any]:
        host = make_host(store, provider, clock=clock)
        async with running(host):
            host.submit("alice", "please tidy up")
            return await host.run_agent(agent.agent_id)

    [result] = asyncio.run(scenario())
    assert result.outcome == "completed" and result.rounds == 3
    recorded = payloads(store, "context.assembled")
    first = next(e for e in store.ledger.read(0) if e.type == "context.assembled")
    assert [p.manifest_base for p in recorded] == [None, first.seq, first.seq]
    # Whole again: what ``holon context show`` and the API print is each round's own manifest.
    shown = turn_contexts(store, agent, result.turn_id)
    assert [item["manifest"] for item in shown] == [a.manifest.to_json() for a in made]
    assert [item["digest"] for item in shown] == [a.digest for a in made]
    # Written against the first: the repeated entries are indexes, so the record is a fraction.
    later = json.loads(recorded[2].manifest)
    assert any(isinstance(s, int) for s in later["sections"])
    assert len(recorded[2].manifest) < len(made[2].manifest.json_bytes()) / 2
    assert_sound(store)
