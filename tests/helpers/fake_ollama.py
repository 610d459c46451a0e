"""A loopback server that speaks the parts of Ollama's API litellm uses (stdlib only).

litellm sends ``ollama_chat/<model>`` to ``POST /api/chat`` (messages and native tool schemas in,
``message.content`` / ``message.tool_calls`` out) and ``ollama/<model>`` to ``POST
/api/generate`` (one prompt string in, ``response`` out); streamed replies are NDJSON lines ending
with ``"done": true``. ``POST /api/show`` answers model info (litellm asks it for context windows)
and ``GET /api/tags`` lists the model.

``FakeOllama(script)``: each chat/generate request takes the next step, ``{"content": "text"}`` or
``{"tool_calls": [{"name": "t", "arguments": {...}}]}``; when the script runs out the answer is
``"(script exhausted)"``. Request bodies (and paths) are kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOllama"]

_CREATED = "2026-11-25T00:00:00Z"


class FakeOllama:
    def __init__(self, script: list[dict[str, Any]] | None = None, *, model: str = "llama3.2") -> None:
        self.script = list(script or [])
        self.model = model
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-ollama", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOllama:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def take(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append((path, body))
            return self.script.pop(0) if self.script else {"content": "(script exhausted)"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOllama
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, payload: object, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _ndjson(self, lines: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/api/tags":
            self._json({"models": [{"name": f"{self.fake.model}:latest", "model": f"{self.fake.model}:latest"}]})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/api/show":
            self._json({"template": "{{ if .Tools }}tools{{ end }}", "model_info": {"llama.context_length": 8192}})
        elif path == "/api/chat":
            self._chat(body, self.fake.take(path, body))
        elif path == "/api/generate":
            self._generate(body, self.fake.take(path, body))
        else:
            self._json({"error": f"unknown path {path}"}, 404)

    def _chat(self, body: dict[str, Any], step: dict[str, Any]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content") or ""}
        if step.get("tool_calls"):
            message["tool_calls"] = [
                {"function": {"name": c["name"], "arguments": c.get("arguments", {})}} for c in step["tool_calls"]
            ]
        done = {
            "model": body.get("model"), "created_at": _CREATED, "done": True, "done_reason": "stop",
            "prompt_eval_count": 12, "eval_count": 5,
        }  # fmt: skip
        if not body.get("stream"):
            self._json({**done, "message": message})
            return
        lines = []
        text = message["content"]
        for piece in [text[: len(text) // 2], text[len(text) // 2 :]] if text else []:
            lines.append({"model": body.get("model"), "created_at": _CREATED, "done": False,
                          "message": {"role": "assistant", "content": piece}})  # fmt: skip
        if "tool_calls" in message:
            lines.append({"model": body.get("model"), "created_at": _CREATED, "done": False,
                          "message": {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]}})  # fmt: skip
        lines.append({**done, "message": {"role": "assistant", "content": ""}})
        self._ndjson(lines)

    def _generate(self, body: dict[str, Any], step: dict[str, Any]) -> None:
        text = step.get("content") or ""
        if step.get("tool_calls"):  # what litellm reads as a call when it asked for format=json
            call = step["tool_calls"][0]
            text = json.dumps({"name": call["name"], "arguments": call.get("arguments", {})})
        done = {"model": body.get("model"), "created_at": _CREATED, "done": True, "done_reason": "stop",
                "prompt_eval_count": 12, "eval_count": 5}  # fmt: skip
        if not body.get("stream"):
            self._json({**done, "response": text})
            return
        half = len(text) // 2
        self._ndjson(
            [
                {"model": body.get("model"), "created_at": _CREATED, "done": False, "response": text[:half]},
                {"model": body.get("model"), "created_at": _CREATED, "done": False, "response": text[half:]},
                {**done, "response": ""},
            ]
        )
