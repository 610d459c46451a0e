"""Every REPL command against a real daemon: an in-process ``Daemon`` behind the real HTTP API
(uvicorn on 127.0.0.1), the REPL's own ``Chat.handle`` as the operator's keyboard, and what a
terminal would show read back from a recording ``Console``. Only the model is scripted.

Also here: the ledger tail's ``after`` cursor and ``type`` filter, which the brief poller pages
with (no brief is lost however many events land between polls), and the notice the REPL prints
instead of waiting forever when the agent will not run (paused, over its daily budget).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.wait import wait_for
from rich.console import Console

from holon.clock import FakeClock
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.repl.app import BRIEF_PAGE, Chat
from holon.repl.client import ApiClient
from holon.runtime.providers.base import ModelReply, ModelRequest, TextSink
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call

pytestmark = pytest.mark.timeout(120)


def _last_user(request: ModelRequest) -> str:
    last = next((m for m in reversed(request.messages) if m.get("role") == "user"), {})
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content)
    return str(content or "")[-200:]


class Script(ScriptedProvider):
    """Plays the steps a test queued; with none queued, answers ``echo: <last user text>``."""

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        if not self.remaining:
            self.add(reply(f"echo: {_last_user(request)}"))
        return await super().complete(request, on_text=on_text)


if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL: the daemon behind the REPL opens the home's
    storage, which follows ``engine`` (``HOLON_STORAGE_URL``; the search index in the node's file)."""
    return engine


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Script:
    provider = Script()
    monkeypatch.setattr("helpers.api_server.echo_provider", lambda: provider)
    return provider


@pytest.fixture
def server(tmp_path: Any, fast_ledger: None, script: Script) -> Iterator[ApiServer]:
    with api_server(tmp_path / "home", clock=FakeClock()) as s:
        yield s


