"""The warm model path (issue 15, item 4; RFC 0005 "Warm model path", RFC 0007).

* A model process is ready before the first call when ``warm()``ed; a call that had to wait for a
  start says so (``ModelReply.start_ms``), a call to a ready child does not; ``idle_s=0`` never stops it.
* The resolver starts the local model server only for agents that use it (never for an agent on a
  loopback model), waits for it off the loop, reports the wait, and stops it after
  ``[local] idle_stop_s`` (a fake server stands in for llama.cpp: a script that answers ``/v1/models``).
* ``holon serve`` starts the model process without any message, its API answering meanwhile, and
  stops it after ``[daemon] model_process_idle_s``.
* A cold start is its own span and its own line in ``holon trace stats``, not model latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.daemon import fake_home, state
from helpers.turn_cli import cli_env, holon, open_store, wait_for

from holon.clock import FakeClock
from holon.config import ModelDefaults, load_settings, resolve_home
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime import models
from holon.runtime.agents import create_agent
from holon.runtime.providers import local
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, TextSink
from holon.runtime.providers.model_process import START_DELAY_ENV, ProcessProvider
from holon.runtime.providers.scripted import ScriptedProvider, reply
from holon.testing import FakeLLM
from holon.trace.export import trace_stats
from holon.trace.spans import TraceReader, turn_spans

pytestmark = pytest.mark.timeout(120)

MESSAGES = [{"role": "user", "content": "hello"}]


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw.rsplit(")", 1)[1].split()[0] != "Z"


def _model_children(pid: int) -> list[int]:
    """The model processes (``holon.runtime.providers.model_process``) whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"holon.runtime.providers.model_process" in cmdline and _alive(int(entry.name)):
            out.append(int(entry.name))
    return out


# --- the model process ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_warmed_child_answers_without_a_start_and_a_cold_one_reports_its_wait() -> None:
    with FakeLLM(lambda body: {"content": "ok"}) as fake:
        request = ModelRequest(messages=MESSAGES, settings=ModelSettings(model="openai/fake", api_base=fake.url))

        async def go() -> tuple[object, object, list[tuple[str, str]], object, object]:
            heard: list[tuple[str, str]] = []
            warmed = ProcessProvider(processes=1, on_state=lambda what, s: heard.append((what, s)))
            cold = ProcessProvider(processes=1)
            try:
                await warmed.warm()
                assert warmed.pids and not warmed.starting
                first = await warmed.complete(request)
                cold_first = await cold.complete(request)
                cold_second = await cold.complete(request)
                idle = warmed._workers[0].idle  # idle_s=0 (the default): no idle stop is ever armed
            finally:
                await asyncio.gather(warmed.aclose(), cold.aclose())
            return first, cold_first, heard, cold_second, idle

        first, cold_first, heard, cold_second, idle = asyncio.run(go())
    assert heard == [("model process", "starting"), ("model process", "ready")]
    assert first.start_ms is None and first.content == "ok"  # type: ignore[attr-defined]
    assert cold_first.start_ms is not None and cold_first.start_ms > 0  # type: ignore[attr-defined]
    assert cold_first.start_what == "model process"  # type: ignore[attr-defined]
    assert cold_second.start_ms is None  # type: ignore[attr-defined]
    assert idle is None


@pytest.mark.slow
def test_a_child_stopped_while_it_starts_is_killed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(START_DELAY_ENV, "60")

    async def go() -> int:
        provider = ProcessProvider(processes=1)
        warm = asyncio.create_task(provider.warm())
        while not provider.pids:
            await asyncio.sleep(0.02)
        pid = provider.pids[0]
        await provider.aclose()  # not after the 10 s grace: the child has no call to finish
        warm.cancel()
        return pid

    pid = asyncio.run(asyncio.wait_for(go(), 8))
    assert not _alive(pid)


# --- the local model server -------------------------------------------------------------------

FAKE_SERVER = """\
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The local model is 'installed' and its server is a script answering ``/v1/models``."""
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(models, "local_model_available", lambda: True)
    monkeypatch.setattr(local, "require_local_model", lambda: tmp_path / "model.gguf")
    real = models.LocalModelServer
    monkeypatch.setattr(models, "LocalModelServer", lambda *a, **kw: real(*a, python=str(python), **kw))
    yield tmp_path


def _store(tmp_path: Path) -> Store:
    paths = resolve_home(str(tmp_path / "home"))
    return Store.open(paths, load_settings(paths), clock=FakeClock())


