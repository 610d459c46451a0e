"""A model server that never answers but keeps every connection alive, on 127.0.0.1.

``POST /v1/chat/completions`` gets ``200`` and headers at once, then, until the client hangs up or
the server stops: for a streamed request an SSE comment (``: ping``) every ``interval`` seconds,
as proxies and some providers send to keep a quiet stream open; otherwise a space every
``interval`` seconds inside a JSON body that never ends. Neither ever lets a per-read timeout fire:
only a wall-clock deadline on the whole call ends it.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.requests.append(body)
        stream = bool(body.get("stream"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        piece = b": ping\n\n" if stream else b" "
        first = b"" if stream else b'{"id": "never", '
        try:
            if first:
                self._chunk(first)
            while not self.server.stopping.wait(self.server.interval):
                self._chunk(piece)
        except OSError:
            return  # the client hung up: what a deadline does

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, interval: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.interval = interval
        self.stopping = threading.Event()
        self.requests: list[dict[str, object]] = []


class PingLLM:
    """``with PingLLM() as server:`` point a model's ``api_base`` at ``server.url``."""

    def __init__(self, interval: float = 0.05) -> None:
        self._server = _Server(interval)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, object]]:
        return list(self._server.requests)

    def __enter__(self) -> PingLLM:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
