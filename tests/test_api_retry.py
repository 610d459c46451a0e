"""Safe retries over real HTTP: idempotency keys on inputs, hooks and MCP ``send_input``; clear
400s for bodies that are not JSON or not Unicode; a 500 that keeps the connection; bursts of
concurrent posts that all get an answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.api_server import ApiServer, api_server

from holon.clock import FakeClock

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path: Path, fast_ledger: None) -> Iterator[ApiServer]:
    with api_server(tmp_path / "home", clock=FakeClock()) as s:
        with s.client() as c:
            for name in ("ada", "bob"):
                assert c.post("/v1/agents", json={"name": name}).status_code == 201
            assert c.post("/v1/agents/ada/pause").status_code == 200  # inputs stay queued: easy to count
            assert c.post("/v1/agents/bob/pause").status_code == 200
        yield s


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


def _messages(server: ApiServer, agent: str) -> list[dict[str, Any]]:
    with server.client() as c:
        tail = c.get("/v1/ledger/tail", params={"agent": agent, "n": 1000, "type": "message.received"})
        return list(tail.json())


# --- idempotency keys --------------------------------------------------------------------------


def test_a_retried_input_gets_the_first_acknowledgement(server: ApiServer) -> None:
    with server.client() as c:
        first = c.post("/v1/agents/ada/inputs", json={"text": "deploy v2"}, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == 202
        again = c.post("/v1/agents/ada/inputs", json={"text": "deploy v2"}, headers={"Idempotency-Key": "k-1"})
        assert again.status_code == 202 and again.json() == first.json()
        field = c.post("/v1/agents/ada/inputs", json={"text": "deploy v2", "idempotency_key": "k-1"})
        assert field.status_code == 202 and field.json() == first.json(), "the body field is the same key"
        by_id = c.post(
            f"/v1/agents/{first.json()['agent_id']}/inputs",
            json={"text": "deploy v2"},
            headers={"Idempotency-Key": "k-1"},
        )
        assert by_id.json() == first.json()
        # Scoped per agent: bob's k-1 is another input.
        bob = c.post("/v1/agents/bob/inputs", json={"text": "deploy v2"}, headers={"Idempotency-Key": "k-1"})
        assert bob.status_code == 202 and bob.json()["seq"] != first.json()["seq"]
        # Without a key every post is a new input, as before.
        assert c.post("/v1/agents/ada/inputs", json={"text": "deploy v2"}).json()["seq"] != first.json()["seq"]
    texts = [e["payload"]["text"] for e in _messages(server, "ada")]
    assert texts == ["deploy v2", "deploy v2"]
    [keyed] = [e for e in _messages(server, "ada") if e["idempotency_key"]]
    assert keyed["idempotency_key"] == f"input:{first.json()['agent_id']}:k-1"


def test_the_same_key_with_another_input_is_a_conflict(server: ApiServer) -> None:
    with server.client() as c:
        assert (
            c.post("/v1/agents/ada/inputs", json={"text": "one"}, headers={"Idempotency-Key": "abc"}).status_code == 202
        )
        r = c.post("/v1/agents/ada/inputs", json={"text": "two"}, headers={"Idempotency-Key": "abc"})
        message = _error(r, 409, "conflict")
        assert "'abc'" in message and "different input" in message
        for bad in ("x" * 201, "has space", "tab\there", "ünï"):
            r = c.post("/v1/agents/ada/inputs", json={"text": "one", "idempotency_key": bad})
            assert "idempotency key" in _error(r, 400, "bad_request")
        r = c.post(
            "/v1/agents/ada/inputs", json={"text": "one", "idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
        )
        assert "differ" in _error(r, 400, "bad_request")
        _error(c.post("/v1/agents/ada/inputs", json={"text": "one", "idempotency_key": ""}), 400, "bad_request")
    assert [e["payload"]["text"] for e in _messages(server, "ada")] == ["one"]


def test_concurrent_duplicates_store_one_input(server: ApiServer) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=30) as c:
            return await asyncio.gather(
                *(
                    c.post("/v1/agents/ada/inputs", json={"text": "only once"}, headers={"Idempotency-Key": "dup"})
                    for _ in range(40)
                )
            )

    answers = asyncio.run(burst())
    assert {r.status_code for r in answers} == {202}
    assert len({json.dumps(r.json(), sort_keys=True) for r in answers}) == 1
    assert [e["payload"]["text"] for e in _messages(server, "ada")] == ["only once"]


def test_a_retried_input_does_not_resolve_a_wait_made_since(server: ApiServer) -> None:
    """The retry stores nothing at all: not even a ``wait.resolved`` for a wait that is newer."""
    from holon.ledger import NewEvent
    from holon.ledger import events as ev

    with server.client() as c:
        first = c.post("/v1/agents/ada/inputs", json={"text": "hello"}, headers={"Idempotency-Key": "w"}).json()
        ada = server.call(lambda: server.port.store.agent("ada").agent_id)  # type: ignore[union-attr]
        wait = ev.WaitRegistered(wait_id="wait_test", on="operator", reason="a question", recheck_at_us=2**50)
        server.call(lambda: server.port.store.append(NewEvent(ada, wait)))  # type: ignore[union-attr]
        head = c.get("/v1/agents/ada/events", params={"stream": "false", "limit": 1, "after": 2**62}).json()["head"]
        again = c.post("/v1/agents/ada/inputs", json={"text": "hello"}, headers={"Idempotency-Key": "w"})
        assert again.json() == first
        after = c.get("/v1/agents/ada/events", params={"stream": "false", "limit": 1, "after": 2**62}).json()["head"]
        assert after == head, "nothing was appended by the retry"
        assert [w["status"] for w in c.get("/v1/agents/ada/waits").json()] == ["pending"]


def test_a_retried_hook_gets_the_first_acknowledgement(server: ApiServer) -> None:
    with server.client() as c:
        path = c.get("/v1/agents/ada/hook").json()["path"]
    with httpx.Client(base_url=server.url, timeout=10) as program:  # hooks carry no token
        first = program.post(path, json={"build": "failed"}, headers={"Idempotency-Key": "ci-42"})
        assert first.status_code == 202
        again = program.post(path, json={"build": "failed"}, headers={"Idempotency-Key": "ci-42"})
        assert again.status_code == 202 and again.json() == first.json()
        field = program.post(path, json={"build": "ok", "idempotency_key": "ci-43"})
        assert program.post(path, json={"build": "ok", "idempotency_key": "ci-43"}).json() == field.json()
        message = _error(
            program.post(path, json={"build": "ok"}, headers={"Idempotency-Key": "ci-42"}), 409, "conflict"
        )
        assert "ci-42" in message
        _error(program.post(path, json={"idempotency_key": 7}), 400, "bad_request")
    assert len(_messages(server, "ada")) == 2


def test_mcp_send_input_takes_an_idempotency_key(tmp_path: Path) -> None:
    import mcp
    from helpers.turn_cli import open_store, quick_home

    from holon.mcp.server import build_server

    home = quick_home(tmp_path, "ada")

    async def go() -> list[Any]:
        with open_store(home) as store:
            async with mcp.Client(build_server(store, "ada")) as client:
                calls = [
                    await client.call_tool("send_input", {"text": "note", "idempotency_key": "m-1"}),
                    await client.call_tool("send_input", {"text": "note", "idempotency_key": "m-1"}),
                    await client.call_tool("send_input", {"text": "other", "idempotency_key": "m-1"}),
                ]
                return calls

    first, again, conflict = asyncio.run(go())
    assert not first.is_error and not again.is_error
    assert first.structured_content == again.structured_content
    assert conflict.is_error and "m-1" in conflict.content[0].text
    with open_store(home) as store:
        ada = store.agent("ada").agent_id
        assert [e.payload.text for e in store.ledger.read(0, agent_id=ada) if e.type == "message.received"] == ["note"]


# --- bodies that are not JSON or not text ---------------------------------------------------------


def test_lone_surrogates_and_undecodable_bodies_are_clear_400s(server: ApiServer) -> None:
    json_type = {"Content-Type": "application/json"}
    with server.client() as c:
        path = c.get("/v1/agents/ada/hook").json()["path"]
        r = c.post("/v1/agents/ada/inputs", content=b'{"text": "hi \\ud800 there"}', headers=json_type)
        message = _error(r, 400, "bad_request")
        assert "body.text" in message and "lone surrogate" in message, message
        r = c.post(path, content=b'{"note": "\\udfff"}', headers=json_type)
        message = _error(r, 400, "bad_request")
        assert "hook body" in message and "lone surrogate (U+DFFF" in message
        r = c.post(path, content=b'{"note": "\xff\xfe"}', headers=json_type)
        assert "not UTF-8" in _error(r, 400, "bad_request")
        r = c.post(path, content=b'{"note": ', headers=json_type)
        assert "not JSON" in _error(r, 400, "bad_request")
        r = c.post("/v1/agents/ada/inputs", content=b'{"text": "\xff"}', headers=json_type)
        assert "not valid JSON" in _error(r, 400, "bad_request")
        # A surrogate pair is a real character, and is fine.
        assert (
            c.post("/v1/agents/ada/inputs", content=b'{"text": "\\ud83d\\udca5"}', headers=json_type).status_code == 202
        )
    assert [e["payload"]["text"] for e in _messages(server, "ada")] == ["\U0001f4a5"]


# --- 500s and bursts -------------------------------------------------------------------------------


def _raw_exchange(port: int, requests: list[bytes]) -> list[bytes]:
    """Send each request on ONE connection and read each answer (a reset raises)."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for request in requests:
            sock.sendall(request)
            status = reader.readline()
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            answers.append(status + reader.read(length))
    return answers


