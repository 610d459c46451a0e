"""``holon mcp``: an agent's memory over MCP (mcp 2.x), in process and over real stdio."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import mcp
import pytest
from helpers.evolve import run_turns
from helpers.turn_cli import cli_env, holon, holon_argv, open_store, quick_home
from mcp.client.stdio import StdioServerParameters

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.mcp.server import build_server
from holon.projections import Store
from holon.runtime.agents import create_agent

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = quick_home(tmp_path, "ada")
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        ada = store.agent("ada")
        bob = create_agent(store, "bob")
        run_turns(store, clock, ada.agent_id, [("The launch codeword is pineapple.", ["Noted: pineapple."])])
        run_turns(store, clock, bob.agent_id, [("Bob's secret is mango pineapple.", ["ok"])])
    return home


def _structured(result: Any) -> Any:
    assert not result.is_error, result
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(result.content[0].text)


def test_tools_answer_like_the_cli_and_keep_to_the_agents_scope(home: Path) -> None:
    cli = holon(home, "memory", "search", "ada", "pineapple", "--json")
    assert cli.code == 0, cli

    async def go() -> None:
        with open_store(home) as store:
            server = build_server(store, "ada")
            async with mcp.Client(server) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert tools == {"memory_search", "memory_get", "send_input"}
                found = _structured(await client.call_tool("memory_search", {"query": "pineapple"}))
                assert found["hits"] == cli.json()["hits"] and found["total"] == cli.json()["total"]
                assert all("mango" not in h["snippet"] for h in found["hits"])  # bob's turn is not ada's

                ref = found["hits"][0]["source_ref"]
                read = _structured(await client.call_tool("memory_get", {"ref": ref}))
                assert "pineapple" in read["content"]
                bob_event = store.ledger.query("SELECT seq FROM events WHERE agent_id = ? ORDER BY seq DESC LIMIT 1",
                                               (store.agent("bob").agent_id,))[0][0]  # fmt: skip
                refused = await client.call_tool("memory_get", {"ref": f"event:{bob_event}"})
                missing = await client.call_tool("memory_get", {"ref": "event:99999999"})
                assert refused.is_error and missing.is_error
                assert "no such record, or not this agent's" in refused.content[0].text
                hostile = await client.call_tool("memory_search", {"query": '"\x00 OR * NEAR(' + "x" * 1_500})
                assert not hostile.is_error
                assert (await client.call_tool("memory_search", {"query": "x" * 5_000})).is_error

                sent = _structured(await client.call_tool("send_input", {"text": "Please summarise the launch."}))
                event = store.ledger.get(sent["seq"])
                assert event.type == "message.received" and event.origin == "mcp" and event.authority == "external"
                assert sent["seq"] in store.agent("ada").pending_inputs  # durable, queued for a daemon

    asyncio.run(go())


def test_a_real_stdio_round_trip(home: Path) -> None:
    argv = holon_argv("--home", home, "mcp", "--agent", "ada")
    params = StdioServerParameters(
        command=str(argv[0]), args=[str(a) for a in argv[1:]], env=cli_env(PATH=os.environ["PATH"])
    )

    async def go() -> dict[str, Any]:
        async with mcp.Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "memory_search" in names
            return _structured(await client.call_tool("memory_search", {"query": "pineapple", "limit": 3}))

    found = asyncio.run(go())
    assert found["hits"] and "pineapple" in found["hits"][0]["snippet"]
    assert holon(home, "mcp").code == 2  # two agents: --agent is required
