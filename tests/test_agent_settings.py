"""Agent settings on every path (issue 14, finding 5; RFC 0002 "Agent settings" and "Secrets by name").

Over the real HTTP API (uvicorn on 127.0.0.1, the real daemon, a scripted model): every bad value
is a 400 naming the field and never echoing the value; nothing bad is recorded; a ledger that
already holds bad settings runs on defaults with one visible error instead of crash-looping; key
variables and api_base hosts come only from the operator's allow-lists.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.props import examples
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.config import ModelDefaults
from holon.errors import UsageError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections.state import AgentState
from holon.runtime.models import model_settings
from holon.runtime.settings import OPERATOR_KEYS, AgentSettings, read_settings, validate_settings

SECRET = "sk-canary-5f0c1d2e3a4b5c6d7e8f"


def _bad_request(r: httpx.Response, field: str) -> str:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"]["code"] == "bad_request", body
    message = str(body["error"]["message"])
    assert f"'{field}'" in message and "\n" not in message, message
    return message


def _events(server: ApiServer, type_: str) -> list[Any]:
    def read() -> list[Any]:
        store = server.port.store  # type: ignore[union-attr]
        rows = store.ledger.query("SELECT seq FROM events WHERE type = ? ORDER BY seq", (type_,))
        return [e.payload for e in store.ledger.get_many([int(s) for (s,) in rows])]

    return server.call(read)  # type: ignore[no-any-return]


def _raw(client: httpx.Client, method: str, url: str, body: str) -> httpx.Response:
    """A body as bytes: ``NaN``/``Infinity`` are what Python's (and Starlette's) JSON parser accepts."""
    return client.request(method, url, content=body.encode(), headers={"content-type": "application/json"})


# --- the reported attacks: each a 400 naming the field ---------------------------------------------

REPORTED = [
    ('{"max_rounds": "many"}', "max_rounds"),
    ('{"paused": "no"}', "paused"),
    ('{"background": "yes"}', "background"),
    (json.dumps({"api_key": SECRET}), "api_key"),
    ('{"temperature": NaN}', "temperature"),
    ('{"temperature": Infinity}', "temperature"),
    ('{"max_cost_per_turn_usd": Infinity}', "max_cost_per_turn_usd"),
    ('{"budget_cost_per_day_usd": -Infinity}', "budget_cost_per_day_usd"),
    ('{"timeout_s": 1e999}', "timeout_s"),
    ('{"max_rounds": 1e3}', "max_rounds"),
    ('{"max_rounds": 0}', "max_rounds"),
    ('{"max_rounds": true}', "max_rounds"),
    (json.dumps({"api_key_env": SECRET}), "api_key_env"),
    (json.dumps({"api_base": f"https://user:{SECRET}@example.com/v1"}), "api_base"),
    (json.dumps({"model": f"huggingface/https://{SECRET}.example/x"}), "model"),
    (json.dumps({"diagnostic": True}), "diagnostic"),
]


def test_reported_bad_settings_are_400_naming_the_field_on_create_and_configure(
    client: httpx.Client, server: ApiServer
) -> None:
    # Every case on one server (starting one per case was most of this test's time): the creates
    # first, while there is no agent at all, then the same settings on an agent that exists.
    for settings, field in REPORTED:
        r = _raw(client, "POST", "/v1/agents", f'{{"name": "bad", "settings": {settings}}}')
        message = _bad_request(r, field)
        assert SECRET not in r.text and "many" not in message and "'no'" not in message, field
        assert client.get("/v1/agents").json() == [], field  # nothing created, no half-made home

    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201
    for settings, field in REPORTED:
        r = _raw(client, "PATCH", "/v1/agents/ada", f'{{"settings": {settings}}}')
        _bad_request(r, field)
        assert SECRET not in r.text, field
        agent = client.get("/v1/agents/ada").json()["agent"]
        assert agent["settings"] == {}, field
        assert client.get("/v1/agents/ada/status").json()["state"] != "paused", field
    assert _events(server, "agent.configured") == []


def test_unset_of_unknown_or_internal_keys_is_refused(client: httpx.Client) -> None:
    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201
    _bad_request(client.patch("/v1/agents/ada", json={"unset": ["api_key"]}), "api_key")
    _bad_request(client.patch("/v1/agents/ada", json={"unset": ["diagnostic"]}), "diagnostic")
    r = client.patch("/v1/agents/ada", json={"unset": [SECRET]})
    assert r.status_code == 400 and SECRET not in r.text, r.text


def test_good_settings_are_recorded_as_given(client: httpx.Client, server: ApiServer) -> None:
    good = {
        "model": "openai/gpt-4o-mini",
        "api_base": "http://127.0.0.1:9/v1",
        "api_key_env": "OPENAI_API_KEY",
        "temperature": 1,
        "max_rounds": 7,
        "max_cost_per_turn_usd": 0.5,
        "paused": False,
    }
    r = client.post("/v1/agents", json={"name": "ada", "settings": good})
    assert r.status_code == 201, r.text
    assert r.json()["settings"] == {**good, "temperature": 1.0}
    r = client.patch("/v1/agents/ada", json={"settings": {"max_rounds": 3, "temperature": None}, "unset": ["paused"]})
    assert r.status_code == 200, r.text
    assert r.json()["settings"] == {
        k: v for k, v in {**good, "max_rounds": 3}.items() if k not in ("temperature", "paused")
    }


# --- hostile input: never a 500, never the value echoed ---------------------------------------------

MARK = "qzx"
_text = st.text(max_size=12).map(lambda t: MARK + t)
_scalar = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _text
_json = st.recursive(
    _scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6
)
_keys = st.sampled_from(sorted({*OPERATOR_KEYS, "api_key", "diagnostic", "parent_task_id", "token"})) | st.text(
    max_size=20
)
_settings = st.dictionaries(_keys, _json, max_size=4)


def _check_answer(r: httpx.Response, ok: int) -> None:
    assert r.status_code in (ok, 400), r.text
    body = r.json()
    if r.status_code == 400:
        assert body["error"]["code"] == "bad_request" and MARK not in body["error"]["message"], body


_names = itertools.count()


@pytest.mark.slow  # a long property run (fuzzing)
@hsettings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(create=_settings, change=_settings, unset=st.lists(_keys, max_size=2))
def test_arbitrary_settings_over_http_are_201_or_400_and_never_echoed(
    client: httpx.Client, create: dict[str, Any], change: dict[str, Any], unset: list[str]
) -> None:
    name = f"a{next(_names)}"
    r = _raw(client, "POST", "/v1/agents", json.dumps({"name": name, "settings": create}))
    _check_answer(r, 201)
    if r.status_code == 201:
        expected = {k: v for k, v in validate_settings(create).items()}
        assert r.json()["settings"] == expected
    else:
        assert client.post("/v1/agents", json={"name": name}).status_code == 201
    r = _raw(client, "PATCH", f"/v1/agents/{name}", json.dumps({"settings": change, "unset": unset}))
    if not change and not unset:
        assert r.status_code == 400
        return
    _check_answer(r, 200)


def test_validate_settings_refuses_every_bad_value_without_echoing_it() -> None:
    bad: dict[str, list[Any]] = {
        "model": ["", " x", "a" * 201, "x//y", 5, ["openai/x"]],
        "api_base": ["", "ftp://x", "http://", "http://a b/", "http://x:0/", "http://u@x/", 1],
        "api_key_env": ["", "1ABC", "A-B", "A" * 129, SECRET, 5],
        "temperature": [-0.1, 2.1, math.inf, math.nan, "1", True],
        "max_output_tokens": [0, 1.5, "5", False, 10**12],
        "context_window": [255, 2.0, "x"],
        "timeout_s": [0, -1, 3601, math.inf, "1"],
        "max_rounds": [0, 201, "many", 5.0, True],
        "max_tokens_per_turn": [0, 10**10, "x"],
        "max_cost_per_turn_usd": [-1, math.inf, math.nan, "0.5"],
        "paused": ["no", "yes", 0, 1, "false"],
        "background": ["no", 1],
        "budget_turns_per_day": [-1, 1.5, "x"],
        "budget_tokens_per_day": [-1, "x", 10**13],
        "budget_cost_per_day_usd": [-0.01, math.inf, "x"],
    }
    assert set(bad) == OPERATOR_KEYS
    for field, values in bad.items():
        for value in values:
            with pytest.raises(UsageError) as info:
                validate_settings({field: value})
            assert f"'{field}'" in info.value.message
            if isinstance(value, str) and len(value) > 3 and value not in ("http://", "false"):  # words of the hints
                assert value not in info.value.message
            assert info.value.__cause__ is None and info.value.__suppress_context__


# --- reading is total: a ledger written before the checks --------------------------------------------


def _plant(server: ApiServer, agent: str, changes: dict[str, Any]) -> None:
    """Record settings as an older holon would have (no checks): straight into the ledger."""

    def plant() -> None:
        store = server.port.store  # type: ignore[union-attr]
        agent_id = store.agent(agent).agent_id
        store.append(NewEvent(agent_id, ev.AgentConfigured(changes=changes), origin="operator:api"))

    server.call(plant)


def _wait(what: str, cond: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_bad_settings_already_in_the_ledger_run_on_defaults_with_one_visible_error(
    client: httpx.Client, server: ApiServer
) -> None:
    assert client.post("/v1/agents", json={"name": "old"}).status_code == 201
    _plant(
        server,
        "old",
        {"max_rounds": "many", "paused": "no", "budget_turns_per_day": "lots", "api_key_env": "PGPASSWORD", "x": 1},
    )
    status = client.get("/v1/agents/old/status").json()
    assert status["state"] == "idle", status  # "no" does not pause it
    detail = status["detail"]
    for field in ("max_rounds", "paused", "budget_turns_per_day", "api_key_env", "allowed_key_envs"):
        assert field in detail, detail
    assert "PGPASSWORD" not in detail and "many" not in detail

    assert client.post("/v1/agents/old/inputs", json={"text": "still there?"}).status_code == 202
    _wait("the answer", lambda: _events(server, "turn.settled"))
    (settled,) = _events(server, "turn.settled")
    assert settled.outcome == "completed", settled
    assert client.get("/v1/agents/old/status").json()["state"] == "idle"

    # The operator fixes it: the status is clean again.
    r = client.patch("/v1/agents/old", json={"unset": ["max_rounds", "paused", "budget_turns_per_day", "api_key_env"]})
    assert r.status_code == 200, r.text
    detail = client.get("/v1/agents/old/status").json()["detail"]
    assert "1 unknown setting" in detail and "max_rounds" not in detail and "api_key_env" not in detail, detail


def test_read_settings_is_total() -> None:
    read = read_settings(
        {"max_rounds": "many", "paused": "no", "model": "openai/x", "who": [1], "temperature": math.nan}
    )
    assert read.settings == AgentSettings(model="openai/x")
    assert read.problem is not None
    for field in ("max_rounds", "paused", "temperature", "1 unknown setting"):
        assert field in read.problem
    assert read_settings({"max_rounds": 3}).problem is None


def test_read_settings_remembered_by_value_and_type() -> None:
    """Read once per distinct mapping (every view reads every agent's), never confusing ``True``
    with ``1`` or ``1.0`` (equal in Python, not to the strict fields) nor a changed mapping."""
    assert read_settings({"paused": True}).settings.paused is True
    assert read_settings({"paused": 1}).problem is not None  # not the cached ``True``'s
    assert read_settings({"temperature": 1.0}).settings.temperature == 1.0
    assert read_settings({"max_rounds": 1}) is read_settings({"max_rounds": 1})
    assert read_settings({"max_rounds": 1.0}).problem is not None
    raw: dict[str, Any] = {"max_rounds": 2}
    assert read_settings(raw).settings.max_rounds == 2
    raw["max_rounds"] = 3  # the same dict changed: read again
    assert read_settings(raw).settings.max_rounds == 3
    odd = {"max_rounds": [1], "model": "openai/x"}  # an unhashable value: read, not remembered
    assert read_settings(odd).settings.model == "openai/x" and read_settings(odd).problem is not None


def _agent(settings: dict[str, Any]) -> AgentState:
    return AgentState(agent_id="agt_x", name="x", template="assistant", home="/h", settings=settings, created_us=0,
                      last_event_us=0)  # fmt: skip


def test_model_settings_ignore_an_agent_that_breaks_the_allow_lists() -> None:
    defaults = ModelDefaults(model="openai/gpt-4o-mini", api_key_env="OPENAI_API_KEY")
    resolved = model_settings(_agent({"model": "openai/evil", "api_key_env": "PGPASSWORD"}), defaults)
    assert resolved is not None and (resolved.model, resolved.api_key_env) == ("openai/gpt-4o-mini", "OPENAI_API_KEY")
    foreign = _agent({"model": "openai/evil", "api_base": "https://attacker.example/v1"})
    resolved = model_settings(foreign, defaults)  # the operator's key would go there: not used
    assert resolved is not None and resolved.api_base is None and resolved.model == "openai/gpt-4o-mini"
    own = model_settings(_agent({"model": "openai/mine", "api_base": "http://127.0.0.1:8080/v1"}), defaults)
    assert own is not None and (own.model, own.api_base) == ("openai/mine", "http://127.0.0.1:8080/v1")
    assert model_settings(_agent({"max_rounds": "many", "temperature": "hot"}), defaults).temperature is None  # type: ignore[union-attr]


# --- secrets by name only from an allow-list ----------------------------------------------------------


def test_key_variables_only_from_the_allow_list(client: httpx.Client) -> None:
    for var in ("PGPASSWORD", "DATABASE_URL", "HOME", "HOLON_API_TOKEN"):
        r = client.post("/v1/agents", json={"name": "x", "settings": {"model": "openai/x", "api_key_env": var}})
        message = _bad_request(r, "api_key_env")
        assert "allowed_key_envs" in message and var not in message
    for n, var in enumerate(
        ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY")
    ):
        r = client.post("/v1/agents", json={"name": f"ok{n}", "settings": {"model": "openai/x", "api_key_env": var}})
        assert r.status_code == 201, r.text
    _bad_request(client.patch("/v1/agents/ok0", json={"settings": {"api_key_env": "PGPASSWORD"}}), "api_key_env")


def test_a_key_goes_only_to_loopback_or_an_allowed_host(client: httpx.Client) -> None:
    keyed = {"model": "openai/x", "api_key_env": "OPENAI_API_KEY"}
    for base in ("https://attacker.example/v1", "http://10.0.0.5:8080/v1", "http://127.0.0.1.attacker.example/v1"):
        r = client.post("/v1/agents", json={"name": "x", "settings": {**keyed, "api_base": base}})
        message = _bad_request(r, "api_base")
        assert "allowed_api_bases" in message and "attacker" not in message
    for n, base in enumerate(("http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://[::1]:9/v1")):
        r = client.post("/v1/agents", json={"name": f"loop{n}", "settings": {**keyed, "api_base": base}})
        assert r.status_code == 201, r.text
    # No key in effect: nothing secret goes there (the provider sends a placeholder).
    r = client.post(
        "/v1/agents", json={"name": "keyless", "settings": {"model": "openai/x", "api_base": "https://h.example/v1"}}
    )
    assert r.status_code == 201, r.text
    # ...but adding a key to it later is the same combination, refused.
    _bad_request(client.patch("/v1/agents/keyless", json={"settings": {"api_key_env": "OPENAI_API_KEY"}}), "api_base")
    # And pointing a keyed agent elsewhere too.
    _bad_request(client.patch("/v1/agents/loop0", json={"settings": {"api_base": "https://h.example/v1"}}), "api_base")
    assert client.patch("/v1/agents/loop0", json={"unset": ["api_key_env"]}).status_code == 200


def test_the_operators_allow_lists_widen_what_agents_may_name(tmp_path: Path, fast_ledger: None) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "holon.toml").write_text(
        '[model]\napi_key_env = "CORP_KEY"\napi_base = "https://proxy.corp.example/v1"\n'
        'allowed_key_envs = ["MY_LLM_KEY"]\nallowed_api_bases = ["llm.example.com"]\n'
    )
    with api_server(home, clock=FakeClock()) as server, server.client() as client:
        ok = [
            {"api_key_env": "MY_LLM_KEY", "api_base": "https://llm.example.com/v1"},
            {"api_key_env": "CORP_KEY"},  # the operator's own variable
            {"api_base": "https://proxy.corp.example:8443/v1"},  # the operator's own host, with its key
            {"api_key_env": "MY_LLM_KEY", "api_base": "http://127.0.0.1:1/v1"},
        ]
        for n, settings in enumerate(ok):
            r = client.post("/v1/agents", json={"name": f"a{n}", "settings": {"model": "openai/x", **settings}})
            assert r.status_code == 201, (settings, r.text)
        # The list replaces the default one; the operator's key may not go to another host.
        _bad_request(client.post("/v1/agents", json={"name": "b", "settings": {"api_key_env": "OPENAI_API_KEY"}}),
                     "api_key_env")  # fmt: skip
        _bad_request(client.post("/v1/agents", json={"name": "b", "settings": {"api_base": "https://other.example/v1"}}),
                     "api_base")  # fmt: skip


def test_templates_and_the_config_hold_valid_settings_only(tmp_path: Path) -> None:
    from holon.config import load_settings
    from holon.errors import ConfigError
    from holon.paths import resolve_home
    from holon.runtime.agents import TEMPLATES

    for template in TEMPLATES.values():
        assert validate_settings(template.settings) == template.settings
    paths = resolve_home(str(tmp_path / "home"))
    paths.root.mkdir(parents=True)
    for text, key in (
        (f'[model]\napi_key_env = "{SECRET}"\n', "model.api_key_env"),
        ("[runtime]\nmax_cost_per_turn_usd = inf\n", "runtime.max_cost_per_turn_usd"),
        ("[daemon]\nbudget_cost_per_day_usd = nan\n", "daemon.budget_cost_per_day_usd"),
        ('[model]\nallowed_key_envs = ["PG-PASSWORD"]\n', "model.allowed_key_envs"),
        ('[model]\nallowed_api_bases = ["https://x.example/"]\n', "model.allowed_api_bases"),
    ):
        paths.config.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_settings(paths)
        assert key in info.value.message and SECRET not in info.value.message