@pytest.fixture
def http(server: ApiServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def _make(http: httpx.Client, name: str, **settings: Any) -> dict[str, Any]:
    r = http.post("/v1/agents", json={"name": name, "settings": settings})
    assert r.status_code == 201, r.text
    return dict(r.json())


class Screen:
    """A recording console: what the operator's terminal shows, a command's worth at a time."""

    def __init__(self) -> None:
        self.console = Console(record=True, width=160, force_terminal=False, color_system=None)

    def take(self) -> str:
        """Everything printed since the last ``take``."""
        return self.console.export_text(clear=True)


def _chat(server: ApiServer, agent: str) -> tuple[Chat, Screen]:
    screen = Screen()
    return Chat(ApiClient(server.url, token=server.token), screen.console, agent), screen


def _run(chat: Chat, screen: Screen, line: str) -> str:
    assert chat.handle(line) is None
    return screen.take()


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")] for line in text.splitlines() if "│" in line]


# --- every slash command --------------------------------------------------------------------------


def test_every_slash_command_against_a_real_daemon(server: ApiServer, http: httpx.Client, script: Script) -> None:
    _make(http, "ada")
    chat, screen = _chat(server, "ada")
    script.add(
        tool_call("create_work_item", {"title": "Ship the REPL", "objective": "it works", "todos": ["write tests"]}),
        tool_call("run_command", {"command": "sleep 60", "wait_s": 0.05}),
        tool_call("wait", {"on": "external", "target": "deploy", "recheck_in_s": 600, "reason": "the deploy hook"}),
    )
    shown = _run(chat, screen, "Ship the REPL please")
    # Tool calls and results are drawn as they happen, one line each; the turn ends waiting.
    assert re.search(r"⚙ create_work_item .*Ship the REPL", shown), shown
    assert re.search(r"✓ ok \d+ ms: ", shown), shown
    assert "⚙ run_command" in shown and "⚙ wait" in shown
    assert "[turn waiting" in shown

    rows = _rows(_run(chat, screen, "/agents"))
    [ada] = [r for r in rows if r[1] == "ada"]
    assert ada[0] == "*" and ada[2] == "waiting", rows  # live from the daemon, not the projection
    assert ada[-1].startswith("on external deploy; recheck at "), ada

    assert '"active_work_item"' in _run(chat, screen, "/state")
    [work] = [r for r in _rows(_run(chat, screen, "/work")) if r[1] == "Ship the REPL"]
    assert work[2:4] == ["open", "0/1"], work
    [task] = [r for r in _rows(_run(chat, screen, "/tasks")) if r[1] == "command"]
    assert task[3] == "running" and "sleep 60" in task[2], task
    [wait] = [r for r in _rows(_run(chat, screen, "/waits")) if r[1] == "external"]
    assert wait[2] == "deploy" and wait[4] == "pending" and wait[5] == "the deploy hook", wait

    # The search index catches up on the daemon's tick.
    deadline = time.monotonic() + 20
    while not http.get("/v1/agents/ada/memory/search", params={"q": "ship"}).json()["hits"]:
        assert time.monotonic() < deadline, "the index never caught up"
        time.sleep(0.1)
    found = _run(chat, screen, "/search ship")
    assert re.search(r"\d+ of \d+ hits for 'ship'", found) and "event:" in found, found

    [message] = http.get("/v1/ledger/tail", params={"agent": "ada", "type": "message.received"}).json()
    read = _run(chat, screen, f"/get event:{message['seq']}")
    assert "Ship the REPL please" in read, read
    assert "error" in _run(chat, screen, "/get event:999999")

    context = _run(chat, screen, "/context")
    assert re.search(r"turn turn_\w+", context) and "round 2:" in context and "sections (last round)" in context
    assert "no context recorded" not in context

    events = _run(chat, screen, "/events 5")
    assert len(_rows(events)) == 5 and "turn.settled" in [r[2] for r in _rows(events)], events
    assert "expected a count" in _run(chat, screen, "/events lots")

    transcript = _run(chat, screen, "/transcript")
    assert "you: Ship the REPL please" in transcript

    assert "ada uses (default from config)" in _run(chat, screen, "/model")
    assert "ada uses openai/other-model" in _run(chat, screen, "/model openai/other-model")
    assert "ada uses openai/other-model" in _run(chat, screen, "/model")
    assert "no turn is running" in _run(chat, screen, "/abort")

    assert "created bob; now talking to it" in _run(chat, screen, "/new bob")
    assert chat.agent == "bob"
    assert "echo: hello bob" in _run(chat, screen, "hello bob")
    assert "you: hello bob" in _run(chat, screen, "/transcript")
    assert "error: " in _run(chat, screen, "/new bob")  # exists already: an error line, not a crash
    assert "error: " in _run(chat, screen, "/switch nobody")
    assert chat.agent == "bob"
    assert "now talking to ada" in _run(chat, screen, "/switch ada")
    assert chat.agent == "ada"

    helped = _run(chat, screen, "/help")
    for name in ("/agents", "/switch NAME", "/transcript [N]", "/abort", "/quit"):
        assert name in helped
    assert "Ctrl-D quits" in helped
    assert "did you mean /agents?" in _run(chat, screen, "/agent")
    assert chat.handle("/quit") == "quit"


def test_abort_stops_the_running_turn(server: ApiServer, http: httpx.Client, script: Script) -> None:
    _make(http, "ada")
    chat, screen = _chat(server, "ada")
    other, other_screen = _chat(server, "ada")

    async def slow(request: ModelRequest) -> ModelReply:
        await asyncio.sleep(60)
        return reply("too late")

    script.add(slow)
    talking = threading.Thread(target=chat.handle, args=("take your time",))
    talking.start()
    wait_for(
        'http.get("/v1/agents/ada/status").json()["state"] == "running"',
        lambda: http.get("/v1/agents/ada/status").json()["state"] == "running",
    )
    assert "aborting the running turn" in _run(other, other_screen, "/abort")
    talking.join(20)
    assert not talking.is_alive(), "the reply never settled"
    assert "[turn failed: aborted by the operator]" in screen.take()


# --- a message the agent will not answer now ----------------------------------------------------


def _say(chat: Chat, text: str, timeout_s: float = 15.0) -> None:
    """``chat.handle(text)`` that must come back by itself (not hang waiting for a reply)."""
    talking = threading.Thread(target=chat.handle, args=(text,), daemon=True)
    talking.start()
    talking.join(timeout_s)
    assert not talking.is_alive(), f"the REPL still waits for a reply to {text!r}"


def test_a_paused_agent_gets_a_notice_not_a_hang(server: ApiServer, http: httpx.Client) -> None:
    _make(http, "ada")
    chat, screen = _chat(server, "ada")
    assert http.post("/v1/agents/ada/pause").status_code == 200
    _say(chat, "are you there?")
    shown = screen.take()
    assert "ada is paused" in shown and "your message is queued" in shown and "not waiting" in shown, shown
    assert "paused by the operator" in _run(chat, screen, "/agents")

    assert http.post("/v1/agents/ada/resume").status_code == 200
    server.wait_idle()
    assert "ada: echo: are you there?" in _run(chat, screen, "/transcript")  # answered once resumed


def test_an_agent_over_its_daily_budget_gets_a_notice_not_a_hang(server: ApiServer, http: httpx.Client) -> None:
    _make(http, "nightly", background=True, budget_turns_per_day=1)
    chat, screen = _chat(server, "nightly")
    _say(chat, "first")
    assert "echo: first" in screen.take()
    _say(chat, "second")
    shown = " ".join(screen.take().split())
    assert "nightly is over its daily budget (1 of 1 turns per day used) and sleeps until " in shown, shown
    assert "your message is queued" in shown
    [row] = [r for r in _rows(_run(chat, screen, "/agents")) if r[1] == "nightly"]
    assert row[2] == "asleep" and row[-1].startswith("daily budget used: 1 of 1 turns per day used; until "), row


def test_pausing_while_the_message_waits_in_the_queue_ends_the_wait(
    server: ApiServer, http: httpx.Client, script: Script
) -> None:
    _make(http, "ada")
    chat, screen = _chat(server, "ada")
    release = threading.Event()

    async def held(request: ModelRequest) -> ModelReply:
        while not release.is_set():
            await asyncio.sleep(0.02)
        return reply("first done")

    script.add(held)
    assert http.post("/v1/agents/ada/inputs", json={"text": "first"}).status_code == 202
    wait_for(
        'http.get("/v1/agents/ada/status").json()["state"] == "running"',
        lambda: http.get("/v1/agents/ada/status").json()["state"] == "running",
    )
    talking = threading.Thread(target=chat.handle, args=("second",), daemon=True)
    talking.start()  # queued behind the running turn: the REPL follows it
    wait_for(
        'len(http.get("/v1/agents/ada").json()["agent"]["pending_inputs"]) == 1',
        lambda: len(http.get("/v1/agents/ada").json()["agent"]["pending_inputs"]) == 1,
    )
    assert http.post("/v1/agents/ada/pause").status_code == 200
    talking.join(15)
    assert not talking.is_alive(), "the REPL kept waiting for a reply from a paused agent"
    assert "ada was paused: your message stays queued" in screen.take()
    release.set()


# --- briefs: the ledger tail's cursor and type filter ------------------------------------------


def _append(server: ApiServer, *events: NewEvent) -> None:
    assert server.port is not None
    store = server.port.store
    server.call(lambda: store.append(*events))


def _brief(agent_id: str, text: str) -> NewEvent:
    return NewEvent(agent_id, ev.BriefDelivered(kind="result", text=text), origin="agent:test", authority="agent")


def _filler(agent_id: str, i: int) -> NewEvent:
    return NewEvent(agent_id, ev.WorkingMemoryDelta(changes={"i": i}), origin="runtime:test", authority="runtime")


def test_every_brief_appears_once_however_many_events_land_between_polls(server: ApiServer, http: httpx.Client) -> None:
    ada = _make(http, "ada")["agent_id"]
    nightly = _make(http, "nightly")["agent_id"]
    _append(server, _brief(nightly, "from before the chat started"))
    chat, screen = _chat(server, "ada")
    chat.begin_briefs()

    # 3 x BRIEF_PAGE events between two polls, with more briefs among them than fit in a page.
    texts = [f"brief number {i}" for i in range(BRIEF_PAGE + 20)]
    batch: list[NewEvent] = []
    for i in range(3 * BRIEF_PAGE):
        batch.append(_filler(ada, i))
        if i % 2 == 0 and i // 2 < len(texts):
            batch.append(_brief(ada if i % 3 == 0 else nightly, texts[i // 2]))
    _append(server, *batch)

    assert chat.show_briefs() == len(texts) > BRIEF_PAGE
    shown = screen.take()
    for text in texts:
        assert len(re.findall(rf"\b{text}\b", shown)) == 1, text
    assert "ada [result]: brief number 0" in shown and "nightly [result]: brief number 1" in shown
    assert "from before the chat started" not in shown

    _append(server, *[_filler(ada, i) for i in range(2 * BRIEF_PAGE)], _brief(nightly, "the last one"))
    assert chat.show_briefs() == 1
    assert "nightly [result]: the last one" in screen.take()
    assert chat.show_briefs() == 0 and screen.take() == ""


def test_the_tail_pages_from_a_cursor_and_filters_by_type(server: ApiServer, http: httpx.Client) -> None:
    ada = _make(http, "ada")["agent_id"]
    bob = _make(http, "bob")["agent_id"]
    _append(server, *[_filler(ada, i) for i in range(5)], _brief(bob, "b1"), _brief(ada, "a1"), _filler(bob, 9))
    everything = http.get("/v1/ledger/tail", params={"n": 100}).json()
    seqs = [e["seq"] for e in everything]

    page = http.get("/v1/ledger/tail", params={"after": seqs[0], "n": 3}).json()
    assert [e["seq"] for e in page] == seqs[1:4]  # the first n after the cursor, oldest first
    assert http.get("/v1/ledger/tail", params={"after": seqs[-1]}).json() == []

    briefs = http.get("/v1/ledger/tail", params={"type": "brief.delivered"}).json()
    assert [e["payload"]["text"] for e in briefs] == ["b1", "a1"]
    last = http.get("/v1/ledger/tail", params={"type": "brief.delivered", "n": 1}).json()
    assert [e["payload"]["text"] for e in last] == ["a1"]  # without a cursor: the newest
    only_ada = http.get("/v1/ledger/tail", params={"type": "brief.delivered", "agent": "ada", "after": 0}).json()
    assert [e["payload"]["text"] for e in only_ada] == ["a1"]
    both = http.get(
        "/v1/ledger/tail", params=[("type", "brief.delivered"), ("type", "agent.created"), ("after", 0)]
    ).json()
    assert [e["type"] for e in both] == ["agent.created", "agent.created", "brief.delivered", "brief.delivered"]

    for params, status, code in [
        ({"type": "brief.delivred"}, 400, "bad_request"),
        ({"type": ""}, 400, "bad_request"),
        ([("type", "brief.delivered")] * 33, 400, "bad_request"),
        ({"after": -1}, 422, "invalid"),
        ({"after": "x"}, 422, "invalid"),
        ({"type": "x" * 5000}, 400, "bad_request"),
        ({"type": "brief.delivered", "agent": "nobody"}, 404, "not_found"),
    ]:
        r = http.get("/v1/ledger/tail", params=params)
        assert r.status_code == status and r.json()["error"]["code"] == code, (params, r.text)
    assert "brief.delivred" in http.get("/v1/ledger/tail", params={"type": "brief.delivred"}).json()["error"]["message"]


def test_model_sets_the_model_api_base_and_key_variable_together(server: ApiServer, http: httpx.Client) -> None:
    """``/model NAME --api-base URL --api-key-env VAR`` records all three (through the daemon's
    validation); a later ``/model NAME`` resets the two left out; ``/model default`` resets all."""
    _make(http, "ada")
    chat, screen = _chat(server, "ada")

    def settings() -> dict[str, Any]:
        return dict(http.get("/v1/agents/ada").json()["agent"]["settings"])

    shown = _run(
        chat, screen, "/model ollama_chat/llama3.2 --api-base http://127.0.0.1:11434 --api-key-env GROQ_API_KEY"
    )
    assert "ada uses ollama_chat/llama3.2  at http://127.0.0.1:11434  key GROQ_API_KEY" in shown, shown
    assert "holon secrets set GROQ_API_KEY" in shown, shown
    assert settings() == {
        "model": "ollama_chat/llama3.2",
        "api_base": "http://127.0.0.1:11434",
        "api_key_env": "GROQ_API_KEY",
    }
    assert "ada uses ollama_chat/llama3.2  at http://127.0.0.1:11434" in _run(chat, screen, "/model")

    assert "ada uses openai/gpt-4o-mini" in _run(chat, screen, "/model openai/gpt-4o-mini --api-key-env=OPENAI_API_KEY")
    assert settings() == {"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}

    # The daemon's allow-list and validation answer, as for `holon agent configure`.
    refused = _run(chat, screen, "/model openai/x --api-key-env PGPASSWORD")
    assert "error: " in refused and "allowed_key_envs" in refused, refused
    assert "error: " in _run(chat, screen, "/model openai/x --api-base")
    assert "error: " in _run(chat, screen, "/model --api-base http://127.0.0.1:1")
    assert settings() == {"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}

    assert "ada uses (default from config)" in _run(chat, screen, "/model default")
    assert settings() == {}


def test_configuring_the_default_agent_over_http_creates_it(server: ApiServer, http: httpx.Client) -> None:
    """What ``holon agent configure assistant`` / ``holon model set`` do in-process, the API does
    too (a CLI routed through a running daemon must not get a 404 before ``holon chat``)."""
    r = http.patch("/v1/agents/assistant", json={"settings": {"model": "openai/gpt-4o-mini", "max_rounds": 20}})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "assistant" and r.json()["settings"] == {"model": "openai/gpt-4o-mini", "max_rounds": 20}
    r = http.patch("/v1/agents/assistant", json={"unset": ["max_rounds"]})
    assert r.status_code == 200 and r.json()["settings"] == {"model": "openai/gpt-4o-mini"}, r.text
    assert [a["name"] for a in http.get("/v1/agents").json()].count("assistant") == 1
    assert http.patch("/v1/agents/nobody", json={"settings": {"max_rounds": 2}}).status_code == 404
    assert http.patch("/v1/agents/nobody", json={"settings": {}}).status_code == 404
