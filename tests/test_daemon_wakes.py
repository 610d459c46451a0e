"""What wakes a daemon's agents, end to end: the real ``Daemon``, the real HTTP API on 127.0.0.1
(uvicorn, in the test's loop) and real subprocesses; only the model is scripted.

* an external event posted to the agent's capability URL resolves its ``wait(on="external")``
  (and only the waits on that event, when the wait names one) and the agent runs a turn with it;
* a graceful stop that kills a background command tells the agent after the restart, as a crash
  does ("Task ... ended: interrupted"), and resolves its wait on the task;
* timer firings while the agent cannot run are coalesced into the one input still pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.runtime import SCRIPTED
from helpers.wait import await_for

from holon.api.app import create_app
from holon.api.server import build_server, free_port
from holon.daemon import Daemon
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import TaskProjection
from holon.runtime.providers.base import ModelRequest
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call
from holon.runtime.tasks import process_identity

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def served(store: Store, provider: ScriptedProvider) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    """The daemon on ``store`` with its API served on a free loopback port, and a client for it."""
    daemon = Daemon(store, resolver=lambda agent: (provider, SCRIPTED), poll_s=0.01)
    port = free_port()
    async with daemon.running(grace_s=1):
        server = build_server(create_app(daemon), host="127.0.0.1", port=port, token=None)
        serving = asyncio.create_task(server.serve())
        while not server.started:
            assert not serving.done(), "the API server did not start"
            await asyncio.sleep(0.01)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                yield daemon, client
        finally:
            server.should_exit = True
            await serving


def _user_text(request: ModelRequest) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "user")


def _agent_status(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in status["agents"] if a["name"] == name)


async def _waits(client: httpx.AsyncClient, agent: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/agents/{agent}/waits")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


# --- external events --------------------------------------------------------------------------------


@pytest.mark.slow  # a confined command, a daemon, a hook
def test_a_hook_event_resolves_the_external_wait_and_wakes_the_agent(store: Store) -> None:
    seen: list[str] = []

    def answer(request: ModelRequest) -> Any:
        seen.append(_user_text(request))
        return reply("The build failed at job 42; I will look at it.")

    provider = ScriptedProvider([
        tool_call("wait", {"on": "external", "recheck_in_s": 3600, "reason": "the CI result"}),
        answer,
    ])  # fmt: skip

    async def scenario() -> None:
        async with served(store, provider) as (daemon, client):
            assert (await client.post("/v1/agents", json={"name": "ada"})).status_code == 201
            r = await client.post("/v1/agents/ada/inputs", json={"text": "Tell me when CI reports."})
            assert r.status_code == 202, r.text
            await daemon.until_idle()
            [pending] = await _waits(client, "ada")
            assert pending["on"] == "external" and pending["status"] == "pending"
            before = _agent_status((await client.get("/v1/status")).json(), "ada")
            assert before["state"] == "waiting" and before["detail"] == "external", before

            path = (await client.get("/v1/agents/ada/hook")).json()["path"]
            r = await client.post(path, json={"build": "failed", "job": 42})
            assert r.status_code == 202, r.text
            await daemon.until_idle()

            [resolved] = await _waits(client, "ada")
            assert resolved["wait_id"] == pending["wait_id"] and resolved["status"] == "satisfied", resolved
            after = _agent_status((await client.get("/v1/status")).json(), "ada")
            assert after["state"] == "idle", after
        assert provider.remaining == 0
        assert len(seen) == 1 and '"build": "failed"' in seen[0], seen
        resolved_by = [e for e in store.ledger.read(0) if e.type == "wait.resolved"]
        assert [(e.authority, e.origin, e.payload.resolution) for e in resolved_by] == [
            ("external", "external:hook", "satisfied")
        ]

    asyncio.run(scenario())


def test_a_named_wait_is_resolved_only_by_its_event_and_not_by_the_operator(store: Store) -> None:
    provider = ScriptedProvider([
        tool_call("wait", {"on": "external", "target": "deploy", "recheck_in_s": 3600}),
        reply("Still waiting for the deploy."),  # the build event
        reply("Still waiting for the deploy."),  # the operator's nudge
        reply("Deployed."),  # the deploy event
    ])  # fmt: skip

    async def scenario() -> None:
        async with served(store, provider) as (daemon, client):
            await client.post("/v1/agents", json={"name": "ada"})
            await client.post("/v1/agents/ada/inputs", json={"text": "Wait for the deploy."})
            await daemon.until_idle()
            path = (await client.get("/v1/agents/ada/hook")).json()["path"]

            assert (await client.post(path, json={"event": "build", "ok": True})).status_code == 202
            await daemon.until_idle()
            assert [w["status"] for w in await _waits(client, "ada")] == ["pending"], "another event's input"
            await client.post("/v1/agents/ada/inputs", json={"text": "Any news?"})
            await daemon.until_idle()
            assert [w["status"] for w in await _waits(client, "ada")] == ["pending"], "an operator input"

            assert (await client.post(path, json={"event": "deploy", "ok": True})).status_code == 202
            await daemon.until_idle()
            assert [w["status"] for w in await _waits(client, "ada")] == ["satisfied"]
            assert _agent_status((await client.get("/v1/status")).json(), "ada")["state"] == "idle"
        assert provider.remaining == 0

    asyncio.run(scenario())


# --- a graceful stop with a background task running -------------------------------------------------

_TASK_ID = re.compile(r"background task (task_\w+)")


def _wait_on_the_task(request: ModelRequest) -> Any:
    """The model reads the task id from run_command's answer and waits on it."""
    tool_text = next(str(m.get("content")) for m in reversed(request.messages) if m.get("role") == "tool")
    found = _TASK_ID.search(tool_text)
    assert found, tool_text
    return tool_call("wait", {"on": "task", "target": found.group(1), "recheck_in_s": 3600})


