"""The endpoints added so the CLI can be a client of the daemon (RFC 0005, "The CLI is a client of
the daemon"): each answers the document the CLI prints in-process, computed by the same function."""

from __future__ import annotations

import httpx
import pytest
from helpers.api_server import ApiServer
from helpers.turn_cli import wait_for

from holon.evolve.export import export_doc
from holon.runtime.run_report import turn_reports
from holon.runtime.transcript import transcript_entries

pytestmark = pytest.mark.timeout(120)


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text
    return str(r.json()["error"]["message"])


def _settled_turn(client: httpx.Client, text: str) -> str:
    seq = client.post("/v1/agents/ada/inputs", json={"text": text}).json()["seq"]

    def turn() -> str | None:
        events = client.get("/v1/ledger/tail", params={"n": 100, "type": ["turn.started", "turn.settled"]}).json()
        started = [
            e["payload"]["turn_id"] for e in events if e["type"] == "turn.started" and seq in e["payload"]["inputs"]
        ]
        done = {e["payload"]["turn_id"] for e in events if e["type"] == "turn.settled"}
        return started[0] if started and started[0] in done else None

    return str(wait_for("the turn to settle", turn, timeout=30))


def test_turns_transcript_durable_and_export_are_the_cli_documents(client: httpx.Client, server: ApiServer) -> None:
    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201
    turn_id = _settled_turn(client, "hello api")

    report = client.get("/v1/agents/ada/turns", params={"turn": [turn_id, "turn_not_settled"]}).json()
    assert report["turns"][0]["reply"] == "echo: hello api" and report["briefs"] == []
    assert len(report["turns"]) == 1, "a turn not settled (or unknown) is left out"
    agent_id = client.get("/v1/agents/ada").json()["agent"]["agent_id"]
    assert server.port is not None
    store = server.port.store
    assert report["turns"] == server.call(lambda: turn_reports(store, [turn_id]))
    transcript = client.get("/v1/agents/ada/transcript", params={"last": 1}).json()
    assert transcript == server.call(lambda: transcript_entries(store, agent_id, 1))
    assert any("hello api" in e["line"] for e in transcript)
    exported = server.call(lambda: export_doc(store, 0))
    assert client.get("/v1/memory/export").json().keys() == exported.keys()
    assert client.get("/v1/memory/durable").json() == []
    assert client.get("/v1/memory/durable", params={"agent": "ada", "status": "all"}).json() == []

    _error(client.get("/v1/agents/nobody/turns", params={"turn": turn_id}), 404, "not_found")
    _error(client.get("/v1/agents/ada/turns"), 422, "invalid")  # at least one turn id
    assert "at most 100" in _error(client.get("/v1/agents/ada/turns", params={"turn": ["t"] * 101}), 400, "bad_request")
    _error(client.get("/v1/agents/nobody/transcript"), 404, "not_found")
    _error(client.get("/v1/agents/ada/transcript", params={"last": 0}), 422, "invalid")
    _error(client.get("/v1/memory/durable", params={"agent": "nobody"}), 404, "not_found")
    _error(client.get("/v1/memory/durable", params={"status": "old"}), 422, "invalid")
    paths = client.get("/v1/openapi.json").json()["paths"]
    for path in (
        "/v1/agents/{agent}/turns",
        "/v1/agents/{agent}/transcript",
        "/v1/memory/durable",
        "/v1/memory/export",
    ):
        assert path in paths, path
