"""One status (issue 15 item 7): every view of an agent says the same thing.

A real ``holon serve`` (HTTP on 127.0.0.1) with a FakeLLM on loopback hosts agents in each state:
idle, asleep until its next timer, waiting on the operator, paused, aborted by the operator,
failed with the model's refusal, and failed but retried with backoff (its key variable is unset:
the retry time is its wake time), plus holon's internal diagnostic agent. ``holon agent list
--json``, ``holon agent show --json``, ``holon daemon status --json``, ``GET /v1/status`` and
``GET /v1/agents/{a}[/status]`` (real CLI subprocesses and real HTTP) must give each agent the
same state, detail and wake time; the internal agent shows only with ``--all``/``?all=true``.
With the daemon stopped, ``agent list`` decides the same states from the ledger alone (before,
it said ``idle`` for an agent the daemon called ``asleep``, and ``failed`` for a paused or
aborted one).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.daemon import payloads, state, submit
from helpers.turn_cli import cli_env, holon, open_store, quick_home, spawn_holon, wait_for

from holon.api.server import free_port
from holon.api.token import read_token
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EXPECTED = {
    "plain": "idle",
    "timed": "asleep",
    "waiter": "waiting",
    "held": "paused",
    "stopper": "aborted",
    "broken": "failed",
    "keyless": "failed",
}
KEY_VAR = "GROQ_API_KEY"  # allowed by default; never set for these processes
#: Retried with backoff: its retry time moves with each retry, so its views are compared apart.
RETRYING = "keyless"
KEYS = ("state", "detail", "next_wake_us")


def _by_keyword(body: dict[str, Any]) -> dict[str, Any]:
    seen = json.dumps(body.get("messages", []))
    if "Hold on for my approval" in seen:
        return {"tool_calls": [{"name": "wait", "arguments": {"on": "operator", "recheck_in_s": 3600,
                                                              "reason": "approval"}}]}  # fmt: skip
    if "Think for a long time" in seen:
        return {"content": "too late", "delay": 20}
    if "Break please" in seen:
        return {"error": 400, "message": "Invalid request: the schema is broken"}
    return {"content": "Done."}


@contextlib.contextmanager
def _daemon(home: Path) -> Iterator[httpx.Client]:
    port = free_port()
    proc = spawn_holon(home, "serve", "--port", str(port), env=_env())
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc, timeout=90)
        token = read_token(home)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:
            yield client
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        proc.communicate()


def _env() -> dict[str, str]:
    return {k: v for k, v in cli_env().items() if k != KEY_VAR}


def _pick(entry: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(entry.get(k) for k in KEYS)


def _listed(home: Path, *extra: str) -> dict[str, dict[str, Any]]:
    r = holon(home, "agent", "list", "--json", *extra, env=_env())
    assert r.code == 0, r
    return {row["name"]: row for row in r.json()}


def _retry_agreed(home: Path, api: httpx.Client) -> dict[str, Any] | None:
    """The retrying agent's entry when the CLI, daemon status and the API give the same one."""
    listed = _listed(home).get(RETRYING, {})
    r = holon(home, "daemon", "status", "--json", env=_env())
    daemon = next((a for a in r.json()["status"]["agents"] if a["name"] == RETRYING), {})
    one = api.get(f"/v1/agents/{RETRYING}/status").json()
    views = [_pick(listed), _pick(daemon), _pick(one)]
    ok = one["state"] == "failed" and one["next_wake_us"] and views.count(views[0]) == 3
    return daemon if ok else None


def listed_text_of(text: str, name: str) -> str:
    return next((line for line in text.splitlines() if line.split()[0] == name), "")