@pytest.mark.slow  # the local model server
def test_the_local_server_starts_only_for_agents_that_use_it_and_stops_when_idle(fake_llama: Path) -> None:
    with _store(fake_llama) as store:
        on_fake = create_agent(
            store, "loopback", settings={"model": "openai/fake", "api_base": "http://127.0.0.1:9/v1"}
        )
        on_local = create_agent(store, "smol")
        heard: list[tuple[str, str]] = []
        provider = ScriptedProvider([reply("hi"), reply("again")])

        async def go() -> tuple[int | None, object, object]:
            resolver = models.ModelResolver(
                ModelDefaults(), fake_llama / "logs", provider=provider, local_idle_s=0.3,
                on_state=lambda what, s: heard.append((what, s)),
            )  # fmt: skip
            try:
                await resolver.warm([on_fake])
                assert resolver._local is None, "an agent on a loopback model must not start the local server"
                gate, settings = resolver(on_local)  # launched, not waited for: the loop is never held
                assert settings.model == "openai/smollm2" and settings.api_base is not None
                first = await gate.complete(ModelRequest(messages=MESSAGES, settings=settings))
                pid = resolver._local.pid if resolver._local else None
                second = await gate.complete(ModelRequest(messages=MESSAGES, settings=settings))
                deadline = time.monotonic() + 20
                while resolver._local is not None and time.monotonic() < deadline:
                    resolver.maintain()  # the daemon's tick
                    await asyncio.sleep(0.05)
                return pid, first, second
            finally:
                resolver.close()

        pid, first, second = asyncio.run(go())
    assert pid is not None and not _alive(pid), "the local server outlived [local] idle_stop_s"
    assert first.start_what == "local model" and first.start_ms and first.start_ms > 0  # type: ignore[attr-defined]
    assert second.start_ms is None and second.content == "again"  # type: ignore[attr-defined]
    assert heard == [("local model", "starting"), ("local model", "ready")]


@pytest.mark.slow  # the local model server
def test_idle_stop_zero_keeps_the_local_server_and_warm_starts_it_for_a_local_agent(fake_llama: Path) -> None:
    with _store(fake_llama) as store:
        on_local = create_agent(store, "smol")

        async def go() -> bool:
            resolver = models.ModelResolver(
                ModelDefaults(), fake_llama / "logs", provider=ScriptedProvider(), local_idle_s=0
            )
            try:
                await resolver.warm([on_local])  # no message: the server starts and is waited for
                assert resolver._local is not None and resolver._local.ready
                resolver._local_used -= 86_400  # a day without a call
                resolver.maintain()
                return resolver._local is not None and resolver._local.running
            finally:
                resolver.close()

        assert asyncio.run(go())


# --- the daemon ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)  # four daemon starts and stops and two litellm imports, on a loaded machine
def test_the_daemon_starts_the_model_process_without_a_message_and_honours_its_idle_time(tmp_path: Path) -> None:
    with FakeLLM(lambda body: {"content": "ok"}) as fake:
        home = fake_home(tmp_path, fake, "alice")
        # 1. A model process that takes a minute to be ready: the daemon's API answers meanwhile,
        #    and a stop does not wait for it.
        slow = cli_env(**{START_DELAY_ENV: "60"})
        try:
            r = holon(home, "daemon", "start", env=slow)
            assert r.code == 0, r
            pid = int(state(home)["pid"])
            child = wait_for("the model process to start", lambda: _model_children(pid), timeout=30)[0]
            r = holon(home, "daemon", "status", "--json", env=slow)
            assert r.code == 0 and r.json()["running"] is True, r
            with open_store(home) as store:  # no message was sent: no turn ran
                assert not [e for e in store.ledger.read(0) if e.type in ("message.received", "turn.started")]
        finally:
            assert holon(home, "daemon", "stop", env=slow).code == 0
        assert not _alive(child), "a model process that was still starting outlived the daemon"

        # 2. [daemon] model_process_idle_s: the warm process stops after that long without a call.
        config = home / "holon.toml"
        config.write_text(config.read_text().replace("model_process_idle_s = 0.0", "model_process_idle_s = 2.0"))
        env = cli_env()
        try:
            assert holon(home, "daemon", "start", env=env).code == 0
            pid = int(state(home)["pid"])
            child = wait_for("the model process to start", lambda: _model_children(pid), timeout=30)[0]
            wait_for("the idle model process to stop", lambda: not _alive(child), timeout=90)
            assert _alive(pid), "the daemon itself must keep running"
        finally:
            assert holon(home, "daemon", "stop", env=env).code == 0


def _maps_litellm(pid: int) -> bool:
    """Whether process ``pid`` imported litellm (its native module is mapped once it is imported)."""
    return "/litellm/" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.slow
