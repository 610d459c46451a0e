"""Managing an agent's schedules after it is made, and deleting an agent with what it started.

* ``POST``/``DELETE /v1/agents/{agent}/timers`` on the real daemon behind real HTTP: an
  ``every 1s`` schedule added while the daemon runs fires, and stops firing once cancelled; a
  bad schedule is a 400, an unknown timer a 404, a cancelled one a 409.
* ``holon agent schedule`` from another process while the daemon runs: the daemon's ledger
  watcher picks the new timer up and fires it with no restart; listing shows the next fire time;
  ``--cancel`` stops it; exit codes 2 (bad schedule) and 3 (unknown timer).
* ``Daemon.delete`` (and ``DELETE /v1/agents/{agent}``): the agent's background task processes
  are killed and its child agents deleted, recursively, their tasks killed too; deleting a child
  alone tells its parent.

APScheduler runs on wall time, so these daemons run on the system clock; only models are scripted.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.runtime import SCRIPTED
from helpers.turn_cli import db_rows, holon, wait_for
from helpers.wait import await_for

from holon.clock import SystemClock
from holon.daemon import Daemon
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelReply, ModelRequest
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call, tool_calls

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path, fast_ledger: None) -> Iterator[ApiServer]:
    with api_server(tmp_path / "home", clock=SystemClock()) as s:
        yield s


def _home(server: ApiServer) -> Path:
    assert server.port is not None
    return server.port.store.paths.root


def _firings(home: Path, timer_id: str) -> int:
    rows = db_rows(home, "SELECT payload FROM events WHERE type = 'timer.fired'")
    return sum(1 for (payload,) in rows if json.loads(payload)["timer_id"] == timer_id)


def _prompts(home: Path, timer_id: str) -> list[str]:
    rows = db_rows(
        home, "SELECT payload FROM events WHERE type = 'message.received' AND origin = ?", (f"timer:{timer_id}",)
    )
    return [json.loads(p)["text"] for (p,) in rows]


def _stops_firing(home: Path, timer_id: str) -> None:
    """No firing after the cancellation was acknowledged, over more than two periods."""
    before = _firings(home, timer_id)
    # A negative wait that is inherent: the daemon is another process on the real clock, and a
    # cancelled timer leaves no event to wait for; only time passing over two 1 s periods shows it.
    time.sleep(2.5)
    assert _firings(home, timer_id) == before, "a cancelled timer fired again"


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text
    return str(r.json()["error"]["message"])


# --- schedules over HTTP ---------------------------------------------------------------------------


@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_a_schedule_added_over_http_fires_and_stops_when_cancelled(client: httpx.Client, server: ApiServer) -> None:
    home = _home(server)
    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201
    assert client.post("/v1/agents", json={"name": "bob"}).status_code == 201
    r = client.post("/v1/agents/ada/timers", json={"schedule": "every 1 second", "prompt": "Check the queue."})
    assert r.status_code == 201, r.text
    timer = r.json()
    assert (timer["kind"], timer["spec"], timer["status"], timer["prompt"]) == (
        "interval",
        "1",
        "scheduled",
        "Check the queue.",
    )
    timer_id = timer["timer_id"]
    assert client.get("/v1/agents/ada").json()["agent"]["settings"]["background"] is True, (
        "a scheduled agent is background"
    )

    wait_for("two firings", lambda: _firings(home, timer_id) >= 2, timeout=20)
    replies = "SELECT payload FROM events WHERE type = 'turn.settled'"
    wait_for("a turn on the timer's prompt", lambda: "Check the queue." in str(db_rows(home, replies)), timeout=20)
    assert set(_prompts(home, timer_id)) == {"Check the queue."}
    listed = client.get("/v1/agents/ada/timers", params={"status": "scheduled"}).json()
    assert [t["timer_id"] for t in listed] == [timer_id] and listed[0]["fired"] >= 2

    _error(client.delete(f"/v1/agents/bob/timers/{timer_id}"), 404, "not_found")  # not bob's timer
    r = client.delete(f"/v1/agents/ada/timers/{timer_id}")
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["next_fire_us"] is None
    _stops_firing(home, timer_id)
    assert server.call(lambda: server.port.timers.scheduler.get_job(timer_id)) is None  # type: ignore[union-attr]
    assert "already cancelled" in _error(client.delete(f"/v1/agents/ada/timers/{timer_id}"), 409, "conflict")

    assert "tmr_nope" in _error(client.delete("/v1/agents/ada/timers/tmr_nope"), 404, "not_found")
    _error(client.delete(f"/v1/agents/nobody/timers/{timer_id}"), 404, "not_found")
    _error(client.post("/v1/agents/nobody/timers", json={"schedule": "every 1s"}), 404, "not_found")
    for bad, problem in [("every 0s", "from 1 second"), ("61 * * * *", "not a valid crontab line"),
                         ("2001-01-01T00:00:00", "in the past"), ("soon", "use 'every")]:  # fmt: skip
        assert problem in _error(client.post("/v1/agents/ada/timers", json={"schedule": bad}), 400, "bad_request")
    _error(client.post("/v1/agents/ada/timers", json={"prompt": "no schedule"}), 422, "invalid")
    _error(client.post("/v1/agents/ada/timers", json={"schedule": "every 1s", "extra": 1}), 422, "invalid")
    assert [t["timer_id"] for t in client.get("/v1/agents/ada/timers").json()] == [timer_id], "refusals add nothing"
    assert "/v1/agents/{agent}/timers/{timer_id}" in client.get("/v1/openapi.json").json()["paths"]


# --- schedules from the CLI, while the daemon runs -------------------------------------------------


@pytest.mark.slow
def test_a_schedule_added_by_the_cli_fires_in_the_running_daemon(client: httpx.Client, server: ApiServer) -> None:
    home = _home(server)
    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201
    assert holon(home, "agent", "schedule", "ada").out.strip() == "ada has no schedules (add one with --add)"

    added = holon(
        home, "agent", "schedule", "ada", "--add", "every 1s", "--prompt", "Tick from the CLI.", "--json"
    ).json()
    timer_id = added["timer_id"]
    assert added["status"] == "scheduled" and added["next_fire"].endswith("Z")
    wait_for("the CLI's timer firing in the daemon", lambda: _firings(home, timer_id) >= 2, timeout=20)
    assert set(_prompts(home, timer_id)) == {"Tick from the CLI."}

    cron = holon(home, "agent", "schedule", "ada", "--add", "0 9 * * 1-5", "--json").json()
    listing = holon(home, "agent", "schedule", "ada")
    assert listing.code == 0, listing
    lines = {line.split()[0]: line for line in listing.out.splitlines() if line.startswith("tmr_")}
    assert set(lines) == {timer_id, cron["timer_id"]}
    assert "every 1s" in lines[timer_id] and re.search(r"next: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", lines[timer_id])
    assert f"next: {cron['next_fire_local']}" in lines[cron["timer_id"]] and "09:00:00" in cron["next_fire_local"]
    assert "prompt: Tick from the CLI." in listing.out

    done = holon(home, "agent", "schedule", "ada", "--cancel", timer_id)
    assert done.code == 0 and f"cancelled timer {timer_id}" in done.out
    wait_for("the daemon dropping the job", lambda: server.call(
        lambda: server.port.timers.scheduler.get_job(timer_id)) is None, timeout=10)  # type: ignore[union-attr]  # fmt: skip
    _stops_firing(home, timer_id)
    shown = holon(home, "agent", "schedule", "ada", "--json").json()
    assert [t["timer_id"] for t in shown] == [cron["timer_id"]], "a cancelled timer is no longer listed"

    for args, code, problem in [
        (("--add", "every 5x"), 2, "use 'every"),
        (("--add", "0 0 30 2 *"), 2, "never fires"),
        (("--prompt", "alone"), 2, "--prompt goes with --add"),
        (("--add", "every 1m", "--cancel", cron["timer_id"]), 2, "not both"),
        (("--cancel", "tmr_nope"), 3, "no timer 'tmr_nope'"),
        (("--cancel", timer_id), 4, "already cancelled"),
    ]:
        r = holon(home, "agent", "schedule", "ada", *args)
        assert (r.code, "Traceback" in r.err) == (code, False), r
        assert problem in r.err, r
    assert holon(home, "agent", "schedule", "nobody").code == 3


# --- zones, friendly forms and the no-daemon warning, through the CLI ------------------------------


@pytest.mark.slow
def test_schedules_are_read_in_the_configured_zone_and_warn_without_a_daemon(tmp_path: Path) -> None:
    """A fresh home with ``[runtime] timezone = "Europe/Paris"`` and no daemon: a scheduled agent
    is made (exit 0) with a warning on stderr that nothing fires until ``holon daemon start``;
    crontab lines and @daily fire at Paris time and are listed with their zone; junk is refused
    with the accepted forms; a bad zone in the config is one line naming the key."""
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    (home / "holon.toml").write_text('[runtime]\ntimezone = "Europe/Paris"\n')

    made = holon(home, "agent", "create", "ada", "--schedule", "0 9 * * *", "--prompt", "Morning.", "--json")
    assert made.code == 0, made
    json.loads(made.out)  # stdout stays the command's JSON
    assert "no daemon is running" in made.err and "'holon daemon start'" in made.err, made.err
    assert made.err.count("\n") == 1 and "Traceback" not in made.err

    text = holon(home, "agent", "create", "eve", "--schedule", "30 2 * * *")
    assert text.code == 0 and "no daemon is running" in text.err, text
    assert re.search(
        r"schedule: cron '30 2 \* \* \*' \(Europe/Paris\), next \d{4}-\d\d-\d\d 0[23]:30:00 CES?T \(Europe/Paris\)",
        text.out,
    ), text.out

    added = holon(home, "agent", "schedule", "ada", "--add", "@daily", "--json")
    assert added.code == 0 and "no daemon is running" in added.err, added
    daily = added.json()
    assert daily["spec"] == "CRON_TZ=Europe/Paris 0 0 * * *" and daily["zone"] == "Europe/Paris"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 00:00:00 CES?T \(Europe/Paris\)", daily["next_fire_local"]), daily
    every = holon(home, "agent", "schedule", "ada", "--add", "every 5 minutes", "--json").json()
    assert (every["kind"], every["spec"]) == ("interval", "300")

    listing = holon(home, "agent", "schedule", "ada")
    assert listing.code == 0, listing
    assert "cron '0 9 * * *' (Europe/Paris)" in listing.out and "cron '0 0 * * *' (Europe/Paris)" in listing.out
    assert re.search(r"next: \d{4}-\d\d-\d\d 09:00:00 CES?T \(Europe/Paris\)", listing.out), listing.out
    assert "every 300s" in listing.out
    assert "no daemon" not in listing.err, "listing is not scheduling: no warning"

    bad = holon(home, "agent", "create", "bob", "--schedule", "every fortnight")
    assert (bad.code, "Traceback" in bad.err) == (2, False), bad
    assert "@hourly|@daily|@weekly|@monthly" in bad.err and "every 30s|5 minutes|2h|1 day" in bad.err, bad.err

    (home / "holon.toml").write_text('[runtime]\ntimezone = "Paris"\n')
    refused = holon(home, "agent", "schedule", "ada", "--add", "@hourly")
    assert refused.code != 0 and "Traceback" not in refused.err, refused
    assert "runtime.timezone" in refused.err and "IANA time zone" in refused.err, refused.err


@pytest.mark.slow
def test_no_warning_while_a_daemon_runs(tmp_path: Path) -> None:
    """The same commands against a home whose daemon runs print no warning."""
    from holon.cli.common import Ctx
    from holon.cli.schedules import no_daemon_warning
    from holon.config import resolve_home

    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    paths = resolve_home(home)
    assert no_daemon_warning(Ctx(paths, json=False)) is not None
    started = holon(home, "daemon", "start", "--no-http")
    try:
        assert started.code == 0, started
        assert no_daemon_warning(Ctx(paths, json=False)) is None
        made = holon(home, "agent", "create", "ada", "--schedule", "every 1 hour")
        assert made.code == 0 and "no daemon" not in made.err, made
    finally:
        holon(home, "daemon", "stop")


# --- delete stops what the agent started -----------------------------------------------------------


def _pid(store: Store, task_id: str) -> int:
    task = store.state("task", task_id)
    found = re.search(r"pid (\d+)", getattr(task, "detail", "") or "")
    assert found, task
    return int(found.group(1))


def _group_alive(pgid: int) -> bool:
    """Is any process (not a zombie) left in the process group ``pgid``?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _by_agent(scripts: dict[str, ScriptedProvider]) -> Callable[[AgentState], Any]:
    return lambda agent: (scripts[agent.name], SCRIPTED)


