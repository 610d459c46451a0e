"""``holon.runtime.status``: the one decision of an agent's state, its words, and TOML settings.

Pure functions, so these tests build projection rows by hand; ``tests/test_status_agree.py``
checks that every real view (CLI, daemon status, API) shows what ``decide`` says.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from holon.cli.config_cmd import HIDDEN, shown
from holon.cli.toml_out import to_toml
from holon.config import ModelDefaults
from holon.projections.state import AgentState, TimerProjection, WaitProjection
from holon.runtime.status import (
    ABORTED_REASON,
    DAY_US,
    Live,
    decide,
    describe,
    is_internal,
    model_label,
    status_entries,
    status_entry,
    without_internal,
)

NOW = 1_800_000_000_000_000


def agent(**kw: Any) -> AgentState:
    return AgentState(agent_id="agt_a", name="a", template="assistant", home="/h", created_us=1, last_event_us=1, **kw)


def wait(on: str = "operator", at: int = NOW + 60_000_000, **kw: Any) -> WaitProjection:
    return WaitProjection(wait_id="w1", agent_id="agt_a", on=on, recheck_at_us=at, registered_us=1, **kw)  # type: ignore[arg-type]


def timer(at: int = NOW + 3_600_000_000) -> TimerProjection:
    return TimerProjection(timer_id="t1", agent_id="agt_a", kind="cron", spec="0 9 * * *", next_fire_us=at)


def state(a: AgentState, *, waits: list[WaitProjection] | None = None, timers: list[TimerProjection] | None = None,
          live: Live | None = None, budget: str | None = None) -> tuple[str, str, int | None]:  # fmt: skip
    s = decide(a, now_us=NOW, waits=waits or [], timers=timers or [], live=live, budget=lambda: budget)
    return s.state, s.detail, s.next_wake_us


def test_each_state_and_what_it_says() -> None:
    assert state(agent()) == ("idle", "", None)
    assert state(agent(pending_inputs=[3, 4])) == ("idle", "2 inputs queued", None)
    assert state(agent(), timers=[timer()]) == ("asleep", "for its next timer", NOW + 3_600_000_000)
    assert state(agent(status="waiting"), waits=[wait(reason="approval")]) == ("waiting", "operator", NOW + 60_000_000)
    assert state(agent(), waits=[wait(on="until", reason="a nap")]) == ("asleep", "sleeping: a nap", NOW + 60_000_000)
    assert state(agent(status="waiting")) == ("failed", "error: asleep with no wake source (no wait, no timer)", None)
    assert state(agent(settings={"paused": True}), timers=[timer()]) == (
        "paused", "paused by the operator", NOW + 3_600_000_000,
    )  # fmt: skip
    assert state(agent(status="failed", last_error="model error: refused")) == ("failed", "model error: refused", None)
    tomorrow = (NOW // DAY_US + 1) * DAY_US
    assert state(agent(), budget="2 of 2 turns per day used") == (
        "asleep", "daily budget used: 2 of 2 turns per day used", tomorrow,
    )  # fmt: skip


def test_an_aborted_agent_is_not_failed_and_a_paused_one_is_paused_whatever_its_last_turn() -> None:
    aborted = agent(status="failed", last_outcome="failed", last_error=ABORTED_REASON)
    assert state(aborted) == ("aborted", ABORTED_REASON, None)
    assert state(aborted, timers=[timer()])[0::2] == ("aborted", NOW + 3_600_000_000)
    paused_after_failure = agent(
        status="failed", last_error="model error", settings={"paused": True}, pending_inputs=[9]
    )
    assert state(paused_after_failure) == ("paused", "paused by the operator; 1 inputs queued", None)


def test_the_daemon_knows_what_runs_and_when_a_failed_agent_is_retried() -> None:
    mid_turn = agent(status="running", current_turn_id="turn_1")
    assert state(mid_turn) == ("running", "turn_1", None)  # no daemon: the projection's word
    assert state(mid_turn, live=Live(running=False))[0] == "idle"  # a daemon runs nothing of it
    assert state(agent(), live=Live(running=True)) == ("running", "", None)
    failing = agent(status="failed", last_error="provider unreachable", pending_inputs=[5])
    assert state(failing, live=Live(retry_at_us=NOW + 8_000_000)) == (
        "failed", "provider unreachable", NOW + 8_000_000,
    )  # fmt: skip
    assert state(failing, live=Live(running=True))[0] == "running"
    # Between two attempts (the retry time came, the next turn not yet started) it is still failed.
    requeued = agent(last_error="provider unreachable", pending_inputs=[5])
    assert state(requeued, live=Live(retrying=True)) == ("failed", "provider unreachable", None)
    assert state(requeued, live=Live())[0] == "idle"  # recovered: a turn settled well since


def test_a_bad_stored_setting_is_appended_to_the_detail() -> None:
    s = decide(agent(), now_us=NOW, waits=[], timers=[], live=None, problem="bad setting max_rounds")
    assert (s.state, s.detail) == ("idle", "bad setting max_rounds")


def test_entries_and_their_words() -> None:
    s = decide(agent(status="waiting"), now_us=NOW, waits=[wait()], timers=[], live=None)
    entry = status_entry(s, [wait()], model="openai/x")
    assert entry["next_wake"].endswith("Z") and entry["waits"][0]["wait_id"] == "w1" and entry["model"] == "openai/x"
    assert describe(entry) == f"on operator; recheck at {entry['next_wake'][:19]}Z"
    assert describe({"state": "failed", "detail": "boom", "next_wake_us": NOW}).startswith(
        "last error: boom; retry at "
    )
    assert describe({"state": "paused", "detail": "paused by the operator"}) == "paused by the operator"
    assert describe({"state": "failed", "detail": ""}) == "failed"


def test_internal_agents_and_model_labels() -> None:
    assert is_internal(agent(settings={"diagnostic": True})) and not is_internal(agent())
    assert model_label(agent(settings={"model": "openai/x"}), "anthropic/y") == "openai/x"
    assert model_label(agent(), "anthropic/y") == "anthropic/y"
    assert model_label(agent(), "") == "local"
    status = {"pid": 1, "agents": [{"name": "a"}, {"name": "diagnose", "internal": True}]}
    assert [a["name"] for a in without_internal(status)["agents"]] == ["a"]
    assert len(without_internal(status, everything=True)["agents"]) == 2


def test_the_batched_entries_are_each_agents_own_decision() -> None:
    """``status_entries`` (the daemon's status, the dashboard, ``agent list`` without a daemon) gives
    every agent what ``decide`` + ``status_entry`` give it alone, its waits and timers found by id."""
    b = AgentState(agent_id="agt_b", name="b", template="t", home="/h", created_us=1, last_event_us=1,
                   status="waiting", settings={"model": "openai/b", "max_rounds": "many"})  # fmt: skip
    c = AgentState(agent_id="agt_c", name="c", template="t", home="/h", created_us=1, last_event_us=1,
                   settings={"diagnostic": True})  # fmt: skip
    a_wait = wait(on="until", reason="a nap")
    b_wait = WaitProjection(wait_id="w2", agent_id="agt_b", on="operator", recheck_at_us=NOW + 5, registered_us=1)
    agents, defaults = [agent(), b, c], ModelDefaults(model="anthropic/y")
    lives = {"agt_a": None, "agt_b": Live(), "agt_c": Live(running=True)}
    entries = status_entries(
        agents, now_us=NOW, waits=[b_wait, a_wait], timers=[timer()], live=lambda x: lives[x.agent_id],
        budget=lambda x: "1 of 1 turns per day used" if x.agent_id == "agt_a" else None, defaults=defaults,
    )  # fmt: skip
    assert [e["name"] for e in entries] == ["a", "b", "c"]
    alone = [
        status_entry(decide(agent(), now_us=NOW, waits=[a_wait], timers=[timer()], live=None,
                            budget=lambda: "1 of 1 turns per day used"), [a_wait], model="anthropic/y"),
        status_entry(decide(b, now_us=NOW, waits=[b_wait], timers=[], live=Live(),
                            problem="settings ignored, defaults used instead: max_rounds (must be an integer "
                            "from 1 to 200)"), [b_wait], model="openai/b"),
        status_entry(decide(c, now_us=NOW, waits=[], timers=[], live=Live(running=True)), [], model="anthropic/y"),
    ]  # fmt: skip
    assert [{k: v for k, v in e.items() if k != "internal"} for e in entries] == alone
    assert [e["internal"] for e in entries] == [False, False, True]
    assert entries[0]["state"] == "asleep" and entries[1]["state"] == "waiting" and entries[2]["state"] == "running"
    assert "max_rounds" in entries[1]["detail"]
    assert set(status_entry(decide(agent(), now_us=NOW, waits=[], timers=[], live=None))) == {
        "agent_id",
        "name",
        "state",
        "detail",
        "next_wake_us",
        "next_wake",
    }  # the dataclass's fields and the ISO time, as ``asdict`` gave them


def test_settings_render_as_toml_that_reads_back() -> None:
    data = {"model": 'openai/"x"', "max_rounds": 3, "temperature": 0.5, "paused": False,
            "api": {"host": "127.0.0.1", "allowed_hosts": ["a.example", "b"]}}  # fmt: skip
    text = to_toml(data, {"api.host": "from HOLON_API_HOST"})
    assert tomllib.loads(text) == data
    assert 'host = "127.0.0.1"  # from HOLON_API_HOST' in text
    assert to_toml({"token_env": None}) == "# token_env = (unset)"


@pytest.mark.parametrize(
    ("key", "value", "out"),
    [
        ("api_key_env", "OPENAI_API_KEY", "OPENAI_API_KEY"),  # a variable's name: shown
        ("api_key_env", "ghp_abcdef0123456789", HIDDEN),  # a token pasted in the wrong place
        ("token_env", "sk-live-1234", HIDDEN),
        ("allowed_key_envs", ("GROQ_API_KEY", "sk_live_x9"), ["GROQ_API_KEY", HIDDEN]),
        ("api_base", "https://user:pw@host.example:8443/v1?key=abc", "https://***@host.example:8443/v1?***"),
        ("otlp_endpoint", "http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
        ("max_tokens_per_turn", 400_000, 400_000),
        ("level", "info", "info"),
    ],
)
def test_config_show_never_prints_a_secret(key: str, value: Any, out: Any) -> None:
    assert shown(key, value) == out