def test_the_daemon_never_imports_litellm_and_asks_its_model_process_for_the_window(tmp_path: Path) -> None:
    """litellm costs ~5 s of CPU and ~170 MiB to import: only the model children import it. The
    daemon's turns still get the model's real window (gpt-4o-mini: 128k in litellm's map, far above
    ``[context] default_context_window``), asked of the child before the turn starts."""
    from helpers.daemon import submit
    from helpers.turn_cli import quick_home

    from holon.runtime.providers.litellm_provider import known_context_window

    window = known_context_window("openai/gpt-4o-mini")
    assert window is not None and window > 100_000
    with FakeLLM(lambda body: {"content": "ok"}) as fake:
        home = quick_home(tmp_path, "alice", model="openai/gpt-4o-mini", api_base=fake.url)
        env = cli_env()
        try:
            assert holon(home, "daemon", "start", env=env).code == 0
            pid = int(state(home)["pid"])
            [seq] = submit(home, "alice", "hello")
            wait_for("the turn to settle", lambda: bool(_settled(home)), timeout=60)
            [child] = _model_children(pid)
            assert _maps_litellm(child) and not _maps_litellm(pid)
        finally:
            assert holon(home, "daemon", "stop", env=env).code == 0
    from holon.runtime.turn.prompt import request_budget

    with open_store(home) as store:
        events = list(store.ledger.read(0))
        _, budget = request_budget(ModelSettings(model="openai/gpt-4o-mini"), store.settings.context, window)
    started = next(e for e in events if e.type == "turn.started")
    assert seq in started.payload.inputs  # type: ignore[attr-defined]
    [assembled] = [e for e in events if e.type == "context.assembled"]
    assert assembled.payload.budget_tokens == budget.limit > 100_000, assembled.payload  # type: ignore[attr-defined]
    assert [e.payload.outcome for e in events if e.type == "turn.settled"] == ["completed"]  # type: ignore[attr-defined]


def _settled(home: Path) -> list[str]:
    with open_store(home) as store:
        return [e.type for e in store.ledger.read(0) if e.type == "turn.settled"]


# --- traces -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _scripted(tmp_path: Path) -> Iterator[tuple[Any, FakeClock, Store]]:
    """A store on a fake clock with a ``Script`` of agent ``quick`` (the trace tests' ledger)."""
    from helpers.ctx_ledger import Script

    clock = FakeClock()
    paths = resolve_home(str(tmp_path / "home"))
    paths.root.mkdir(parents=True)
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        yield Script(store, agent_id="agt_quick", name="quick"), clock, store


USAGE = ev.Usage(prompt_tokens=9, completion_tokens=1, total_tokens=10)


def test_a_cold_start_waited_for_before_the_turn_is_drawn_before_its_request(tmp_path: Path) -> None:
    """The turn's question for the model's window waited 15 s for the model process: the turn
    recorded ``model.started`` with ``turn.started``, before its request. The span ends there and
    the call's 50 ms are all model latency."""
    with _scripted(tmp_path) as (s, clock, store):
        usage = USAGE
        s.say("hello")
        clock.advance(seconds=15)
        s.start()
        s.append(ev.ModelStarted(turn_id=str(s.turn_id), round=0, what="model process", duration_ms=15_000))
        s.append(ev.ModelRequested(turn_id=str(s.turn_id), round=0, model="openai/fake", messages=2))
        clock.advance(seconds=0.05)
        s.append(
            ev.ModelResponded(turn_id=str(s.turn_id), round=0, model="openai/fake", content="hi", usage=usage),
            ev.TurnSettled(turn_id=str(s.turn_id), outcome="completed", usage=usage),
        )
        [spans] = [turn_spans(t, project="p", store=store) for t in TraceReader(store).turns()]
        stats = trace_stats(store)
    assert [sp.name for sp in spans] == ["agent quick turn", "model.start", "llm openai/fake"]
    _root, start, llm = spans
    assert start.end_ns - start.start_ns == 15_000_000_000 and start.end_ns <= llm.start_ns
    assert (llm.end_ns - llm.start_ns) / 1e6 == pytest.approx(50, abs=0.01)
    assert stats["agents"]["quick"]["model_latency_ms"]["p50"] == pytest.approx(50, abs=0.01)
    assert stats["model_start"] == {"n": 1, "p50_ms": 15_000.0, "p95_ms": 15_000.0}


