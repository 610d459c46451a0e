"""Live OTLP export from the daemon: a collector on 127.0.0.1 receives every settled turn's spans as
well-formed OTLP JSON (or protobuf, when configured); with the collector down (connection refused)
or silent (a blackhole that accepts and never answers), no export runs on the turns' event loop,
a warning is logged and the daemon still stops (the exporter's close has a deadline)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from helpers.daemon import all_settled, payloads, submit
from helpers.runtime import SCRIPTED, closed_port_url
from helpers.turn_cli import cli_env, holon, kill_hard, quick_home, spawn_holon, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from structlog.testing import capture_logs

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.daemon import Daemon
from holon.errors import ConfigError
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls
from holon.testing.fake_llm import FakeLLM
from holon.trace import live

_HEX = re.compile(r"^[0-9a-f]+$")


class _Collector(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append((self.headers.get("Content-Type", ""), self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A port that completes the TCP handshake (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1/traces"
    finally:
        sock.close()


@dataclass
class _Run:
    outcomes: list[str]
    loop_thread: int
    """The thread of the daemon's event loop, where turns run."""


def _run(
    tmp_path: Path, endpoint: str, *, protocol: str = "http/json", timeout_s: float = 1.0, flush: bool = True
) -> _Run:
    home = resolve_home(str(tmp_path / "home"))
    base = load_settings(home)
    trace = base.trace.model_copy(update={"otlp_endpoint": endpoint, "otlp_protocol": protocol, "timeout_s": timeout_s})
    settings = base.model_copy(update={"trace": trace})
    clock = FakeClock()
    with Store.open(home, settings, clock=clock) as store:
        if not store.agents():
            create_agent(store, "ada")
        provider = ScriptedProvider([tool_calls(("memory_search", {"query": "notes"})), reply("done"), reply("again")])

        async def go() -> int:
            daemon = Daemon(store, resolver=lambda a: (provider, SCRIPTED), clock=clock, poll_s=0.01)
            async with daemon.running(grace_s=1):
                assert (daemon.tracer is not None) == bool(endpoint)
                for text in ("first", "second"):
                    daemon.submit(
                        "ada", text, origin="operator:test", authority="operator", sender="operator", channel="test"
                    )
                    await daemon.until_idle()
                if flush and daemon.tracer is not None:
                    await asyncio.to_thread(daemon.tracer.flush, 5.0)
            return threading.get_ident()

        loop_thread = asyncio.run(go())
        outcomes = [e.payload.outcome for e in store.ledger.read(0) if e.type == "turn.settled"]
    return _Run(outcomes[-2:], loop_thread)


def _value(v: dict[str, Any]) -> Any:
    [(kind, value)] = v.items()
    assert kind in {"stringValue", "intValue", "doubleValue", "boolValue", "arrayValue"}, kind
    if kind == "intValue":
        assert isinstance(value, str) and value.lstrip("-").isdigit()  # OTLP JSON: 64-bit ints as strings
        return int(value)
    if kind == "arrayValue":
        return [_value(x) for x in value["values"]]
    return value


def _json_spans(bodies: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """Spans of OTLP/HTTP JSON ExportTraceServiceRequest bodies, each checked for well-formedness."""
    spans = []
    for content_type, body in bodies:
        assert content_type == "application/json"
        request = json.loads(body)
        assert set(request) == {"resourceSpans"}
        for rs in request["resourceSpans"]:
            resource = {a["key"]: _value(a["value"]) for a in rs["resource"]["attributes"]}
            assert resource["service.name"] == "holon" and resource["service.version"]
            for ss in rs["scopeSpans"]:
                assert ss["scope"]["name"] == "holon.trace"
                for s in ss["spans"]:
                    assert len(s["traceId"]) == 32 and _HEX.match(s["traceId"])
                    assert len(s["spanId"]) == 16 and _HEX.match(s["spanId"])
                    assert s["parentSpanId"] == "" or (len(s["parentSpanId"]) == 16 and _HEX.match(s["parentSpanId"]))
                    assert s["kind"] in (1, 3) and s["status"]["code"] in (0, 1, 2)
                    assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])
                    attrs = {a["key"]: _value(a["value"]) for a in s["attributes"]}
                    spans.append({"name": s["name"], "trace": s["traceId"], "id": s["spanId"],
                                  "parent": s["parentSpanId"], "attrs": attrs})  # fmt: skip
    return spans


