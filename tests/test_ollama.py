"""Ollama through litellm (issue 15 item 5): real turns and ``holon model test`` against a loopback
server that speaks Ollama's API (``helpers.fake_ollama``).

``ollama_chat/<model>`` goes to ``POST /api/chat`` with native tool schemas; ``ollama/<model>``
goes to ``POST /api/generate`` (one prompt; litellm asks for JSON when tools are offered). Both
are set up the documented way: ``holon model set MODEL --api-base http://HOST:PORT`` (no key).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.daemon import payloads
from helpers.fake_ollama import FakeOllama
from helpers.turn_cli import holon

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def test_a_real_turn_and_a_model_test_through_ollama_chat(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = [
        {"tool_calls": [{"name": "ping", "arguments": {"text": "hello"}}]},  # holon model test
        {"tool_calls": [{"name": "brief", "arguments": {"text": "brief from ollama", "kind": "progress"}}]},
        {"content": "Hello from Ollama."},
    ]
    with FakeOllama(script) as fake:
        r = holon(home, "model", "set", "ollama_chat/llama3.2", "--api-base", fake.url)
        assert r.code == 0 and "created assistant: ollama_chat/llama3.2" in r.out, r
        tested = holon(home, "model", "test", "--json").json()
        assert tested["model"] == "ollama_chat/llama3.2" and tested["tool_calls"] is True, tested

        run = holon(home, "run", "assistant", "Say hello, and brief me first.", "--json")
        assert run.code == 0, run
        result = run.json()
        paths = [p for p, _ in fake.requests]
    assert result["outcome"] == "completed" and "Hello from Ollama." in result["reply"], result
    assert paths == ["/api/chat", "/api/chat", "/api/chat"], paths
    turn_request = fake.requests[1][1]
    assert turn_request["model"] == "llama3.2" and turn_request["tools"], turn_request.keys()
    assert any(m.get("role") == "tool" for m in fake.requests[2][1]["messages"]), "the tool result went back"
    called = [p["tool"] for *_, p in payloads(home, "tool.called")]
    assert called == ["brief"], called


def test_a_real_turn_through_ollama_generate(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeOllama([{"content": "Hello from generate."}]) as fake:
        r = holon(home, "model", "set", "ollama/llama3.2", "--api-base", fake.url)
        assert r.code == 0, r
        run = holon(home, "run", "assistant", "Say hello.", "--json")
        assert run.code == 0, run
        result = run.json()
        [(path, body)] = fake.requests
    assert result["outcome"] == "completed" and "Hello from generate." in result["reply"], result
    assert path == "/api/generate" and body["model"] == "llama3.2" and "Say hello." in body["prompt"], body
