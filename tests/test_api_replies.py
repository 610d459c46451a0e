"""The pure parts of the API for programs, without a daemon: what became of an input (read from a
real ledger), the chat-completion input rule, and how much of a reply a stream has already shown."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.wait import wait_for
from hypothesis import given
from hypothesis import strategies as st

from holon.api.openai_compat import ChatError, ChatMessage, new_input
from holon.api.replies import check_input, input_outcome, overlap
from holon.clock import FakeClock
from holon.errors import NotFoundError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.inputs import input_events

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL: the daemon and ``store`` open the home's
    storage, which follows ``engine`` (``HOLON_STORAGE_URL``; the search index in the node's file)."""
    return engine


def _input(store: Store, agent_id: str, text: str) -> int:
    events = input_events(store, agent_id, text, origin="operator:test", authority="operator", sender="operator",
                          channel="test")  # fmt: skip
    return store.append(*events)[-1].seq


def _turn(store: Store, agent_id: str, turn: str, inputs: list[int]) -> None:
    store.append(NewEvent(agent_id, ev.TurnStarted(turn_id=turn, inputs=inputs), origin="runtime", turn_id=turn))


def _settle(store: Store, agent_id: str, turn: str, outcome: str, **fields: object) -> None:
    settled = ev.TurnSettled(turn_id=turn, outcome=outcome, **fields)  # type: ignore[arg-type]
    store.append(NewEvent(agent_id, settled, origin="runtime", turn_id=turn))


def test_an_inputs_outcome_follows_its_latest_turn(store: Store) -> None:
    ada = create_agent(store, "ada").agent_id
    bob = create_agent(store, "bob").agent_id
    first = _input(store, ada, "first")
    other = _input(store, bob, "for bob")
    assert input_outcome(store, ada, first).status == "queued"
    _turn(store, bob, "t-bob", [other])  # another agent's turn never counts
    _turn(store, ada, "t1", [first])
    running = input_outcome(store, ada, first)
    assert (running.status, running.turn_id, running.settled) == ("running", "t1", False)
    _settle(store, ada, "t1", "failed", reason="provider unreachable", requeue=True)
    failed = input_outcome(store, ada, first)
    assert (failed.status, failed.reason, failed.requeued, failed.settled) == (
        "failed", "provider unreachable", True, True,
    )  # fmt: skip
    # The re-queued input is taken again, with a newer one: the latest turn decides.
    second = _input(store, ada, "second")
    _turn(store, ada, "t2", [first, second])
    assert input_outcome(store, ada, first).status == "running"
    reply = "a long reply " * 2_000  # over the blob threshold: read back from the blob store
    _settle(store, ada, "t2", "completed", reply=reply)
    done = input_outcome(store, ada, first)
    assert (done.status, done.turn_id, done.reply) == ("completed", "t2", reply)
    assert input_outcome(store, ada, second).reply == reply
    check_input(store, ada, first)
    with pytest.raises(NotFoundError):
        check_input(store, ada, other)  # bob's input, not ada's
    with pytest.raises(NotFoundError):
        check_input(store, ada, 10**9)


def test_deltas_that_come_before_their_turn_is_read_back_are_shown_in_order(store: Store) -> None:
    """A fast turn's first pieces can reach ``follow`` before its reader sees the turn start (the
    ledger read and the in-process notice race): they are kept and shown once the turn is read back,
    and another turn's pieces never are."""
    import asyncio
    from types import SimpleNamespace

    from holon.api.port import Notice
    from holon.api.replies import InputOutcome, follow

    ada = create_agent(store, "ada").agent_id
    seq = _input(store, ada, "hi")

    async def run() -> list[object]:
        queue: asyncio.Queue[Notice] = asyncio.Queue()
        for turn, text in (("t-other", "not mine "), ("t1", "hel"), ("t1", "lo")):
            queue.put_nowait(Notice(kind="delta", agent_id=ada, turn_id=turn, text=text, seq=seq))
        got: list[object] = []

        async def consume() -> None:
            async for item in follow(SimpleNamespace(store=store), ada, seq, queue, poll_s=0.01):  # type: ignore[arg-type]
                got.append(item)

        reader = asyncio.create_task(consume())
        async with asyncio.timeout(30):
            while not queue.empty():  # every piece taken while the turn could not be read back
                await asyncio.sleep(0.01)
            assert got == []  # nothing shown yet, nothing lost either
            _turn(store, ada, "t1", [seq])
            queue.put_nowait(Notice(kind="delta", agent_id=ada, turn_id="t1", text="!", seq=seq + 1))
            while "!" not in got:
                await asyncio.sleep(0.01)
            _settle(store, ada, "t1", "completed", reply="hello!")
            await reader
        return got

    got = asyncio.run(run())
    assert [x for x in got if isinstance(x, str)] == ["hel", "lo", "!"]
    assert isinstance(got[-1], InputOutcome) and got[-1].reply == "hello!"