def test_every_view_agrees_on_each_agents_state(tmp_path: Path) -> None:
    with FakeLLM(_by_keyword) as fake:
        model = {"model": "openai/fake", "api_base": fake.url}
        home = quick_home(tmp_path, "plain", **model)
        with open_store(home) as store:
            for name in ("waiter", "held", "stopper", "broken"):
                create_agent(store, name, settings=model)
            create_agent(store, RETRYING, settings={**model, "api_key_env": KEY_VAR})
            create_agent(store, "diagnose", settings={**model, "diagnostic": True}, internal=True)
        r = holon(home, "agent", "create", "timed", "--model", "openai/fake", "--api-base", fake.url,
                  "--schedule", "0 9 * * *", "--prompt", "morning report")  # fmt: skip
        assert r.code == 0, r
        submit(home, "waiter", "Hold on for my approval")
        submit(home, "broken", "Break please")
        submit(home, RETRYING, "Hello")
        with _daemon(home) as api:
            assert api.post("/v1/agents/held/pause").status_code == 200
            assert api.post("/v1/agents/stopper/inputs", json={"text": "Think for a long time"}).status_code == 202
            wait_for("the long turn to run",
                     lambda: api.get("/v1/agents/stopper/status").json()["state"] == "running", timeout=60)  # fmt: skip
            assert api.post("/v1/agents/stopper/abort").json() == {"aborted": True}
            wait_for(
                "every agent in its state",
                lambda: {n: r["state"] for n, r in _listed(home).items()} == EXPECTED,
                timeout=60,
            )
            retrying = wait_for("every view to agree on the retry time", lambda: _retry_agreed(home, api), timeout=90)
            listed = _listed(home)
            listed_all = _listed(home, "--all")
            status = holon(home, "daemon", "status", "--json").json()["status"]
            status_all = holon(home, "daemon", "status", "--json", "--all").json()["status"]
            shown = {n: holon(home, "agent", "show", n, "--json").json() for n in EXPECTED}
            api_status = api.get("/v1/status").json()
            api_all = api.get("/v1/status", params={"all": "true"}).json()
            api_one = {n: api.get(f"/v1/agents/{n}/status").json() for n in EXPECTED}
            api_detail = {n: api.get(f"/v1/agents/{n}").json()["status"] for n in EXPECTED}
            api_list = [a["name"] for a in api.get("/v1/agents").json()]
            api_list_all = [a["name"] for a in api.get("/v1/agents", params={"all": "true"}).json()]
            text = holon(home, "agent", "list").out
        # the daemon is stopped: the same states, decided from the ledger alone
        offline = _listed(home)
        shown_text = holon(home, "agent", "show", "timed").out

    daemon_rows = {a["name"]: a for a in status["agents"]}
    api_rows = {a["name"]: a for a in api_status["agents"]}
    for name in set(EXPECTED) - {RETRYING}:
        want = _pick(daemon_rows[name])
        views = {
            "agent list": _pick(listed[name]),
            "agent show": _pick(shown[name]["status"]),
            "GET /v1/status": _pick(api_rows[name]),
            "GET /v1/agents/{a}/status": _pick(api_one[name]),
            "GET /v1/agents/{a}": _pick(api_detail[name]),
        }
        assert all(v == want for v in views.values()), (name, want, views)
        assert listed[name]["model"] == "openai/fake" == api_one[name]["model"], listed[name]
    assert {n: r["state"] for n, r in offline.items()} == EXPECTED, offline

    # what each state says
    assert retrying["state"] == "failed" and KEY_VAR in retrying["detail"] and retrying["next_wake_us"], retrying
    line = listed_text_of(text, RETRYING)
    assert "; retry at " in line or line.split()[1] == "running", text  # a retry takes a moment
    assert daemon_rows["held"]["detail"] == "paused by the operator"
    assert daemon_rows["stopper"]["detail"] == "aborted by the operator"
    assert "the schema is broken" in daemon_rows["broken"]["detail"]
    assert daemon_rows["waiter"]["detail"] == "operator" and daemon_rows["waiter"]["next_wake_us"]
    assert daemon_rows["timed"]["detail"] == "for its next timer" and daemon_rows["timed"]["next_wake"].endswith(
        "T09:00:00.000000Z"
    )
    # the stopped turn settled as the operator's abort, not as a model failure
    stopper_id = listed["stopper"]["agent_id"]
    settled = [p for _, a, _, p in payloads(home, "turn.settled") if a == stopper_id]
    assert [p["reason"] for p in settled] == ["aborted by the operator"], settled

    # internal agents only when asked for
    for names in (set(listed), {a["name"] for a in status["agents"]}, set(api_rows), set(api_list)):
        assert "diagnose" not in names and names >= set(EXPECTED), names
    for names in (set(listed_all), {a["name"] for a in status_all["agents"]},
                  {a["name"] for a in api_all["agents"]}, set(api_list_all)):  # fmt: skip
        assert "diagnose" in names, names

    # the table: a model column, the same words as daemon status, no Python reprs
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "MODEL", "TURNS", "DETAIL"], text
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["timed"].split()[1:3] == ["asleep", "openai/fake"], text
    assert "for its next timer; until" in rows["timed"] and "on operator; recheck at" in rows["waiter"], text
    assert "{'" not in text, text
    # settings as TOML, not a dict repr
    assert 'model = "openai/fake"' in shown_text and "background = true" in shown_text, shown_text
    assert "{'" not in shown_text and "state:     asleep (for its next timer; until" in shown_text, shown_text