SLEEP = {"command": "sleep 60", "wait_s": 0}


def test_delete_kills_the_agents_tasks_and_deletes_its_children(store: Store) -> None:
    """boss starts ``sleep 60`` and spawns helper; helper starts its own ``sleep 60`` and spawns
    runner, whose turn hangs on its model. Deleting boss ends all of it."""
    never = asyncio.Event()

    async def hang(request: ModelRequest) -> ModelReply:
        await never.wait()
        return reply("never")

    scripts = {
        "boss": ScriptedProvider(
            [
                tool_calls(("run_command", SLEEP), ("spawn_agent", {"task": "Help.", "name": "helper"})),
                reply("Started a task and a helper."),
            ]
        ),
        "helper": ScriptedProvider(
            [
                tool_calls(("run_command", SLEEP), ("spawn_agent", {"task": "Run.", "name": "runner"})),
                reply("Waiting on my runner."),
            ]
        ),
        "runner": ScriptedProvider([hang]),
    }
    pids: list[int] = []

    async def scenario() -> None:
        daemon = Daemon(store, resolver=_by_agent(scripts), poll_s=0.01)
        async with daemon.running(grace_s=1):
            daemon.create_agent("boss")
            daemon.create_agent("other")
            daemon.submit(
                "boss", "Go.", origin="operator:test", authority="operator", sender="operator", channel="test"
            )
            await await_for(
                "runner's turn",
                lambda: any(a.name == "runner" and daemon.host.is_running(a.agent_id) for a in store.agents()),
            )
            # Running is not yet asking: the turn hangs only once it has taken its model's one step.
            await await_for("runner's turn to ask its model", lambda: scripts["runner"].remaining == 0)
            await await_for("two background tasks", lambda: len(daemon.host.tasks.running) == 2)
            commands = [t for t in store.rows("task", status="running") if t.kind == "command"]
            pids.extend(_pid(store, t.task_id) for t in commands)
            assert len(pids) == 2 and all(_group_alive(p) for p in pids)
            ids = {name: store.agent(name).agent_id for name in ("boss", "helper", "runner")}
            homes = [Path(store.agent(name).home) for name in ids]

            daemon.delete("boss")

            assert [a.name for a in store.agents()] == ["other"], "children and grandchildren are deleted too"
            assert not daemon.host.tasks.running
            await await_for("the task processes to die", lambda: not any(_group_alive(p) for p in pids))
            await await_for("runner's turn to stop", lambda: not daemon.host.is_running(ids["runner"]))
            tasks = [t for agent_id in ids.values() for t in store.rows("task", agent_id=agent_id)]
            assert not [t for t in tasks if t.state in ("running", "pending")], tasks
            assert {t.state for t in tasks if t.kind == "command"} == {"cancelled"}
            [on_runner] = [t for t in tasks if t.kind == "child_agent" and t.agent_id == ids["helper"]]
            assert on_runner.state == "cancelled", "runner never answered: its task ends with the line"
            assert not [w for agent_id in ids.values() for w in store.rows("wait", agent_id=agent_id, status="pending")]
            assert not any(home.exists() for home in homes)
            await daemon.until_idle(timeout_s=10)
            head = store.ledger.head()
            # Inherent negative wait: what this guards against is a stray task of the deleted line
            # (a tool process's watcher, a child's wake) appending later; no event marks its absence.
            await asyncio.sleep(0.3)
            late = [e for e in store.ledger.read(head) if e.agent_id in ids.values()]
            assert late == [], "nothing of the deleted line runs on"
        assert scripts["runner"].remaining == 0

    asyncio.run(scenario())
    assert not any(_group_alive(p) for p in pids)
    deleted = [e.agent_id for e in store.ledger.read() if e.type == "agent.deleted"]
    assert len(deleted) == 3 and deleted[-1] == next(
        e.agent_id for e in store.ledger.read() if e.type == "agent.created"
    )
    assert store.replay().ok


