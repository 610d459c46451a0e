"""``GET /v1/agents/{agent}/events``: the SSE stream and its JSON page, over real HTTP.

Resuming from a cursor (``Last-Event-ID`` or ``?after=``) must deliver every ledger event of the
agent exactly once and in order, including events appended while the client was away and while
it was reconnecting.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from helpers.api_server import ApiServer


@dataclass
class Message:
    event: str
    data: str
    id: str | None = None


class Reader:
    """Reads SSE messages from one streaming response, call after call, until ``stop(messages)``."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()
        self.messages: list[Message] = []

    def read(self, stop: Callable[[list[Message]], bool], timeout_s: float = 15.0) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        current: dict[str, str] = {}
        for line in self.lines:
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream did not finish: {len(self.messages)} messages")
            if line.startswith(":"):
                continue
            if not line:
                if "data" in current:
                    self.messages.append(Message(current.get("event", "message"), current["data"], current.get("id")))
                    if stop(self.messages):
                        return self.messages
                current = {}
                continue
            key, _, value = line.partition(":")
            current[key] = value.removeprefix(" ")
        raise AssertionError("stream ended")


def _events(messages: list[Message]) -> list[dict]:
    return [json.loads(m.data) for m in messages if m.event == "event"]


def _agent_seqs(client: httpx.Client, agent: str) -> list[int]:
    page = client.get(f"/v1/agents/{agent}/events", params={"stream": "false", "limit": 500}).json()
    return [e["seq"] for e in page["events"]]


def _send(client: httpx.Client, n: int, *, pause_s: float = 0.0) -> None:
    for i in range(n):
        assert client.post("/v1/agents/ada/inputs", json={"text": f"note {i}"}).status_code == 202
        time.sleep(pause_s)


def test_stream_then_live_with_deltas(client: httpx.Client, server: ApiServer) -> None:
    client.post("/v1/agents", json={"name": "ada"})
    with client.stream("GET", "/v1/agents/ada/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        reader = Reader(r)
        reader.read(lambda ms: len(_events(ms)) == 1)
        assert _events(reader.messages)[0]["type"] == "agent.created"
        client.post("/v1/agents/ada/inputs", json={"text": "stream me"})
        reader.read(lambda ms: any(e["type"] == "turn.settled" for e in _events(ms)))
    events = [m for m in reader.messages if m.event == "event"]
    assert [int(m.id or 0) for m in events] == [e["seq"] for e in _events(reader.messages)]
    deltas = [m for m in reader.messages if m.event == "delta"]
    assert deltas and all(m.id is None for m in deltas)
    assert "echo: stream me" in "".join(json.loads(m.data)["text"] for m in deltas)
    got = [e["seq"] for e in _events(reader.messages)]
    assert got == _agent_seqs(client, "ada")[: len(got)]  # more may follow the settled turn


@pytest.mark.parametrize("how", ["last-event-id", "after"])
def test_resume_delivers_every_event_exactly_once(client: httpx.Client, how: str) -> None:
    client.post("/v1/agents", json={"name": "ada"})
    client.post("/v1/agents", json={"name": "bob"})  # another agent's events never appear
    client.post("/v1/agents/ada/pause")  # no turns: a known number of events
    total = 1 + 1 + 15  # agent.created, agent.configured (the pause) and the 15 inputs
    _send(client, 5)
    seen: list[dict] = []
    with client.stream("GET", "/v1/agents/ada/events", params={"after": 0}) as r:
        seen += _events(Reader(r).read(lambda ms: len(_events(ms)) == 4))
    _send(client, 5)  # appended while the client is away
    writer = threading.Thread(target=_send, args=(client, 5), kwargs={"pause_s": 0.02})
    writer.start()  # and while it reconnects and catches up
    cursor = str(seen[-1]["seq"])
    options = {"headers": {"Last-Event-ID": cursor}} if how == "last-event-id" else {"params": {"after": cursor}}
    with client.stream("GET", "/v1/agents/ada/events", **options) as r:  # type: ignore[arg-type]
        seen += _events(Reader(r).read(lambda ms: len(_events(ms)) == total - 4))
        writer.join()
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(set(seqs)), "duplicates or out of order"
    assert seqs == _agent_seqs(client, "ada") and len(seqs) == total
    assert {e["agent_id"] for e in seen} == {seen[0]["agent_id"]}


def test_last_event_id_wins_over_after_and_is_checked(client: httpx.Client) -> None:
    client.post("/v1/agents", json={"name": "ada"})
    client.post("/v1/agents/ada/pause")
    _send(client, 3)
    seqs = _agent_seqs(client, "ada")
    with client.stream(
        "GET", "/v1/agents/ada/events", params={"after": 0}, headers={"Last-Event-ID": str(seqs[2])}
    ) as r:
        got = _events(Reader(r).read(lambda ms: len(_events(ms)) == 1))
    assert got[0]["seq"] == seqs[3]
    r = client.get("/v1/agents/ada/events", headers={"Last-Event-ID": "abc"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    r = client.get("/v1/agents/nobody/events")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_json_page(client: httpx.Client) -> None:
    client.post("/v1/agents", json={"name": "ada"})
    client.post("/v1/agents/ada/pause")
    _send(client, 4)
    first = client.get("/v1/agents/ada/events", params={"stream": "false", "limit": 2}).json()
    assert len(first["events"]) == 2 and first["head"] >= 5
    rest = client.get(
        "/v1/agents/ada/events", params={"stream": "false", "after": first["next_after"], "limit": 100}
    ).json()
    assert [e["seq"] for e in first["events"] + rest["events"]] == _agent_seqs(client, "ada")
    empty = client.get("/v1/agents/ada/events", params={"stream": "false", "after": rest["next_after"]}).json()
    assert empty["events"] == [] and empty["next_after"] == rest["next_after"]
