"""Live OTLP export from the daemon: a collector on 127.0.0.1 receives every settled turn's spans;
with the collector down, turns still settle and a warning is logged."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from helpers.runtime import SCRIPTED, closed_port_url
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.daemon import Daemon
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_calls


class _Collector(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append((self.headers.get("Content-Type", ""), self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


def _run(tmp_path: Path, endpoint: str) -> list[Any]:
    home = resolve_home(str(tmp_path / "home"))
    base = load_settings(home)
    settings = base.model_copy(
        update={"trace": base.trace.model_copy(update={"otlp_endpoint": endpoint, "timeout_s": 1.0})}
    )
    clock = FakeClock()
    with Store.open(home, settings, clock=clock) as store:
        create_agent(store, "ada")
        provider = ScriptedProvider([tool_calls(("memory_search", {"query": "notes"})), reply("done"), reply("again")])

        async def go() -> list[Any]:
            daemon = Daemon(store, resolver=lambda a: (provider, SCRIPTED), clock=clock, poll_s=0.01)
            async with daemon.running(grace_s=1):
                for text in ("first", "second"):
                    daemon.submit(
                        "ada", text, origin="operator:test", authority="operator", sender="operator", channel="test"
                    )
                    await daemon.until_idle()
                assert daemon.tracer is not None
                await asyncio.to_thread(daemon.tracer.flush, 5.0)
            return [e.payload for e in store.ledger.read(0) if e.type == "turn.settled"]

        return asyncio.run(go())


def test_spans_of_every_settled_turn_reach_a_collector(tmp_path: Path) -> None:
    _Collector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settled = _run(tmp_path, f"http://127.0.0.1:{server.server_port}/v1/traces")
    finally:
        server.shutdown()
    assert [p.outcome for p in settled] == ["completed", "completed"]
    spans = []
    for content_type, body in _Collector.bodies:
        assert content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            service = {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"]
            assert service == "holon"
            for ss in rs.scope_spans:
                assert ss.scope.name == "holon.trace"
                spans += list(ss.spans)
    names = sorted(s.name for s in spans)
    assert names.count("agent ada turn") == 2 and "tool memory_search" in names
    llm = [s for s in spans if s.name.startswith("llm ")]
    attrs = {a.key for a in llm[0].attributes}
    assert {
        "openinference.span.kind",
        "gen_ai.request.model",
        "gen_ai.usage.input_tokens",
        "llm.token_count.prompt",
    } <= attrs
    roots = [s for s in spans if not s.parent_span_id]
    assert len({s.trace_id for s in roots}) == 2
    assert all(s.parent_span_id in {r.span_id for r in roots} for s in spans if s.parent_span_id)


def test_a_dead_collector_never_holds_up_a_turn(tmp_path: Path, capsys: Any) -> None:
    settled = _run(tmp_path, closed_port_url() + "/traces")
    assert [p.outcome for p in settled] == ["completed", "completed"]
