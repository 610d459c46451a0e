"""The HTTP control API over real HTTP (uvicorn on 127.0.0.1) with a real port and scripted models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.turn_cli import holon

from holon.api.app import create_app
from holon.api.server import build_server, check_bind, is_loopback
from holon.clock import FakeClock
from holon.errors import UsageError

if TYPE_CHECKING:
    from conftest import EngineTarget

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL: the daemon behind the API opens the home's
    storage, which follows ``engine`` (``HOLON_STORAGE_URL``; the search index in the node's file)."""
    return engine


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


def _make(client: httpx.Client, name: str = "ada") -> dict:
    r = client.post("/v1/agents", json={"name": name})
    assert r.status_code == 201, r.text
    return r.json()


# --- health, openapi, errors -------------------------------------------------------------------


def test_health_and_openapi(client: httpx.Client) -> None:
    r = client.get("/v1/health")
    assert r.status_code == 200 and r.json() == {"status": "ok", "version": r.json()["version"]}
    doc = client.get("/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in ("/v1/agents", "/v1/agents/{agent}/events", "/v1/ledger/tail", "/v1/hooks/{token}"):
        assert path in doc["paths"]
    assert "CreateAgent" in doc["components"]["schemas"]


def test_unknown_paths_and_methods_are_json_errors(client: httpx.Client) -> None:
    assert _error(client.get("/v1/nope"), 404, "not_found")
    _error(client.get("/redoc"), 404, "not_found")
    _error(client.get("/docs/static/nope.js"), 404, "not_found")
    _error(client.put("/v1/health"), 405, "method_not_allowed")


# --- agents --------------------------------------------------------------------------------------


def test_agent_lifecycle(client: httpx.Client, server: ApiServer) -> None:
    assert client.get("/v1/agents").json() == []
    made = _make(client)
    assert made["name"] == "ada" and made["agent_id"].startswith("agt")
    _error(client.post("/v1/agents", json={"name": "ada"}), 409, "conflict")
    _error(client.post("/v1/agents", json={"name": "Bad Name!"}), 400, "bad_request")
    _error(client.post("/v1/agents", json={"name": "x", "template": "nope"}), 400, "bad_request")
    _error(client.post("/v1/agents", json={"name": "x", "bogus": 1}), 422, "invalid")
    bad = client.post("/v1/agents", content=b"{not json", headers={"content-type": "application/json"})
    assert "not valid JSON" in _error(bad, 400, "bad_request")

    assert [a["name"] for a in client.get("/v1/agents").json()] == ["ada"]
    detail = client.get("/v1/agents/ada").json()
    assert detail["agent"]["agent_id"] == made["agent_id"] and set(detail["counts"]) == {
        "work_item",
        "task",
        "wait",
        "timer",
    }
    assert client.get(f"/v1/agents/{made['agent_id']}").status_code == 200
    _error(client.get("/v1/agents/nobody"), 404, "not_found")

    r = client.patch("/v1/agents/ada", json={"settings": {"max_rounds": 7}})
    assert r.status_code == 200 and r.json()["settings"]["max_rounds"] == 7
    _error(client.patch("/v1/agents/ada", json={"settings": {"no_such": 1}}), 400, "bad_request")
    _error(client.patch("/v1/agents/ada", json={}), 400, "bad_request")
    r = client.patch("/v1/agents/ada", json={"unset": ["max_rounds"]})
    assert r.status_code == 200 and "max_rounds" not in (r.json()["settings"] or {})

    assert client.post("/v1/agents/ada/pause").status_code == 200
    paused = server.call(lambda: server.port.store.agent("ada").settings.get("paused"))  # type: ignore[union-attr]
    assert paused is True
    assert {a["name"]: a["state"] for a in client.get("/v1/status").json()["agents"]}["ada"] == "paused"
    assert client.post("/v1/agents/ada/resume").status_code == 200
    assert client.post("/v1/agents/ada/abort").json() == {"aborted": False}
    for verb in ("pause", "resume", "abort"):
        _error(client.post(f"/v1/agents/nobody/{verb}"), 404, "not_found")

    r = client.delete("/v1/agents/ada")
    assert r.status_code == 204 and r.content == b""
    _error(client.delete("/v1/agents/ada"), 404, "not_found")


def test_input_is_durable_and_answered(client: httpx.Client, server: ApiServer) -> None:
    agent = _make(client)
    r = client.post("/v1/agents/ada/inputs", json={"text": "hello there"})
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["agent_id"] == agent["agent_id"]
    event = server.call(lambda: server.port.store.ledger.get(accepted["seq"]))  # type: ignore[union-attr]
    assert event.type == "message.received" and event.origin == "operator:api" and event.authority == "operator"
    server.wait_idle()
    page = client.get("/v1/agents/ada/events", params={"stream": "false", "limit": 500}).json()
    types = [e["type"] for e in page["events"]]
    assert "turn.settled" in types
    assert any("echo: hello there" in json.dumps(e["payload"]) for e in page["events"] if e["seq"] > accepted["seq"])
    _error(client.post("/v1/agents/ada/inputs", json={"text": ""}), 422, "invalid")
    _error(client.post("/v1/agents/ada/inputs", json={}), 422, "invalid")
    _error(client.post("/v1/agents/nobody/inputs", json={"text": "x"}), 404, "not_found")


def test_state_endpoints(client: httpx.Client, server: ApiServer) -> None:
    _make(client)
    client.post("/v1/agents/ada/inputs", json={"text": "remember the milk"})
    server.wait_idle()
    wm = client.get("/v1/agents/ada/working-memory")
    assert wm.status_code == 200 and isinstance(wm.json(), dict)
    for kind in ("work-items", "tasks", "waits", "timers"):
        r = client.get(f"/v1/agents/ada/{kind}")
        assert r.status_code == 200 and isinstance(r.json(), list), kind
        assert client.get(f"/v1/agents/ada/{kind}", params={"status": "open"}).status_code == 200
        _error(client.get(f"/v1/agents/nobody/{kind}"), 404, "not_found")
    _error(client.get("/v1/agents/nobody/working-memory"), 404, "not_found")


def test_context_manifest(client: httpx.Client, server: ApiServer) -> None:
    _make(client)
    _error(client.get("/v1/agents/ada/context"), 404, "not_found")
    client.post("/v1/agents/ada/inputs", json={"text": "what do you see?"})
    server.wait_idle()
    items = client.get("/v1/agents/ada/context").json()
    assert items and items[0]["manifest"]["sections"] and "prompt" not in items[0]
    turn = items[0]["turn_id"]
    rendered = client.get("/v1/agents/ada/context", params={"turn": turn, "render": "true"}).json()
    assert rendered[0]["turn_id"] == turn and rendered[0]["prompt"]["messages"]
    _error(client.get("/v1/agents/ada/context", params={"turn": "no-such-turn"}), 404, "not_found")


def test_memory_search_and_get(client: httpx.Client, server: ApiServer) -> None:
    _make(client)
    accepted = client.post("/v1/agents/ada/inputs", json={"text": "the zebra password is tulip"}).json()
    server.wait_idle()
    result = client.get("/v1/agents/ada/memory/search", params={"q": "zebra"}).json()
    assert result["query"] == "zebra" and "hits" in result
    assert client.get("/v1/agents/ada/memory/search", params={"q": "zebra", "scope": "agent", "limit": 3}).is_success
    _error(client.get("/v1/agents/ada/memory/search", params={"q": "x", "since": "yesterday"}), 400, "bad_request")
    _error(client.get("/v1/agents/ada/memory/search", params={"q": "x", "kind": "nope"}), 400, "bad_request")
    _error(client.get("/v1/agents/ada/memory/search", params={"q": "x", "scope": "nope"}), 422, "invalid")
    _error(client.get("/v1/agents/ada/memory/search"), 422, "invalid")

    read = client.get("/v1/agents/ada/memory/get", params={"ref": f"event:{accepted['seq']}"}).json()
    assert "zebra" in (read["content"] or "")
    assert client.get("/v1/agents/ada/memory/get", params={"ref": "file:agent/self.md", "mode": "headers"}).is_success
    r = client.get("/v1/agents/ada/memory/get", params={"ref": "nonsense"})
    assert r.status_code in (400, 404) and r.json()["error"]["code"] in ("bad_request", "not_found")


def test_ledger_and_status(client: httpx.Client) -> None:
    agent = _make(client)
    _make(client, "bob")
    tail = client.get("/v1/ledger/tail", params={"n": 1}).json()
    assert len(tail) == 1 and tail[0]["type"] == "agent.created"
    only = client.get("/v1/ledger/tail", params={"agent": "ada"}).json()
    assert only and {e["agent_id"] for e in only} == {agent["agent_id"]}
    _error(client.get("/v1/ledger/tail", params={"agent": "nobody"}), 404, "not_found")
    _error(client.get("/v1/ledger/tail", params={"n": 0}), 422, "invalid")
    verify = client.post("/v1/ledger/verify").json()
    assert verify["ok"] is True and verify["events"] >= 2
    stats = client.get("/v1/ledger/stats").json()
    assert stats["events"] == verify["events"] and "agent.created" in stats["by_type"]
    status = client.get("/v1/status").json()
    assert {a["name"] for a in status["agents"]} == {"ada", "bob"}


# --- external ingress ----------------------------------------------------------------------------


def test_hook_enqueues_external_input(client: httpx.Client, server: ApiServer) -> None:
    agent = _make(client)
    path = client.get("/v1/agents/ada/hook").json()["path"]
    assert path.startswith("/v1/hooks/") and len(path) > len("/v1/hooks/") + 16
    r = client.post(path, json={"build": "failed", "job": 42})
    assert r.status_code == 202, r.text
    event = server.call(lambda: server.port.store.ledger.get(r.json()["seq"]))  # type: ignore[union-attr]
    assert event.agent_id == agent["agent_id"] and event.type == "message.received"
    assert event.authority == "external" and event.origin == "external:hook"
    assert '"build": "failed"' in event.payload.text
    unknown = client.post("/v1/hooks/not-a-token", json={"x": 1})
    assert unknown.status_code == 404 and unknown.json() == client.get("/v1/nope").json()
    _error(client.post(path, content=b"[1, 2]", headers={"content-type": "application/json"}), 400, "bad_request")
    _error(client.post(path, content=b"not json"), 400, "bad_request")
    _error(client.post(path, json={"blob": "x" * 70_000}), 413, "too_large")
    _error(client.get("/v1/agents/nobody/hook"), 404, "not_found")


@pytest.mark.slow
def test_a_rotated_hook_refuses_the_old_url_from_the_api_and_the_cli(
    client: httpx.Client, server: ApiServer, engine: EngineTarget
) -> None:
    _make(client)
    first = client.get("/v1/agents/ada/hook").json()["path"]
    assert client.get("/v1/agents/ada/hook").json()["path"] == first  # stable until rotated
    second = client.post("/v1/agents/ada/hook/rotate").json()["path"]
    assert second != first
    assert client.post(first, json={"n": 1}).status_code == 404
    assert client.post(second, json={"n": 2}).status_code == 202
    # The CLI rotates from another process; the daemon sees it on the next request.
    home = server.port.store.paths.root  # type: ignore[union-attr]
    shown = holon(home, "agent", "hook", "ada", "--json").json()
    assert shown["path"] == second and shown["rotated"] is False
    third = holon(home, "agent", "hook", "ada", "--rotate", "--json").json()["path"]
    assert third not in (first, second)
    assert client.post(second, json={"n": 3}).status_code == 404
    assert client.post(third, json={"n": 4}).status_code == 202
    tokens = home / "run" / "external_tokens.json"  # on PostgreSQL a row of hook_tokens instead
    assert tokens.stat().st_mode & 0o777 == 0o600 if engine.name == "sqlite" else not tokens.exists()
    _error(client.post("/v1/agents/nobody/hook/rotate"), 404, "not_found")


# --- auth and limits -----------------------------------------------------------------------------


def _routes(doc: dict) -> list[tuple[str, str]]:
    fill = {"{agent}": "ada", "{token}": "whatever"}
    out = []
    for template, ops in doc["paths"].items():
        path = template
        for key, value in fill.items():
            path = path.replace(key, value)
        out += [(method.upper(), path) for method in ops]
    return out


def test_token_protects_every_endpoint_but_health_and_the_docs(tmp_path, fast_ledger) -> None:
    with api_server(tmp_path / "home", clock=FakeClock(), token=TOKEN) as s, httpx.Client(base_url=s.url) as c:
        good = {"Authorization": f"Bearer {TOKEN}"}
        doc = c.get("/v1/openapi.json", headers=good).json()
        routes = [*_routes(doc), ("POST", "/v1/openapi.json"), ("POST", "/docs"), ("GET", "/v1/nope")]
        for method, path in routes:
            if path == "/v1/health" or path.startswith("/v1/hooks/"):
                continue
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": TOKEN},
                {"Authorization": "Basic x"},
            ):
                r = c.request(method, path, headers=headers, json={"name": "ada"})
                assert r.status_code == 401, (method, path, r.status_code)
                assert r.json()["error"]["code"] == "unauthorized"
                assert set(r.headers) <= {"content-length", "content-type", "www-authenticate", "date", "server"}
        assert c.get("/v1/health").status_code == 200
        # The docs are read-only pages a browser opens without a header (issue 15).
        assert c.get("/v1/openapi.json").status_code == c.get("/docs").status_code == 200
        assert c.post("/v1/agents", headers=good, json={"name": "ada"}).status_code == 201
        assert c.get("/v1/agents", headers=good).json()[0]["name"] == "ada"
        # The hook path is its own capability: no header needed, and an unknown token is a plain 404.
        path = c.get("/v1/agents/ada/hook", headers=good).json()["path"]
        assert c.post(path, json={"ping": True}).status_code == 202
        assert c.post("/v1/hooks/guess", json={}).status_code == 404