def _protobuf_spans(bodies: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    spans = []
    for content_type, body in bodies:
        assert content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            assert {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"] == "holon"
            for ss in rs.scope_spans:
                assert ss.scope.name == "holon.trace"
                spans += [{"name": s.name, "trace": s.trace_id.hex(), "id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                           "attrs": {a.key: a.value for a in s.attributes}} for s in ss.spans]  # fmt: skip
    return spans


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
def test_spans_of_every_settled_turn_reach_a_collector(tmp_path: Path, collector: str, protocol: str) -> None:
    run = _run(tmp_path, collector, protocol=protocol)
    assert run.outcomes == ["completed", "completed"]
    spans = (_json_spans if protocol == "http/json" else _protobuf_spans)(_Collector.bodies)
    names = sorted(s["name"] for s in spans)
    assert names.count("agent ada turn") == 2 and "tool memory_search" in names
    roots = [s for s in spans if not s["parent"]]
    assert len({s["trace"] for s in roots}) == 2
    assert all(s["parent"] in {r["id"] for r in roots} for s in spans if s["parent"])
    [llm, *_] = [s["attrs"] for s in spans if s["name"].startswith("llm ")]
    assert {"openinference.span.kind", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.provider.name",
            "llm.token_count.prompt", "llm.output_messages.0.message.role"} <= set(llm)  # fmt: skip
    [tool] = [s["attrs"] for s in spans if s["name"] == "tool memory_search"]
    assert {"gen_ai.tool.call.id", "gen_ai.tool.name"} <= set(tool)
    if protocol == "http/json":
        assert llm["gen_ai.provider.name"] == "litellm" and llm["gen_ai.response.finish_reasons"] == ["tool_calls"]
        assert tool["gen_ai.tool.call.id"] == tool["holon.tool.call_id"] != ""
        assert all("inference.llm.input_tokens" not in s["attrs"] for s in roots)  # no double counting


def _warnings(logs: list[dict[str, Any]], endpoint: str) -> set[str]:
    return {e["event"] for e in logs if e.get("log_level") == "warning" and e.get("endpoint") == endpoint}


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_a_dead_or_silent_collector_never_holds_up_a_turn(
    tmp_path: Path, blackhole: str, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns run on the daemon's event loop; every export attempt and every span build is recorded
    with its thread, and none may be the loop's (which is what "never holds up a turn" means, with
    no stopwatch). The stop returning at all, with a failure or abandon warning logged for a
    collector that never answers, shows it is bounded (``LiveExporter.close``'s deadline)."""
    threads: list[tuple[str, int]] = []

    def recorded(cls: type, name: str) -> None:
        inner = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            threads.append((f"{cls.__name__}.{name}", threading.get_ident()))
            return inner(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    recorded(live.OtlpJsonExporter, "export")
    recorded(live._Reporting, "export")
    recorded(live.LiveExporter, "queue_turn")
    refused_url = closed_port_url() + "/v1/traces"
    with capture_logs() as logs:
        refused = _run(tmp_path / "refused", refused_url, protocol=protocol, timeout_s=3.0, flush=False)
        silent = _run(tmp_path / "silent", blackhole, protocol=protocol, timeout_s=3.0, flush=False)
    for run in (refused, silent):
        assert run.outcomes == ["completed", "completed"]
    assert {what for what, _ in threads} >= {"LiveExporter.queue_turn"}
    assert any(what.endswith(".export") for what, _ in threads), "an export was attempted"
    assert not [what for what, ident in threads if ident in (refused.loop_thread, silent.loop_thread)], threads
    assert "trace.live_export_failed" in _warnings(logs, refused_url)
    assert _warnings(logs, blackhole) & {"trace.live_export_failed", "trace.live_export_abandoned"}


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("127.0.0.1:4318/v1/traces", "http:// or https:// URL"),
        ("ftp://collector/v1/traces", "http:// or https:// URL"),
        ("http:///v1/traces", "with a host"),
        ("http://127.0.0.1:99999/v1/traces", "not a valid URL"),
        ("http://local host:4318/", "http:// or https:// URL"),
    ],
)
def test_a_bad_endpoint_is_refused_when_the_config_loads(tmp_path: Path, endpoint: str, problem: str) -> None:
    home = resolve_home(str(tmp_path / "home"))
    home.root.mkdir(parents=True)
    home.config.write_text(f'[trace]\notlp_endpoint = "{endpoint}"\n')
    with pytest.raises(ConfigError, match=r"trace\.otlp_endpoint") as err:
        load_settings(home)
    assert problem in str(err.value)
    home.config.write_text(
        '[trace]\notlp_endpoint = "https://collector.example:4318/v1/traces"\notlp_protocol = "http/protobuf"\n'
    )
    assert load_settings(home).trace.otlp_protocol == "http/protobuf"
    home.config.write_text('[trace]\notlp_protocol = "grpc"\n')
    with pytest.raises(ConfigError, match=r"trace\.otlp_protocol"):
        load_settings(home)


def test_an_exporter_that_cannot_start_costs_a_warning_not_the_daemon(
    tmp_path: Path, collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOLON_TEST_OTLP_HEADERS", "authorizätion=Bearer x")  # not a valid HTTP header name
    home = resolve_home(str(tmp_path / "home"))
    base = load_settings(home)
    trace = base.trace.model_copy(update={"otlp_endpoint": collector, "otlp_headers_env": "HOLON_TEST_OTLP_HEADERS"})
    with Store.open(home, base.model_copy(update={"trace": trace}), clock=FakeClock()) as store:
        create_agent(store, "ada")
        provider = ScriptedProvider([reply("done")])

        async def go() -> None:
            daemon = Daemon(store, resolver=lambda a: (provider, SCRIPTED), poll_s=0.01)
            assert daemon.tracer is None
            async with daemon.running(grace_s=1):
                daemon.submit(
                    "ada", "hi", origin="operator:test", authority="operator", sender="operator", channel="test"
                )
                await daemon.until_idle()

        with capture_logs() as logs:
            asyncio.run(go())
        assert [e.payload.outcome for e in store.ledger.read(0) if e.type == "turn.settled"] == ["completed"]
    assert "trace.live_export_disabled" in _warnings(logs, collector)
    assert _Collector.bodies == []


# --- turns settled outside the daemon's own path: `holon run`, crash recovery ---------------------


def _roots(bodies: list[tuple[str, bytes]]) -> dict[str, dict[str, Any]]:
    """Root (AGENT) spans received, by the turn id they carry."""
    return {s["attrs"]["holon.turn_id"]: s for s in _json_spans(bodies) if not s["parent"]}


def _log_events(home: Path) -> list[dict[str, Any]]:
    log_file = home / "logs" / "holon.log"
    lines = log_file.read_text(encoding="utf-8").splitlines() if log_file.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.slow
def test_holon_run_pushes_the_turn_it_settled(tmp_path: Path, collector: str) -> None:
    with FakeLLM(
        [{"tool_calls": [{"name": "memory_search", "arguments": {"query": "notes"}}]}, {"content": "Done."}]
    ) as fake:
        home = quick_home(tmp_path, "ada", model="openai/fake", api_base=fake.url)
        r = holon(home, "run", "ada", "Look at my notes.", "--json", env=cli_env(HOLON_TRACE_OTLP_ENDPOINT=collector))
    assert r.code == 0, r
    turn_id = r.json()["turn_id"]
    spans = _json_spans(_Collector.bodies)  # sent before the CLI exited: nothing is waited for here
    [root] = [s for s in spans if not s["parent"]]
    assert root["attrs"]["holon.turn_id"] == turn_id and root["attrs"]["holon.outcome"] == "completed"
    assert root["name"] == "agent ada turn"
    names = sorted(s["name"] for s in spans if s["trace"] == root["trace"])
    assert "tool memory_search" in names and sum(n.startswith("llm ") for n in names) == 2
    assert all(s["trace"] == root["trace"] for s in spans)


@pytest.mark.slow
def test_holon_run_with_a_dead_or_silent_endpoint_exits_within_its_timeout(tmp_path: Path, blackhole: str) -> None:
    timeout_s = 2.0
    refused_url = closed_port_url() + "/v1/traces"
    with FakeLLM(lambda body: {"content": "Done."}) as fake:
        for name, endpoint in (("refused", refused_url), ("silent", blackhole)):
            home = quick_home(tmp_path / name, "ada", model="openai/fake", api_base=fake.url)
            env = cli_env(HOLON_TRACE_OTLP_ENDPOINT=endpoint, HOLON_TRACE_TIMEOUT_S=str(timeout_s))
            r = holon(home, "run", "ada", "hi", "--json", env=env)  # the default deadline: 180 s
            assert r.code == 0 and r.json()["outcome"] == "completed", r  # stdout is the JSON alone
            warned = {
                e["event"] for e in _log_events(home) if e.get("level") == "warning" and e.get("endpoint") == endpoint
            }
            assert warned & {"trace.live_export_failed", "trace.live_export_abandoned"}, (name, _log_events(home))
    # A refused connection fails at once; a silent endpoint costs its timeout plus the one second
    # `close` allows, never a hang: `holon()`'s deadline says so (no stopwatch asserts).


@pytest.mark.slow
def test_a_turn_settled_by_recovery_at_daemon_start_is_pushed(tmp_path: Path, collector: str) -> None:
    calls = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        return {"content": "Stuck.", "delay": 60} if len(calls) == 1 else {"content": "Done."}

    with FakeLLM(script) as fake:
        home = quick_home(tmp_path, "ada", model="openai/fake", api_base=fake.url)
        submit(home, "ada", "hello")
        proc = spawn_holon(home, "serve", "--no-http")  # no endpoint: this daemon pushes nothing
        wait_for("a model call in flight", lambda: calls, proc=proc, timeout=90)
        kill_hard(proc)
        [(_, _, _, started)] = payloads(home, "turn.started")
        assert not payloads(home, "turn.settled")

        proc = spawn_holon(home, "serve", "--no-http", env=cli_env(HOLON_TRACE_OTLP_ENDPOINT=collector))
        try:
            wait_for(
                "the re-queued input answered", lambda: all_settled(home) and len(calls) == 2, proc=proc, timeout=90
            )
            wait_for("both turns pushed", lambda: len(_roots(_Collector.bodies)) == 2, proc=proc, timeout=30)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    outcomes = {p["turn_id"]: p["outcome"] for *_, p in payloads(home, "turn.settled")}
    assert outcomes[started["turn_id"]] == "interrupted"
    roots = _roots(_Collector.bodies)
    assert {t: r["attrs"]["holon.outcome"] for t, r in roots.items()} == outcomes
    interrupted = roots[started["turn_id"]]
    # The model call the kill cut short is there too, marked unfinished.
    [cut] = [
        s for s in _json_spans(_Collector.bodies) if s["trace"] == interrupted["trace"] and s["name"].startswith("llm ")
    ]
    assert cut["attrs"]["holon.unfinished"] is True