def test_an_unexpected_error_is_a_json_500_and_the_connection_stays_open(tmp_path: Path) -> None:
    from holon.api.app import create_app
    from holon.api.server import build_server, free_port
    from holon.logs import configure_logging

    log_file = tmp_path / "holon.log"
    configure_logging(level="info", log_file=log_file, console="off")

    class Broken:
        store = None

        def status(self) -> dict[str, Any]:
            raise RuntimeError("sk-secret-canary from the request")

    port = free_port()
    server = build_server(create_app(Broken(), token="t0ken"), host="127.0.0.1", port=port, token="t0ken")  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve()), daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        get = f"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer t0ken\r\n\r\n".encode()
        health = f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        first, second, third = _raw_exchange(port, [get, get, health])
    finally:
        server.should_exit = True
        thread.join(10)
    for answer in (first, second):
        assert answer.startswith(b"HTTP/1.1 500"), answer
        body = json.loads(answer.split(b"\r\n", 1)[1])
        assert body == {"error": {"code": "internal", "message": "internal error (see the daemon log)"}}
    assert third.startswith(b"HTTP/1.1 200"), "the same connection still answers after two 500s"
    logged = log_file.read_text()
    assert "RuntimeError" in logged and "sk-secret-canary" not in logged


@pytest.mark.slow
def test_six_hundred_concurrent_posts_all_get_an_answer(server: ApiServer) -> None:
    """A burst of 600 concurrent posts on fresh connections: every one answered 202, none reset."""

    async def burst() -> list[int | str]:
        limits = httpx.Limits(max_connections=600, max_keepalive_connections=600)
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60, limits=limits) as c:

            async def post(n: int) -> int | str:
                try:
                    r = await c.post("/v1/agents/ada/inputs", json={"text": f"burst {n}"})
                    return r.status_code
                except httpx.TransportError as e:
                    return type(e).__name__

            return await asyncio.gather(*(post(n) for n in range(600)))

    for _ in range(2):  # twice: a burst right after a burst
        outcomes = asyncio.run(burst())
        assert outcomes.count(202) == 600, {o: outcomes.count(o) for o in set(outcomes)}