def _messages(*pairs: tuple[str, object]) -> list[ChatMessage]:
    return [ChatMessage.model_validate({"role": role, "content": content}) for role, content in pairs]


def test_only_the_trailing_user_messages_are_the_new_input() -> None:
    history = _messages(("system", "be brief"), ("user", "old"), ("assistant", "answer"), ("user", "new"))
    assert new_input(history) == "new"
    parts = [{"type": "text", "text": "look at"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert new_input(_messages(("assistant", "a"), ("user", "one"), ("user", parts))) == "one\n\nlook at"
    for bad in (
        _messages(("user", "q"), ("assistant", "a")),
        _messages(("user", "  ")),
        _messages(("user", [{"type": "image_url"}])),
        _messages(("user", "x" * 200_001)),
    ):
        with pytest.raises(ChatError) as e:
            new_input(bad)
        assert e.value.status == 400 and e.value.body()["error"]["type"] == "invalid_request_error"


_texts = st.text(alphabet="ab\0", max_size=12) | st.text(max_size=40)


@given(_texts, _texts, st.integers(0, 40))
def test_overlap_finds_what_a_stream_already_showed(before: str, reply: str, cut: int) -> None:
    """Whatever part of the reply was streamed last, the rest completes it exactly."""
    cut = min(cut, len(reply))
    streamed = before + reply[:cut]
    k = overlap(streamed, reply)
    assert k >= cut and streamed.endswith(reply[:k])
    assert (streamed + reply[k:]).endswith(reply)
    assert not any(streamed.endswith(reply[:longer]) for longer in range(k + 1, len(reply) + 1))  # the longest


# --- a client that goes away stops the wait ---------------------------------------------------------


def _subscribers(server: ApiServer) -> int:
    return int(server.call(lambda: len(server.port._subscribers)))  # type: ignore[union-attr]


@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_waits_end_when_the_client_goes_away(tmp_path: Path, fast_ledger: None) -> None:
    """A request waiting for a turn (here: of a paused agent, which never comes) holds a
    subscription; when the client disconnects, the wait ends and the subscription is dropped."""
    with api_server(tmp_path / "home", clock=FakeClock()) as server, server.client() as c:
        c.post("/v1/agents", json={"name": "ada"})
        c.post("/v1/agents/ada/pause", json={})
        base = _subscribers(server)
        requests = [
            ("POST", "/v1/agents/ada/messages?wait=300", {"text": "never answered"}),
            ("POST", "/v1/chat/completions", {"model": "ada", "messages": [{"role": "user", "content": "hi"}]}),
            ("POST", "/v1/chat/completions", {"model": "ada", "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
        ]  # fmt: skip
        for method, path, body in requests:
            short = server.client(timeout=httpx.Timeout(10, read=1.0))
            with pytest.raises(httpx.ReadTimeout), short, short.stream(method, path, json=body) as r:
                for _ in r.iter_lines():
                    pass
            wait_for(f"the wait of {path} to end", lambda: _subscribers(server) == base)


def test_the_public_docs_paths_lead_nowhere_else(tmp_path: Path, fast_ledger: None) -> None:
    """``/docs/static/`` needs no token, so no path under it may reach a route or a file outside it
    (raw paths: http.client sends them as written, unlike httpx)."""
    import http.client

    with api_server(tmp_path / "home", clock=FakeClock()) as server:
        with server.client() as c:
            c.post("/v1/agents", json={"name": "ada"})
        for path in (
            "/docs/static/../../v1/agents", "/docs/static/%2e%2e/%2e%2e/v1/agents", "/docs/static/..%2f..%2fv1/agents",
            "/docs/static/../../../../etc/passwd", "/docs/static/../../api.token",
        ):  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", server.port_number, timeout=10)
            try:
                conn.request("GET", path, headers={"Host": f"127.0.0.1:{server.port_number}"})
                response = conn.getresponse()
                body = response.read()
            finally:
                conn.close()
            assert response.status == 404 and b"ada" not in body and b"root:" not in body, (path, body)


def test_without_the_swagger_files_the_api_runs_and_docs_says_why(
    tmp_path: Path, fast_ledger: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fastapi_offline" else real(name, *a)
    )
    with api_server(tmp_path / "home", clock=FakeClock()) as server, server.client() as c:
        r = c.get("/docs")
        assert r.status_code == 503 and "fastapi-offline" in r.json()["error"]["message"]
        assert c.get("/v1/agents").status_code == 200
