"""Shared by the daemon tests: homes whose agents talk to a ``FakeLLM``, inputs appended from the
test process (the daemon sees them by following the ledger head), and reads of its state file."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers.turn_cli import db_rows, holon, open_store, quick_home
from holon.ledger import events as ev
from holon.runtime.agents import create_agent
from holon.runtime.inputs import input_events
from holon.testing.fake_llm import FakeLLM


def fake_home(tmp_path: Path, fake: FakeLLM, *names: str, storage: str = "") -> Path:
    """A home with agents ``names`` on ``fake`` (``storage``: its ``[storage] url``)."""
    home = quick_home(tmp_path, names[0], storage=storage, model="openai/fake", api_base=fake.url)
    with open_store(home) as store:
        for name in names[1:]:
            create_agent(store, name, settings={"model": "openai/fake", "api_base": fake.url})
    return home


@contextmanager
def chat_home(tmp_path: Path, step: Callable[[dict[str, Any]], dict[str, Any]], agent: str = "alice") -> Iterator[Path]:
    """A home with ``agent`` on a ``FakeLLM`` answering by ``step``, for ``holon chat`` tests (which
    start a daemon in the background); the daemon is stopped when the block ends."""
    with FakeLLM(step) as fake:
        home = fake_home(tmp_path, fake, agent)
        try:
            yield home
        finally:
            r = holon(home, "daemon", "stop")
            assert r.code == 0, r


def submit(home: Path, agent: str, *texts: str) -> list[int]:
    """Append operator inputs from this process (durable once this returns); their seqs."""
    with open_store(home) as store:
        agent_id = store.agent(agent).agent_id
        seqs = []
        for text in texts:
            stored = store.append(
                *input_events(
                    store, agent_id, text, origin="operator:test", authority="operator", sender="operator",
                    channel="test", wakes=("operator", None),
                )
            )  # fmt: skip
            seqs.append(stored[-1].seq)
        return seqs


def state(home: Path) -> dict[str, Any]:
    try:
        return json.loads((home / "run" / "daemon.json").read_text())
    except (OSError, ValueError):
        return {}


def payloads(home: Path, type_: str) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(seq, agent_id, ts_us, payload) of every event of one type."""
    rows = db_rows(home, "SELECT seq, agent_id, ts_us, payload FROM events WHERE type = ? ORDER BY seq", (type_,))
    return [(s, a, t, json.loads(p)) for s, a, t, p in rows]


def agents(home: Path) -> dict[str, dict[str, Any]]:
    """Agent projection rows by name."""
    rows = db_rows(home, "SELECT state FROM projection_rows WHERE kind = 'agent'")
    out = {}
    for (raw,) in rows:
        data = json.loads(raw)
        out[data["name"]] = data
    return out


def all_settled(home: Path) -> bool:
    """No agent has a queued input or an unsettled turn."""
    found = agents(home)
    return bool(found) and all(not a["pending_inputs"] and a["current_turn_id"] is None for a in found.values())


def completed_inputs(home: Path) -> set[int]:
    """Seqs of inputs taken by a turn that settled ``completed``."""
    done = {p["turn_id"] for _, _, _, p in payloads(home, "turn.settled") if p["outcome"] == "completed"}
    return {s for _, _, _, p in payloads(home, "turn.started") if p["turn_id"] in done for s in p["inputs"]}


__all__ = ["agents", "all_settled", "completed_inputs", "ev", "fake_home", "payloads", "state", "submit"]