def test_the_server_keeps_idle_connections_longer_than_client_pools() -> None:
    """The keep-alive race behind "a reset after a quiet spell": httpx drops a pooled connection
    after 5 s idle, and uvicorn closed idle connections after 5 s too, so a request sent at that
    moment met a closing socket. The server now waits well past any client pool's expiry."""
    from holon.api.app import create_app
    from holon.api.server import BACKLOG, build_server

    class Nothing:
        store = None

    server = build_server(create_app(Nothing()), host="127.0.0.1", port=0, token=None)  # type: ignore[arg-type]
    expiry = httpx.Limits().keepalive_expiry or 0
    assert server.config.timeout_keep_alive >= 4 * expiry
    assert server.config.backlog == BACKLOG >= 600


def test_the_repl_client_retries_a_lost_answer_without_a_second_input(server: ApiServer) -> None:
    """The input is committed but the answer is lost (a reset): ``ApiClient.send`` retries with the
    same key and gets the first acknowledgement; the agent has the input once."""
    from holon.repl.client import ApiClient

    class LoseFirstAnswer(httpx.BaseTransport):
        def __init__(self) -> None:
            self.real = httpx.HTTPTransport()
            self.posts = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = self.real.handle_request(request)
            if request.method == "POST":
                self.posts += 1
                if self.posts == 1:
                    response.read()
                    response.close()
                    raise httpx.ReadError("connection reset by peer", request=request)
            return response

    transport = LoseFirstAnswer()
    with ApiClient(server.url, token=server.token) as client:
        client._http.close()
        client._http = httpx.Client(base_url=server.url, headers=server.headers, transport=transport, timeout=10)
        ack = client.send("ada", "exactly once please")
    assert transport.posts == 2, "the first answer was lost and the client asked again"
    [stored] = _messages(server, "ada")
    assert stored["payload"]["text"] == "exactly once please" and stored["seq"] == ack.seq