def test_body_limit(tmp_path, fast_ledger) -> None:
    with api_server(tmp_path / "home", clock=FakeClock(), max_body_bytes=2_000) as s, s.client() as c:
        c.post("/v1/agents", json={"name": "ada"})
        _error(c.post("/v1/agents/ada/inputs", json={"text": "x" * 5_000}), 413, "too_large")

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while reading
            yield b'{"text": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}'

        r = c.post("/v1/agents/ada/inputs", content=chunks(), headers={"content-type": "application/json"})
        _error(r, 413, "too_large")
        assert c.post("/v1/agents/ada/inputs", json={"text": "small"}).status_code == 202


def test_unhandled_errors_are_500_internal_without_traceback(tmp_path, fast_ledger) -> None:
    class Broken:
        store = None

        def status(self) -> dict:
            raise RuntimeError("secret internals")

    from starlette.testclient import TestClient

    app = create_app(Broken(), allowed_hosts=("testserver",))  # type: ignore[arg-type]
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/v1/status")
        assert r.status_code == 500 and r.json() == {
            "error": {"code": "internal", "message": r.json()["error"]["message"]}
        }
        assert "secret" not in r.text and "Traceback" not in r.text


def test_server_refuses_public_bind_without_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    with pytest.raises(UsageError, match="without a token"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", TOKEN)
    check_bind("127.0.0.1", None)

    class Nothing:
        store = None

    with pytest.raises(UsageError, match="without a token"):
        build_server(create_app(Nothing()), host="0.0.0.0", port=0, token=None)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        create_app(Nothing(), token=" ")  # type: ignore[arg-type]
