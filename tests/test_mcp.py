"""``holon mcp``: an agent's memory over MCP (mcp 2.x), in process and over real stdio."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import mcp
import pytest
from helpers.evolve import run_turns
from helpers.runtime import SCRIPTED
from helpers.turn_cli import cli_env, holon, holon_argv, open_store, quick_home
from mcp.client.stdio import StdioServerParameters

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.daemon import Daemon
from holon.mcp.server import build_server
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelRequest
from holon.runtime.providers.scripted import ScriptedProvider, reply

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


@pytest.mark.slow
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


@pytest.mark.slow
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


def _cli_get(home: Path, agent: str, ref: str, *args: str) -> Any:
    r = holon(home, "memory", "get", agent, ref, *args, "--json")
    assert r.code == 0, r
    return r.json()


def _message(cli: Any) -> str:
    """The CLI's one-line error without its prefix (an MCP client sees the same message as a tool error)."""
    return str(cli.err).strip().removeprefix("holon: error: ")


@pytest.mark.slow
def test_memory_get_answers_like_the_cli(home: Path) -> None:
    with open_store(home) as store:
        event = store.ledger.query("SELECT seq FROM events WHERE agent_id = ? AND type = 'message.received' LIMIT 1",
                                   (store.agent("ada").agent_id,))[0][0]  # fmt: skip
    calls = [
        ({"ref": f"event:{event}"}, ()),
        ({"ref": "file:agent/self.md", "mode": "headers"}, ("--mode", "headers")),
        ({"ref": "file:operator/operator.md", "lines": 3}, ("--lines", "3")),
        ({"ref": "file:agent/self.md", "start": 1, "end": 2, "max_chars": 200}, ("--start", "1", "--end", "2", "--max-chars", "200")),
    ]  # fmt: skip
    cli = [_cli_get(home, "ada", str(args["ref"]), *flags) for args, flags in calls]

    async def go() -> list[Any]:
        with open_store(home) as store:
            async with mcp.Client(build_server(store, "ada")) as client:
                return [_structured(await client.call_tool("memory_get", args)) for args, _ in calls]

    got = asyncio.run(go())
    assert got == cli
    assert "pineapple" in got[0]["content"] and got[1]["ref"] == "file:agent/self.md"