def test_deleting_a_child_alone_tells_its_parent(store: Store) -> None:
    never = asyncio.Event()

    async def hang(request: ModelRequest) -> ModelReply:
        await never.wait()
        return reply("never")

    def wait_on_child(request: ModelRequest) -> ModelReply:
        said = json.dumps(request.messages)
        found = re.search(r"on task (task_\w+)", said)
        assert found, said
        return tool_call("wait", {"on": "task", "target": found.group(1), "recheck_in_s": 3600})

    scripts = {
        "boss": ScriptedProvider(
            [
                tool_call("spawn_agent", {"task": "Dig.", "name": "digger"}),
                wait_on_child,
                reply("Noted: digger is gone."),
            ]
        ),
        "digger": ScriptedProvider([tool_call("run_command", SLEEP), hang]),
    }

    async def scenario() -> None:
        daemon = Daemon(store, resolver=_by_agent(scripts), poll_s=0.01)
        async with daemon.running(grace_s=1):
            daemon.create_agent("boss")
            daemon.submit(
                "boss", "Go.", origin="operator:test", authority="operator", sender="operator", channel="test"
            )
            await await_for("digger's task", lambda: daemon.host.tasks.running)
            await await_for(
                "boss's wait", lambda: store.rows("wait", agent_id=store.agent("boss").agent_id, status="pending")
            )
            [command] = daemon.host.tasks.running.values()
            pid = command.proc.pid
            daemon.delete("digger")
            assert [a.name for a in store.agents()] == ["boss"]
            await await_for("digger's task process to die", lambda: not _group_alive(pid))
            await daemon.until_idle(timeout_s=10)
            boss = store.agent("boss").agent_id
            [task] = [t for t in store.rows("task", agent_id=boss) if t.kind == "child_agent"]
            assert task.state == "cancelled"
            assert not store.rows("wait", agent_id=boss, status="pending"), "the wait on the child resolved"
            told = [e.payload.text for e in store.ledger.read() if e.type == "message.received" and e.agent_id == boss]
            assert "was deleted by the operator" in told[-1]
        assert scripts["boss"].remaining == 0, "boss ran a turn on the news"

    asyncio.run(scenario())
    assert store.replay().ok


def test_delete_over_http_kills_the_agents_task(client: httpx.Client, server: ApiServer) -> None:
    home = _home(server)
    assert client.post("/v1/agents", json={"name": "ada"}).status_code == 201

    def start_task() -> int:
        port = server.port
        assert port is not None
        agent = port.store.agent("ada")
        coro = port.host.tasks.run_command(
            agent.agent_id, Path(agent.home), Path(agent.home), Path(agent.home), "sleep 60", wait_s=0, timeout_s=600
        )
        return asyncio.run_coroutine_threadsafe(coro, server.loop)  # type: ignore[return-value]

    outcome = server.call(start_task).result(10)
    assert outcome.task_id is not None and not outcome.finished
    pid = server.call(lambda: server.port.host.tasks.running[outcome.task_id].proc.pid)  # type: ignore[union-attr]
    assert _group_alive(pid)
    assert client.delete("/v1/agents/ada").status_code == 204
    wait_for("the task process to die", lambda: not _group_alive(pid), timeout=10)
    rows = db_rows(home, "SELECT payload FROM events WHERE type = 'task.resulted'")
    assert [json.loads(p)["state"] for (p,) in rows] == ["cancelled"]
    _error(client.get("/v1/agents/ada"), 404, "not_found")
