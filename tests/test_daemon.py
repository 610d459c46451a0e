"""The daemon in real subprocesses (``holon daemon ...``, ``holon serve``), with a ``FakeLLM`` model.

* start, status, a second start refused, restart, stop; two agents' turns overlap in time;
* SIGTERM while a model call runs: the turn finishes within the grace period, exit code 0;
* a background agent on a 1-second schedule fires, uses up its daily turn budget (brief to the
  operator), and after downtime its missed firings are coalesced into one;
* in-process: pause/resume, abort, delete, status details, subscriber notices with text deltas.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.daemon import agents, completed_inputs, fake_home, payloads, state, submit
from helpers.turn_cli import assert_ledger_ok, holon, spawn_holon, wait_for

from holon.testing.fake_llm import FakeLLM

if TYPE_CHECKING:
    from conftest import EngineTarget

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fake() -> Any:
    with FakeLLM(lambda body: {"content": "All done here.", "delay": 1.0}) as f:
        yield f


def _turn_span(home: Path, agent_id: str) -> tuple[int, int]:
    started = [t for _, a, t, _ in payloads(home, "turn.started") if a == agent_id]
    settled = [t for _, a, t, _ in payloads(home, "turn.settled") if a == agent_id]
    return started[0], settled[0]


@pytest.mark.slow
def test_start_status_restart_stop_and_two_agents_at_once(tmp_path: Path, fake: FakeLLM, engine: EngineTarget) -> None:
    """On both engines (``HOLON_STORAGE_URL`` reaches every child process on PostgreSQL)."""
    home = fake_home(tmp_path, fake, "alice", "bob")
    r = holon(home, "daemon", "start", "--no-http", "--json")
    assert r.code == 0, r
    pid = r.json()["pid"]
    try:
        again = holon(home, "daemon", "start", "--no-http")
        assert again.code != 0 and "already running" in again.err, again
        status = holon(home, "daemon", "status", "--json").json()
        assert status["running"] is True and status["pid"] == pid
        submit(home, "alice", "Hello alice")
        submit(home, "bob", "Hello bob")
        wait_for("both turns settled", lambda: len(payloads(home, "turn.settled")) >= 2, timeout=30)
        ids = {name: a["agent_id"] for name, a in agents(home).items()}
        a0, a1 = _turn_span(home, ids["alice"])
        b0, b1 = _turn_span(home, ids["bob"])
        assert a0 < b1 and b0 < a1, "the two agents' turns did not overlap"
        wait_for(
            "status shows idle agents",
            lambda: {a["state"] for a in (state(home).get("status") or {}).get("agents", [])} == {"idle"},
        )
        r = holon(home, "daemon", "restart", "--no-http", "--json")
        assert r.code == 0, r
        assert r.json()["pid"] != pid
    finally:
        r = holon(home, "daemon", "stop", "--json")
    assert r.code == 0 and r.json()["stopped"] is True, r
    down = holon(home, "daemon", "status", "--json")
    assert down.code == 3 and json.loads(down.out)["running"] is False
    assert [p["outcome"] for *_, p in payloads(home, "turn.settled")] == ["completed", "completed"]
    assert holon(home, "daemon", "logs", "-n", "5").code == 0
    assert_ledger_ok(home)


@pytest.mark.slow
def test_sigterm_lets_the_running_turn_finish(tmp_path: Path) -> None:
    with FakeLLM(lambda body: {"content": "Slow but complete.", "delay": 2.0}) as fake:
        home = fake_home(tmp_path, fake, "alice")
        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
            seq = submit(home, "alice", "Take your time")[0]
            wait_for("the model call", lambda: payloads(home, "model.requested"), proc=proc)
            os.kill(proc.pid, signal.SIGTERM)
            _out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert [p["outcome"] for *_, p in payloads(home, "turn.settled")] == ["completed"]
    assert seq in completed_inputs(home)
    assert state(home)["state"] == "stopped"


@pytest.mark.slow
def test_background_agent_fires_runs_out_of_budget_and_coalesces_missed_firings(tmp_path: Path) -> None:
    with FakeLLM(lambda body: {"content": "Checked: nothing new."}) as fake:
        home = fake_home(tmp_path, fake, "alice")
        r = holon(
            home, "agent", "create", "watcher", "--schedule", "every 1s", "--prompt", "Check the build.",
            "--budget-turns-per-day", "2", "--model", "openai/fake", "--api-base", fake.url, "--json",
        )  # fmt: skip
        assert r.code == 0, r
        assert r.json()["settings"]["background"] is True
        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("a budget brief", lambda: payloads(home, "brief.delivered"), proc=proc, timeout=30)
            wait_for("one more firing", lambda: len(payloads(home, "timer.fired")) >= 3, proc=proc, timeout=10)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
        briefs = payloads(home, "brief.delivered")
        assert [p["kind"] for *_, p in briefs] == ["budget"]
        assert "2 of 2 turns" in briefs[0][3]["text"]
        turns = [p for *_, p in payloads(home, "turn.settled")]
        assert len(turns) == 2, "the budget allows two turns a day"
        prompts = [p["text"] for *_, p in payloads(home, "message.received")]
        assert prompts and all(t.startswith("Check the build.") for t in prompts)
        fired_before = len(payloads(home, "timer.fired"))

        time.sleep(3.5)  # down while the timer should fire three or so times
        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("a firing after restart", lambda: len(payloads(home, "timer.fired")) > fired_before, proc=proc)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    fired = payloads(home, "timer.fired")
    assert len(fired) > fired_before, (fired_before, fired)
    first_after = fired[fired_before][3]
    assert first_after["missed"] >= 2, first_after
    # While an input of the timer waits (for its turn, or past the budget), firings add none: the
    # two turns' inputs and one still queued, however often the timer fired.
    assert len(payloads(home, "message.received")) == 3, [(p["missed"], a) for _, a, _, p in fired]
    assert len(agents(home)["watcher"]["pending_inputs"]) == 1
    keys = db_keys(home)
    assert len(keys) == len(set(keys)), "each due time is recorded once"
    assert len(payloads(home, "turn.settled")) == 2, "no turns beyond the budget after the restart"
    assert_ledger_ok(home)


def db_keys(home: Path) -> list[str]:
    from helpers.turn_cli import db_rows

    return [k for (k,) in db_rows(home, "SELECT idempotency_key FROM events WHERE type = 'timer.fired'")]


@pytest.mark.slow
def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
    r = holon(home, "serve", "--host", "0.0.0.0")
    assert r.code != 0 and "refusing to listen on 0.0.0.0" in r.err, r
    assert "Traceback" not in r.err


# --- in process ---------------------------------------------------------------------------------


def _daemon(store: Any, provider: Any) -> Any:
    from holon.daemon import Daemon
    from holon.runtime.providers.base import ModelSettings

    settings = ModelSettings(model="scripted", context_window=128_000)
    return Daemon(store, resolver=lambda agent: (provider, settings), poll_s=0.01)


def _say(daemon: Any, agent: str, text: str) -> Any:
    return daemon.submit(agent, text, origin="operator:test", authority="operator", sender="operator", channel="test")


def test_pause_resume_abort_delete_and_notices(engine: EngineTarget, store: Any) -> None:
    assert store.ledger.engine.dialect == engine.name
    from holon.runtime.providers.scripted import ScriptedProvider, reply

    release = asyncio.Event()

    async def slow(request: Any) -> Any:
        await release.wait()
        return reply("never seen")

    provider = ScriptedProvider([reply("Hello there, operator."), slow, reply("after resume")])

    async def scenario() -> None:
        daemon = _daemon(store, provider)
        async with daemon.running(grace_s=1):
            daemon.create_agent("alice")
            notices: list[Any] = []

            async def listen() -> None:
                async for n in daemon.subscribe("alice"):
                    notices.append(n)

            listener = asyncio.create_task(listen())
            await asyncio.sleep(0)
            _say(daemon, "alice", "hi")
            await daemon.until_idle()
            deltas = "".join(n.text for n in notices if n.kind == "delta")
            assert deltas == "Hello there, operator."
            assert any(n.kind == "event" for n in notices)

            _say(daemon, "alice", "do something slow")
            for _ in range(200):
                if daemon.agent_status(store.agent("alice")).state == "running":
                    break
                await asyncio.sleep(0.01)
            assert daemon.abort("alice") is True
            for _ in range(200):
                if store.agent("alice").current_turn_id is None:
                    break
                await asyncio.sleep(0.01)
            alice = store.agent("alice")
            assert alice.last_outcome == "failed" and alice.last_error == "aborted by the operator"
            assert not alice.pending_inputs, "an aborted turn's input is not re-queued"
            assert daemon.abort("alice") is False

            daemon.pause("alice")
            _say(daemon, "alice", "are you there?")
            # Idle means no agent is runnable or running: were the pause ignored, the input would be
            # runnable, until_idle would wait for its turn, and the input would no longer be pending.
            await daemon.until_idle()
            assert store.agent("alice").pending_inputs, "a paused agent takes no turn"
            assert daemon.agent_status(store.agent("alice")).state == "paused"
            daemon.resume("alice")
            await daemon.until_idle()
            assert not store.agent("alice").pending_inputs

            bg = daemon.create_agent("bg", schedule="0 9 * * *", prompt="morning check")
            assert daemon.agent_status(bg).state == "asleep"
            home = Path(bg.home)
            token = daemon.external_token("bg")
            assert daemon.agent_for_token(token).agent_id == bg.agent_id
            assert daemon.agent_for_token("nope") is None
            daemon.delete("bg")
            assert [a.name for a in store.agents()] == ["alice"]
            assert not home.exists()
            assert store.rows("timer", agent_id=bg.agent_id)[0].status == "cancelled"
            assert daemon.agent_for_token(token) is None
            status = daemon.status()
            assert status["ledger_head"] == store.ledger.head()
            assert status["projection_lag"]["projections"] == 0
            listener.cancel()

    asyncio.run(scenario())
    types = {e.type for e in store.ledger.read()}
    assert "agent.deleted" in types
    replayed = store.replay()
    assert replayed.ok, replayed


def test_an_abort_while_the_turn_waits_for_its_models_window_rejects_what_it_would_have_taken(
    engine: EngineTarget, store: Any
) -> None:
    """The turn asks its provider for the model's window before it starts (a model process may
    still be starting): an abort then settles the inputs the turn would have taken, as an abort a
    moment later would have, instead of leaving them to run once the model is up."""
    from holon.daemon import Daemon
    from holon.runtime.providers.base import ModelSettings, ModelWindow
    from holon.runtime.providers.scripted import ScriptedProvider, reply

    asked = asyncio.Event()

    class Starting(ScriptedProvider):
        async def context_window(self, model: str) -> ModelWindow:
            asked.set()
            await asyncio.Event().wait()  # the model process never becomes ready
            raise AssertionError("unreachable")

    provider = Starting([reply("never seen")])

    async def scenario() -> None:
        daemon = Daemon(store, resolver=lambda agent: (provider, ModelSettings(model="scripted")), poll_s=0.01)
        async with daemon.running(grace_s=1):
            daemon.create_agent("alice")
            _say(daemon, "alice", "first")
            await asyncio.wait_for(asked.wait(), 30)
            assert daemon.agent_status(store.agent("alice")).state == "running"
            assert daemon.abort("alice") is True
            for _ in range(500):
                if store.agent("alice").last_error == "aborted by the operator":
                    break
                await asyncio.sleep(0.01)
            alice = store.agent("alice")
            assert alice.last_outcome == "failed" and alice.last_error == "aborted by the operator", alice
            assert not alice.pending_inputs and alice.current_turn_id is None
            assert daemon.agent_status(alice).state == "aborted"

    asyncio.run(scenario())
    settled = [e.payload for e in store.ledger.read() if e.type == "turn.settled"]
    assert len(settled) == 1 and settled[0].rejected and not settled[0].requeue, settled
    assert store.replay().ok


# --- status precision (subprocess) --------------------------------------------------------------


def _by_keyword(body: dict[str, Any]) -> dict[str, Any]:
    """The model's step chosen by a keyword in the agent's input: wait, sleep, fail, or answer."""
    seen = json.dumps(body.get("messages", []))
    if "Hold on for my approval" in seen:
        return {
            "tool_calls": [
                {"name": "wait", "arguments": {"on": "operator", "recheck_in_s": 3600, "reason": "approval"}}
            ]
        }
    if "Take a nap" in seen:
        return {"tool_calls": [{"name": "sleep", "arguments": {"seconds": 7200, "reason": "the deploy runs"}}]}
    if "Break please" in seen:
        return {"error": 400, "message": "Invalid request: the schema is broken"}
    return {"content": "Done."}


def _agent_rows(home: Path) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in (state(home).get("status") or {}).get("agents", [])}


@pytest.mark.slow
def test_status_shows_waits_sleep_failures_budgets_and_no_wake_source(tmp_path: Path) -> None:
    from helpers.turn_cli import open_store

    from holon.ledger import NewEvent
    from holon.ledger import events as ev
    from holon.runtime.agents import create_agent

    with FakeLLM(_by_keyword) as fake:
        home = fake_home(tmp_path, fake, "waiter", "sleeper", "broken", "lost")
        with open_store(home) as store:
            settings = {"model": "openai/fake", "api_base": fake.url, "background": True, "budget_turns_per_day": 1}
            create_agent(store, "nightly", settings=settings)
        for name, text in [("waiter", "Hold on for my approval"), ("sleeper", "Take a nap"),
                           ("broken", "Break please"), ("lost", "Hold on for my approval"), ("nightly", "Report")]:  # fmt: skip
            submit(home, name, text)
        proc = spawn_holon(home, "serve", "--no-http")
        try:
            wait_for("five settled turns", lambda: len(payloads(home, "turn.settled")) >= 5, proc=proc, timeout=60)
            lost_id = agents(home)["lost"]["agent_id"]
            wait_id = next(p["wait_id"] for _, a, _, p in payloads(home, "wait.registered") if a == lost_id)
            with open_store(home) as store:  # the wait goes away with nothing to wake the agent
                store.append(NewEvent(lost_id, ev.WaitResolved(wait_id=wait_id, resolution="cancelled"),
                                      origin="operator:test", authority="operator"))  # fmt: skip
            wait_for(
                "status of every agent",
                lambda: (
                    {n: a["state"] for n, a in _agent_rows(home).items()}
                    == {
                        "waiter": "waiting",
                        "sleeper": "asleep",
                        "broken": "failed",
                        "lost": "failed",
                        "nightly": "asleep",
                    }
                ),
                proc=proc,
                timeout=30,
            )
            r = holon(home, "daemon", "status", "--json")
            text = holon(home, "daemon", "status")
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    rows = {a["name"]: a for a in r.json()["status"]["agents"]}
    waiter, sleeper = rows["waiter"], rows["sleeper"]
    assert waiter["detail"] == "operator"
    [w] = waiter["waits"]
    assert w["on"] == "operator" and w["reason"] == "approval"
    assert waiter["next_wake_us"] == w["recheck_at_us"] and waiter["next_wake"] == w["recheck_at"]
    assert w["recheck_at"].endswith("Z") and w["recheck_at_us"] - time.time() * 1e6 > 3000e6
    assert sleeper["detail"] == "sleeping: the deploy runs" and sleeper["waits"][0]["on"] == "until"
    assert 7000e6 < sleeper["next_wake_us"] - time.time() * 1e6 <= 7200e6
    assert rows["broken"]["detail"].startswith("model error (bad_request)"), rows["broken"]
    assert "the schema is broken" in rows["broken"]["detail"]
    assert rows["lost"]["detail"] == "error: asleep with no wake source (no wait, no timer)"
    nightly = rows["nightly"]
    assert nightly["detail"] == "daily budget used: 1 of 1 turns per day used"
    assert nightly["next_wake_us"] % 86_400_000_000 == 0 and nightly["next_wake"].endswith("T00:00:00.000000Z")
    lines = {line.split()[0]: line for line in text.out.splitlines()[2:]}
    assert "projection lag: evolve " in text.out and "{" not in text.out, text.out  # readable, not a repr
    assert f"on operator; recheck at {w['recheck_at'][:19]}Z" in lines["waiter"], text.out
    assert f"sleeping: the deploy runs; until {sleeper['next_wake'][:19]}Z" in lines["sleeper"], text.out
    assert "last error: model error (bad_request)" in lines["broken"], text.out
    assert "error: asleep with no wake source" in lines["lost"], text.out
    assert f"until {nightly['next_wake'][:10]}T00:00:00Z" in lines["nightly"], text.out


# --- the API token (subprocess) -----------------------------------------------------------------


def _get(url: str, token: str | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_serve_with_a_token_on_any_address_and_refuses_an_unset_token(tmp_path: Path) -> None:
    from helpers.turn_cli import cli_env

    from holon.api.server import free_port

    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
    for value in (None, "  "):
        env = cli_env(HOLON_API_TOKEN_ENV="MY_API_TOKEN", **({"MY_API_TOKEN": value} if value else {}))
        r = holon(home, "serve", "--host", "0.0.0.0", env=env)
        assert r.code == 2 and "Traceback" not in r.err, r
        assert "[api] token_env names MY_API_TOKEN, which is unset or empty" in r.err, r
        assert len(r.err.strip().splitlines()) == 1, r
    port = free_port()
    env = cli_env(HOLON_API_TOKEN_ENV="MY_API_TOKEN", MY_API_TOKEN=" s3cret-token\n")
    proc = spawn_holon(home, "serve", "--host", "0.0.0.0", "--port", str(port), env=env)
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
        url = f"http://127.0.0.1:{port}"
        assert state(home)["api"] == url
        assert _get(f"{url}/v1/health") == 200
        assert _get(f"{url}/v1/status") == 401
        assert _get(f"{url}/v1/status", "wrong") == 401
        assert _get(f"{url}/v1/status", "s3cret-token") == 200, "the token is stripped like the REPL client's"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


# --- grace period expiry (subprocess) -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_turn_past_the_grace_period_is_interrupted_requeued_and_answered_after_restart(
    tmp_path: Path, sig: signal.Signals
) -> None:
    from helpers.turn_cli import cli_env

    script = [{"content": "Too late to be seen.", "delay": 8.0}, {"content": "Answered after the restart."}]
    with FakeLLM(script) as fake:
        home = fake_home(tmp_path, fake, "alice")
        env = cli_env(HOLON_DAEMON_GRACE_S="1")
        proc = spawn_holon(home, "serve", "--no-http", env=env)
        try:
            wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
            seq = submit(home, "alice", "Take your time")[0]
            wait_for("the model call", lambda: len(fake.requests) == 1, proc=proc, timeout=30)
            os.kill(proc.pid, sig)
            _out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        [(_, _, _, settled)] = payloads(home, "turn.settled")
        # The model answers only after 8 s: a daemon that waited for it past its 1 s grace period
        # would have settled the turn completed (no wall-clock assertion: the outcome says it).
        assert settled["outcome"] == "interrupted" and settled["requeue"] is True, settled
        assert agents(home)["alice"]["pending_inputs"], "the interrupted turn's input is queued again"
        assert state(home)["state"] == "stopped"

        proc = spawn_holon(home, "serve", "--no-http", env=env)
        try:
            wait_for("the input answered", lambda: seq in completed_inputs(home), proc=proc, timeout=60)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    outcomes = [p["outcome"] for *_, p in payloads(home, "turn.settled")]
    assert outcomes == ["interrupted", "completed"], outcomes
    replies = [p["content"] for *_, p in payloads(home, "model.responded") if p.get("content")]
    assert replies == ["Answered after the restart."], replies
    assert_ledger_ok(home)


# --- token and cost budgets; children spend their root's budget (in process) --------------------


def _costly(text: str, *, tokens: int = 60, cost: float = 0.03) -> Any:
    from dataclasses import replace

    from holon.ledger.events import Usage
    from holon.runtime.providers.scripted import reply

    usage = Usage(prompt_tokens=tokens - 10, completion_tokens=10, total_tokens=tokens)
    return replace(reply(text, usage=usage), cost_usd=cost)


@pytest.mark.parametrize(
    ("limit", "reason"),
    [({"budget_tokens_per_day": 100}, "120 of 100 tokens per day used"),
     ({"budget_cost_per_day_usd": 0.05}, "$0.0600 of $0.05 per day spent")],
    ids=["tokens", "cost"],
)  # fmt: skip
def test_token_and_cost_budgets_stop_a_background_agent(
    engine: EngineTarget, store: Any, limit: dict[str, Any], reason: str
) -> None:
    from holon.runtime.providers.scripted import ScriptedProvider

    provider = ScriptedProvider([_costly("first"), _costly("second"), _costly("never")])

    async def scenario() -> None:
        daemon = _daemon(store, provider)
        async with daemon.running(grace_s=1):
            daemon.create_agent("nightly", settings={"background": True, **limit})
            for n in range(3):  # one at a time: a turn takes every input queued when it starts
                _say(daemon, "nightly", f"job {n}")
                await daemon.until_idle()
            status = daemon.agent_status(store.agent("nightly"))
            assert (status.state, status.detail) == ("asleep", f"daily budget used: {reason}")

    asyncio.run(scenario())
    assert provider.remaining == 1, "the third turn would spend beyond the budget"
    assert len(store.agent("nightly").pending_inputs) == 1
    briefs = [e.payload for e in store.ledger.read() if e.type == "brief.delivered"]
    assert [b.kind for b in briefs] == ["budget"] and reason in briefs[0].text


def test_child_agents_spend_their_background_roots_budget(engine: EngineTarget, store: Any) -> None:
    assert store.ledger.engine.dialect == engine.name
    from holon.runtime.providers.scripted import ScriptedProvider, tool_call

    def decide(request: Any) -> Any:
        seen = json.dumps(request.messages)
        if "started child agent" in seen:
            return _costly("A helper is on it.")
        if "Spawn a helper" in seen:
            return tool_call("spawn_agent", {"task": "CHILD-TASK: count the files", "name": "helper"})
        return _costly("Counted: 3 files.")

    provider = ScriptedProvider([decide] * 4)

    async def scenario() -> None:
        daemon = _daemon(store, provider)
        async with daemon.running(grace_s=1):
            daemon.create_agent("root", settings={"background": True, "budget_turns_per_day": 2})
            _say(daemon, "root", "Spawn a helper to count the files")
            await daemon.until_idle()
            root, helper = store.agent("root"), store.agent("helper")
            assert helper.parent_id == root.agent_id
            assert root.pending_inputs, "the helper's answer waits for tomorrow"
            for agent in (root, helper):
                status = daemon.agent_status(agent)
                assert (status.state, status.detail) == ("asleep", "daily budget used: 2 of 2 turns per day used")
            _say(daemon, "helper", "one more thing")
            await daemon.until_idle()
            assert store.agent("helper").pending_inputs, "the child has no budget of its own"
            assert daemon.budgets.spent(root.agent_id).tokens == 120

    asyncio.run(scenario())
    settled = [e for e in store.ledger.read() if e.type == "turn.settled"]
    assert len(settled) == 2, "one turn of the root and one of its child: the root's two turns a day"
    assert provider.remaining == 1
    briefs = [e for e in store.ledger.read() if e.type == "brief.delivered"]
    assert len(briefs) == 1 and briefs[0].agent_id == store.agent("root").agent_id
    assert "its child agents" in briefs[0].payload.text


# --- holon daemon logs ---------------------------------------------------------------------------


@pytest.mark.slow
def test_logs_are_readable_lines_by_default_and_raw_with_json(tmp_path: Path) -> None:
    """Pretty: time, level, event, key=value, logger; no JSON, no colour in a pipe; lines that are
    not JSON (a traceback in daemon.out) as they are. ``--json``: the file's lines. ``-f`` follows
    in both modes, a line written in two pieces printed once, whole."""
    import select

    from helpers.turn_cli import quick_home

    home = quick_home(tmp_path, "alice")
    logs = home / "logs"
    record = {"pid": 30191, "head": 1, "note": "two words", "event": "daemon.started", "level": "info",
              "logger": "holon.daemon", "timestamp": "2026-11-25T20:14:12.315457Z"}  # fmt: skip
    failed = {"event": "agent run failed", "level": "error", "logger": "holon.daemon", "agent": "alice",
              "timestamp": "2026-11-25T20:14:13.000001Z",
              "exception": [{"exc_type": "RuntimeError", "exc_value": "no model", "frames": []}]}  # fmt: skip
    (logs / "holon.log").write_text(json.dumps(record) + "\n" + json.dumps(failed) + "\nnot json at all\n")
    (logs / "daemon.out").unlink(missing_ok=True)
    r = holon(home, "daemon", "logs")
    assert r.code == 0, r
    assert r.out.splitlines() == [
        '2026-11-25 20:14:12Z  info      daemon.started  pid=30191 head=1 note="two words" [holon.daemon]',
        "2026-11-25 20:14:13Z  error     agent run failed  agent=alice [holon.daemon]",
        "    RuntimeError: no model",
        "not json at all",
    ], r.out
    assert "\x1b[" not in r.out, "no colour in a pipe"
    raw = holon(home, "daemon", "logs", "--json")
    assert raw.out.splitlines()[:2] == [json.dumps(record), json.dumps(failed)]

    (logs / "daemon.out").write_text("")
    proc = spawn_holon(home, "daemon", "logs", "-n", "0", "-f")
    try:
        assert proc.stdout is not None
        wait_for("the headers", lambda: select.select([proc.stdout], [], [], 0.1)[0], proc=proc)
        assert [proc.stdout.readline().strip(), proc.stdout.readline().strip()] == [
            f"==> {logs / 'holon.log'} <==", f"==> {logs / 'daemon.out'} <=="]  # fmt: skip
        with (logs / "holon.log").open("a") as fh:
            fh.write('{"event": "half", "level": "warn')
            fh.flush()
            assert not select.select([proc.stdout], [], [], 0.5)[0], "nothing printed for half a line"
            fh.write('ing", "timestamp": "2026-11-25T21:00:00Z", "n": 1}\n')
        wait_for("the followed line", lambda: select.select([proc.stdout], [], [], 0.1)[0], proc=proc)
        assert proc.stdout.readline().rstrip("\n") == "2026-11-25 21:00:00Z  warning   half  n=1"
    finally:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.slow
def test_logs_show_and_follow_the_log_and_the_process_output(tmp_path: Path) -> None:
    import select

    from helpers.turn_cli import quick_home

    home = quick_home(tmp_path, "alice")
    logs = home / "logs"
    (logs / "holon.log").write_text("".join(f'{{"event": "log {i}"}}\n' for i in range(5)))
    (logs / "daemon.out").write_text("Traceback (most recent call last):\nRuntimeError: boom\n")
    r = holon(home, "daemon", "logs", "-n", "2", "--json")
    assert r.code == 0, r
    assert r.out.splitlines() == [
        f"==> {logs / 'holon.log'} <==", '{"event": "log 3"}', '{"event": "log 4"}',
        f"==> {logs / 'daemon.out'} <==", "Traceback (most recent call last):", "RuntimeError: boom",
    ]  # fmt: skip
    proc = spawn_holon(home, "daemon", "logs", "-n", "0", "--follow", "--json")
    try:
        assert proc.stdout is not None
        wait_for("the headers", lambda: select.select([proc.stdout], [], [], 0.1)[0], proc=proc)
        seen = [proc.stdout.readline().strip(), proc.stdout.readline().strip()]
        assert seen == [f"==> {logs / 'holon.log'} <==", f"==> {logs / 'daemon.out'} <=="], seen
        with (logs / "daemon.out").open("a") as fh:
            fh.write("Fatal Python error: Segmentation fault\n")
        with (logs / "holon.log").open("a") as fh:
            fh.write('{"event": "log 5"}\n')
        got = {proc.stdout.readline().strip() for _ in range(2)}
        assert got == {"Fatal Python error: Segmentation fault", '{"event": "log 5"}'}, got
    finally:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.slow
def test_daemon_json_names_a_url_clients_can_reach_on_ipv6_and_port_0(tmp_path: Path) -> None:
    from holon.daemon.process import api_url

    assert api_url("0.0.0.0", 7878) == "http://127.0.0.1:7878"
    assert api_url("::", 7878) == "http://[::1]:7878"
    assert api_url("fd00::5", 80) == "http://[fd00::5]:80"
    assert api_url("localhost", 1) == "http://localhost:1"
    with FakeLLM() as fake:
        home = fake_home(tmp_path, fake, "alice")
    proc = spawn_holon(home, "serve", "--host", "::1", "--port", "0")
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc)
        wait_for("the bound port", lambda: not state(home)["api"].endswith(":0"), proc=proc, timeout=5)
        url = state(home)["api"]
        assert url.startswith("http://[::1]:"), url
        assert _get(f"{url}/v1/health") == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