@pytest.mark.slow
def test_file_reads_keep_to_the_agents_scopes(tmp_path: Path) -> None:
    """Operator and workspace files through MCP: the agent's own rules, refusals included, as the CLI shows them."""
    home = quick_home(tmp_path, "zed")  # an agent without a workspace
    ws_cy, ws_dee = tmp_path / "ws-cy", tmp_path / "ws-dee"
    for ws, text in ((ws_cy, "Cy's workspace note: kiwi.\n"), (ws_dee, "Dee's workspace secret: durian.\n")):
        (ws / ".holon").mkdir(parents=True)
        (ws / ".holon" / "memory.md").write_text(f"# Workspace\n\n{text}")
    (ws_cy / ".holon" / "peek.md").symlink_to(ws_dee / ".holon" / "memory.md")
    with open_store(home) as store:
        create_agent(store, "cy", workspace=str(ws_cy))
        create_agent(store, "dee", workspace=str(ws_dee))
    (home / "memory").mkdir(exist_ok=True)
    (home / "memory" / "operator.md").write_text("# Operator\n\nThe operator prefers papaya.\n")

    allowed = ["file:workspace/memory.md", "file:operator/operator.md"]
    refused = [
        "file:workspace/peek.md",  # a symlink out of cy's workspace into dee's
        f"file:workspace/../../{ws_dee.name}/.holon/memory.md",
        "file:operator/../agents/dee/memory/self.md",
        "file:agent/../../dee/memory/self.md",
    ]
    cli_ok = [_cli_get(home, "cy", ref) for ref in allowed]
    cli_refused = [holon(home, "memory", "get", "cy", ref, "--json") for ref in refused]
    assert all(r.code == 2 for r in cli_refused), cli_refused
    no_ws = holon(home, "memory", "get", "zed", "file:workspace/memory.md", "--json")
    assert no_ws.code == 2 and "no workspace memory" in no_ws.err
    searches = [("kiwi", "workspace"), ("papaya", "operator")]
    cli_found = [holon(home, "memory", "search", "cy", q, "--scope", scope, "--json").json() for q, scope in searches]

    async def go() -> None:
        with open_store(home) as store:
            async with mcp.Client(build_server(store, "cy")) as client:
                got = [_structured(await client.call_tool("memory_get", {"ref": ref})) for ref in allowed]
                assert got == cli_ok
                assert "kiwi" in got[0]["content"] and "papaya" in got[1]["content"]
                for ref, cli in zip(refused, cli_refused, strict=True):
                    r = await client.call_tool("memory_get", {"ref": ref})
                    assert r.is_error and r.content[0].text.endswith(_message(cli)), (ref, r.content[0].text, cli.err)
                    assert "durian" not in r.content[0].text
                for (query, scope), cli in zip(searches, cli_found, strict=True):
                    found = _structured(await client.call_tool("memory_search", {"query": query, "scope": scope}))
                    assert found["hits"] and found["hits"] == cli["hits"], (found, cli)
                found = _structured(await client.call_tool("memory_search", {"query": "durian"}))
                assert not found["hits"], found  # dee's workspace is not cy's...
            async with mcp.Client(build_server(store, "dee")) as client:
                found = _structured(await client.call_tool("memory_search", {"query": "durian"}))
                assert found["hits"][0]["source_ref"] == "file:workspace/memory.md"  # ...but dee's
            async with mcp.Client(build_server(store, "zed")) as client:
                r = await client.call_tool("memory_get", {"ref": "file:workspace/memory.md"})
                assert r.is_error and r.content[0].text.endswith(_message(no_ws))

    asyncio.run(go())


def test_an_input_sent_over_mcp_is_answered_by_a_running_daemon(home: Path) -> None:
    seen: list[str] = []

    def answer(request: ModelRequest) -> Any:
        seen.append("\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "user"))
        return reply("The launch codeword is pineapple.")

    provider = ScriptedProvider([answer])

    async def go() -> str:
        with open_store(home) as daemon_store, open_store(home) as mcp_store:
            daemon = Daemon(daemon_store, resolver=lambda agent: (provider, SCRIPTED), poll_s=0.01)
            async with daemon.running(grace_s=1):
                async with mcp.Client(build_server(mcp_store, "ada")) as client:
                    sent = _structured(await client.call_tool("send_input", {"text": "What is the codeword?"}))
                deadline = time.monotonic() + 20
                while True:
                    settled = [e for e in daemon_store.ledger.read(sent["seq"]) if e.type == "turn.settled"]
                    if settled:
                        break
                    assert time.monotonic() < deadline, "the daemon did not answer the MCP input"
                    await asyncio.sleep(0.02)
                started = next(e for e in daemon_store.ledger.read(sent["seq"]) if e.type == "turn.started")
                assert sent["seq"] in started.payload.inputs
                assert settled[0].payload.outcome == "completed"
                return str(daemon_store.ledger.resolve(settled[0].payload.reply))

    assert asyncio.run(go()) == "The launch codeword is pineapple."
    assert "What is the codeword?" in seen[0]


@pytest.mark.slow
def test_the_default_agent_leaves_the_diagnostic_agent_out(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "solo")
    with open_store(home) as store:
        create_agent(store, "diagnose", settings={"diagnostic": True}, internal=True)
    argv = holon_argv("--home", home, "mcp")
    params = StdioServerParameters(
        command=str(argv[0]), args=[str(a) for a in argv[1:]], env=cli_env(PATH=os.environ["PATH"])
    )

    async def go() -> str:
        async with mcp.Client(params) as client:
            return str(client.server_info.name)

    assert asyncio.run(go()) == "holon-solo"
