"""``holon context show``: the manifest of every round of a turn, and the exact prompt sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from holon.testing.fake_llm import FakeLLM
from tests.helpers.turn_cli import holon

pytestmark = pytest.mark.slow  # every test here starts a process


def test_context_show_explains_and_renders_what_the_model_saw(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo context-check"}}]},
        {"content": "All done."},
    ]
    with FakeLLM(script) as fake:
        assert holon(home, "init").code == 0
        assert holon(home, "agent", "create", "bob", "--model", "openai/fake", "--api-base", fake.url).code == 0
        run = holon(home, "run", "bob", "Please run the check.", "--json").json()
        requests = list(fake.requests)
    assert run["outcome"] == "completed" and run["rounds"] == 2

    shown = holon(home, "context", "show", "bob", "--json").json()
    assert [r["round"] for r in shown] == [0, 1] and all(r["turn_id"] == run["turn_id"] for r in shown)
    for r in shown:
        manifest = r["manifest"]
        assert r["used_tokens"] == manifest["used_tokens"] <= r["budget_tokens"] == manifest["budget"]["limit"]
        keys = {s["key"]: s for s in manifest["sections"]}
        assert keys["input"]["representation"] == "full" and keys["input"]["reason"] == "pinned"
        assert keys["tools"]["tier"] == "stable"
        assert "prompt" not in r  # --render adds it
    # The second round shows the first round's call and result, exactly.
    assert "round:0" in {s["key"] for s in shown[1]["manifest"]["sections"]}

    rendered = holon(home, "context", "show", "bob", "--render", "--json").json()
    # The recorded prompt is byte for byte what the model server received.
    for r, sent in zip(rendered, requests, strict=True):
        assert r["prompt"]["messages"] == sent["messages"]
        assert [t["function"]["name"] for t in r["prompt"]["tools"]] == [t["function"]["name"] for t in sent["tools"]]
    text = holon(home, "context", "show", "bob", "--render")
    assert text.code == 0 and "Please run the check." in text.out and "echo context-check" in text.out

    table = holon(home, "context", "show", "bob")
    assert table.code == 0 and "round 1" in table.out and "pinned" in table.out
    missing = holon(home, "context", "show", "bob", "--turn", "turn_nope")
    assert missing.code == 3 and "no assembled context" in missing.err
