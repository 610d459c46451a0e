"""Shared by the evolve tests: run scripted turns for an agent, then drain the evolve queue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from helpers.runtime import make_host, running
from holon.clock import FakeClock
from holon.projections import Store
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls

DAY_S = 86_400


def run_turns(
    store: Store,
    clock: FakeClock,
    agent_id: str,
    turns: Sequence[tuple[str, Sequence[Any]]],
    *,
    gap_s: float = 60.0,
) -> None:
    """Each turn: the operator's ``text``, then the model's scripted replies for it.

    A reply is a string (the final answer) or a list of ``(tool, arguments)`` calls.
    """
    steps: list[Any] = []
    for _text, replies in turns:
        for r in replies:
            steps.append(reply(r) if isinstance(r, str) else tool_calls(*r))
    provider = ScriptedProvider(steps)

    async def go() -> None:
        host = make_host(store, provider, clock=clock)
        async with running(host):
            for text, _replies in turns:
                host.submit(agent_id, text)
                await host.run_agent(agent_id)
                clock.advance(seconds=gap_s)

    asyncio.run(go())
    assert provider.remaining == 0, "the script was not used up: a turn ended early"