@pytest.mark.slow
def test_a_cold_start_is_its_own_span_and_stats_line_not_model_latency(tmp_path: Path) -> None:
    with _scripted(tmp_path) as (s, clock, store):
        usage = USAGE
        paths = store.paths
        for cold in (True, False):
            s.say("hello")
            s.start()
            s.append(ev.ModelRequested(turn_id=str(s.turn_id), round=0, model="openai/fake", messages=2))
            clock.advance(seconds=15.05 if cold else 0.05)
            if cold:  # the call waited 15 s for the model process, then the model answered in 50 ms
                s.append(ev.ModelStarted(turn_id=str(s.turn_id), round=0, what="model process", duration_ms=15_000))
            s.append(
                ev.ModelResponded(turn_id=str(s.turn_id), round=0, model="openai/fake", content="hi", usage=usage),
                ev.TurnSettled(turn_id=str(s.turn_id), outcome="completed", usage=usage),
            )
            clock.advance(seconds=1)
        traces = [turn_spans(t, project="p", store=store) for t in TraceReader(store).turns()]
        stats = trace_stats(store)
    names = [[sp.name for sp in spans] for spans in traces]
    assert names == [["agent quick turn", "llm openai/fake", "model.start"], ["agent quick turn", "llm openai/fake"]]
    root, llm, start = traces[0]
    # (the fake clock moves 1 us per append: the span starts at the request, just after the turn's start)
    assert (start.end_ns - start.start_ns) == 15_000_000_000 and 0 < start.start_ns - root.start_ns < 10_000
    assert llm.start_ns == start.end_ns and (llm.end_ns - llm.start_ns) / 1e6 == pytest.approx(50, abs=0.01)
    assert start.attributes["holon.model_start.what"] == "model process" and start.parent_span_id == root.span_id
    latency = stats["agents"]["quick"]["model_latency_ms"]
    assert latency["p50"] == pytest.approx(50, abs=0.01) and latency["p95"] == pytest.approx(50, abs=0.01)
    assert stats["model_start"] == {"n": 1, "p50_ms": 15_000.0, "p95_ms": 15_000.0}

    r = holon(paths.root, "trace", "stats")
    assert r.code == 0, r
    assert re.search(r"model p50 50\.\d+ ms, p95 50\.\d+ ms", r.out), r.out  # not 15 s
    assert "model start: 1 (cold starts, not in model latency); p50 15000.0 ms, p95 15000.0 ms" in r.out
    r = holon(paths.root, "trace", "export", "--out", tmp_path / "t.jsonl")
    assert r.code == 0, r
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert any(line["name"] == "model.start" for line in lines)


def test_the_turn_records_a_cold_start_before_its_answer(tmp_path: Path) -> None:
    """A provider whose reply waited for a start: ``model.started`` comes right before ``model.responded``."""
    from helpers.runtime import make_host, running

    class Cold(ScriptedProvider):
        async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
            answer = await super().complete(request, on_text=on_text)
            return dataclasses.replace(answer, start_ms=1234.5, start_what="local model")

    clock = FakeClock()
    paths = resolve_home(str(tmp_path / "home"))
    paths.root.mkdir(parents=True)
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        agent = create_agent(store, "cold")

        async def scenario() -> list[object]:
            async with running(make_host(store, Cold([reply("hello")]), clock=clock)) as host:
                host.submit("cold", "hi")
                return await host.run_agent(agent.agent_id)

        [result] = asyncio.run(scenario())
        events = [e for e in store.ledger.read(0) if e.agent_id == agent.agent_id]
    assert result.outcome == "completed"  # type: ignore[attr-defined]
    types = [e.type for e in events]
    i = types.index("model.started")
    assert types[i + 1] == "model.responded" and types.count("model.started") == 1
    started = events[i].payload
    assert isinstance(started, ev.ModelStarted) and (started.what, started.duration_ms) == ("local model", 1234.5)


@pytest.mark.slow
def test_the_daemon_warms_the_local_server_for_an_agent_that_uses_it_and_tells_streams(fake_llama: Path) -> None:
    from holon.daemon import Daemon

    paths = resolve_home(str(fake_llama / "dhome"))
    paths.root.mkdir(parents=True)
    paths.config.write_text("[daemon]\nmodel_process = false\n")  # only the local server is the subject here
    with Store.open(paths, load_settings(paths)) as store:
        create_agent(store, "smol")

        async def go() -> tuple[int | None, list[tuple[str, str]]]:
            daemon = Daemon(store, poll_s=0.01)
            heard: list[tuple[str, str]] = []

            async def listen() -> None:
                async for notice in daemon.subscribe("smol"):
                    if notice.kind == "model":
                        heard.append((notice.text, notice.state))

            async with daemon.running(grace_s=1):
                listener = asyncio.create_task(listen())
                resolver = daemon._owned_resolver
                deadline = time.monotonic() + 30
                while not (resolver._local is not None and resolver._local.ready):  # no message was sent
                    assert time.monotonic() < deadline, "the local server did not start with the daemon"
                    await asyncio.sleep(0.02)
                pid = resolver._local.pid
                while ("local model", "ready") not in heard and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                listener.cancel()
            return pid, heard

        pid, heard = asyncio.run(go())
    assert pid is not None and not _alive(pid), "the local server outlived the daemon"
    # A stream that subscribed while the server was starting heard that it was, then that it is ready.
    assert heard == [("local model", "starting"), ("local model", "ready")]