def test_a_graceful_stop_reports_the_killed_task_to_the_agent_after_restart(store: Store, tmp_path: Path) -> None:
    begun = tmp_path / "job.begun"
    command = f"echo begun > {begun}; exec sleep 30"
    first = ScriptedProvider([
        tool_call("run_command", {"command": command, "wait_s": 0.2}),
        _wait_on_the_task,
        reply("Waiting for the job."),
    ])  # fmt: skip
    seen: list[str] = []

    def answer(request: ModelRequest) -> Any:
        seen.append(_user_text(request))
        return reply("The job was interrupted by a restart; shall I run it again?")

    second = ScriptedProvider([answer])

    async def first_run() -> str:
        daemon = Daemon(store, resolver=lambda agent: (first, SCRIPTED), poll_s=0.01)
        async with daemon.running(grace_s=1):
            daemon.create_agent("ada")
            daemon.submit("ada", "Run the job.", origin="operator:test", authority="operator", sender="operator",
                          channel="test")  # fmt: skip
            await await_for(
                'store.rows("wait", status="pending") and not daemon.host.is_running...',
                lambda: store.rows("wait", status="pending") and not daemon.host.is_running(_id(store)),
            )
            [task] = store.rows("task", status="running")
            await await_for("begun.exists", begun.exists)
        return task.task_id

    task_id = asyncio.run(first_run())
    [started] = [e.payload for e in store.ledger.read() if isinstance(e.payload, ev.CommandStarted)]
    assert started.process is not None
    assert process_identity(int(started.process.split(":")[0])) != started.process, (
        "the graceful stop kills the command"
    )
    task = store.state("task", task_id)
    assert isinstance(task, TaskProjection) and task.state == "interrupted"
    assert store.agent("ada").pending_inputs, "the task's result waits for the next start"

    async def second_run() -> None:
        daemon = Daemon(store, resolver=lambda agent: (second, SCRIPTED), poll_s=0.01)
        async with daemon.running(grace_s=1):
            await daemon.until_idle()
            assert _agent_status(daemon.status(), "ada")["state"] == "idle"

    asyncio.run(second_run())
    assert second.remaining == 0 and len(seen) == 1
    assert f"Task {task_id} (" in seen[0] and "ended: interrupted" in seen[0], seen
    assert "begun" in seen[0], "the output the task printed before the stop reaches the agent"
    [wait] = store.rows("wait")
    assert wait.on == "task" and wait.target == task_id and wait.status == "satisfied"
    notices = [e for e in store.ledger.read(0) if e.type == "message.received" and e.task_id == task_id]
    assert len(notices) == 1 and notices[0].origin == f"task:{task_id}" and notices[0].authority == "tool"
    results = [e for e in store.ledger.read(0) if e.type == "task.resulted"]
    assert [e.payload.state for e in results] == ["interrupted"], "reported once: not again by recovery"


def _id(store: Store) -> str:
    return store.agent("ada").agent_id
