"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

``FakeLLM(script)`` answers each ``POST /v1/chat/completions`` with the next step of its script,
so tests drive litellm's real HTTP path (JSON, SSE streaming, status codes, dropped connections)
without the internet. ``GET /v1/models`` answers a model list, as a health check.

``POST /v1/embeddings`` is not scripted: it answers every input (a string or a list of strings)
with a deterministic vector, ``fake_embedding(text)`` (a hashed bag of words, ``EMBEDDING_DIM``
floats, unit length) or ``FakeLLM(embed=...)``'s, as floats or, when ``encoding_format`` is
``base64`` (the openai SDK's default), as base64 little-endian float32. Its request bodies are
in ``embedding_requests``, apart from the chat ``requests``.

A step is a dict; every key but one of the first four is optional::

    {"content": "text"}                          a plain reply ("content" may be a list of fragments)
    {"tool_calls": [{"name": "t", "arguments": {...} or "raw string", "id": optional}],
     "content": optional}                        a reply calling tools
    {"error": 429, "message": "...", "retry_after": 2}
                                                 an OpenAI-style error body with that status
    {"context_overflow": true}                   a 400 whose message litellm maps to
                                                 ContextWindowExceededError
    {"drop": true}                               close the connection without answering
    "delay": seconds                             sleep before answering (any step)
    "chunk_delay": seconds                       sleep between streamed chunks
    "finish_reason": "length"                    override the finish reason
    "usage": {...}                               override usage fields, e.g.
                                                 {"prompt_tokens_details": {"cached_tokens": 3}}

The script is a list (consumed one step per request) or a callable ``(request_body) -> step``.
When a list runs out the server answers ``{"content": "(script exhausted)"}``, or a 500 when
constructed with ``strict=True``. Streaming replies (``"stream": true``) are SSE over chunked
transfer encoding: ``data: {...}`` chunks, tool-call arguments split across chunks, a usage chunk
when ``stream_options.include_usage`` is set, then ``data: [DONE]``.

Run it as a process for subprocess tests; it prints its URL on the first line of stdout and
serves until killed::

    python -m holon.testing.fake_llm --script FILE.json [--port N] [--strict] [--requests-log FILE]

This module is stdlib only and imports nothing else from holon.
"""

from __future__ import annotations

import argparse
import array
import base64
import contextlib
import hashlib
import json
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

__all__ = [
    "CONTEXT_OVERFLOW_MESSAGE",
    "EMBEDDING_DIM",
    "EXHAUSTED_TEXT",
    "FakeLLM",
    "Script",
    "Step",
    "fake_embedding",
    "main",
]

# Steps and request bodies are free-form JSON objects, hence Any.
Step = dict[str, Any]
Script = Sequence[Step] | Callable[[dict[str, Any]], Step]

EXHAUSTED_TEXT = "(script exhausted)"
#: OpenAI's wording; litellm recognises "maximum context length" in a 400 as a context overflow.
CONTEXT_OVERFLOW_MESSAGE = (
    "This model's maximum context length is 2048 tokens. However, your messages resulted in 4097 tokens. "
    "Please reduce the length of the messages."
)

#: Length of ``fake_embedding`` vectors.
EMBEDDING_DIM = 32


def fake_embedding(text: str) -> list[float]:
    """A deterministic unit vector for ``text``: each lower-cased word adds 1 to a hashed dimension."""
    vec = [0.0] * EMBEDDING_DIM
    for word in re.findall(r"\w+", text.lower()):
        vec[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % EMBEDDING_DIM] += 1.0
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else [0.0] * (EMBEDDING_DIM - 1) + [1.0]


_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", None),
    404: ("The model does not exist.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
    503: ("The engine is currently overloaded.", "server_error", None),
}


class FakeLLM:
    """A scripted chat-completions server. Use as a context manager or ``start()``/``stop()``.

    Thread-safe: requests may arrive concurrently; each takes the next step under a lock.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        strict: bool = False,
        port: int = 0,
        model_id: str = "fake",
        embed: Callable[[str], list[float]] = fake_embedding,
    ) -> None:
        self._lock = threading.Lock()
        self.embed = embed
        self._embedding_requests: list[dict[str, Any]] = []
        self._callable: Callable[[dict[str, Any]], Step] | None = script if callable(script) else None
        self._steps: list[Step] = [] if callable(script) else [dict(s) for s in script]
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._stopping = threading.Event()
        self.strict = strict
        self.model_id = model_id
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeLLM:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", self._port), _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes handlers sleeping in a "delay"
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- inspection --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeLLM is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The ``api_base`` to give a client: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received by ``/chat/completions``, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of each chat-completions request (names lower-cased), parallel to ``requests``."""
        with self._lock:
            return list(self._headers)

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received by ``/embeddings``, in arrival order (a copy)."""
        with self._lock:
            return list(self._embedding_requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps)

    def add(self, *steps: Step) -> None:
        """Append steps to a list script (while running, too)."""
        with self._lock:
            self._steps.extend(dict(s) for s in steps)

    # -- internals used by the handler -------------------------------------------------------

    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Step]:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            n = len(self._requests)
            if self._callable is not None:
                return n, dict(self._callable(body))
            if self._steps:
                return n, self._steps.pop(0)
        if self.strict:
            return n, {"error": 500, "message": "script exhausted"}
        return n, {"content": EXHAUSTED_TEXT}

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the default listen backlog (5) resets bursts of concurrent connects

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], fake: FakeLLM) -> None:
        self.fake = fake
        super().__init__(address, handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that timed out or hung up is normal here; anything else is a bug worth seeing.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]  # passed through as the server gave them


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # without it every request costs ~44 ms (delayed ACK)
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            model = {"id": self.server.fake.model_id, "object": "model", "created": 0, "owned_by": "holon"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_error_json(404, f"no route GET {self.path}", "invalid_request_error", None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = self.path.rstrip("/")
        if not route.endswith(("/chat/completions", "/embeddings")):
            self._send_error_json(404, f"no route POST {self.path}", "invalid_request_error", None)
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as e:
            self._send_error_json(400, f"invalid JSON body: {e}", "invalid_request_error", None)
            return
        fake = self.server.fake
        if route.endswith("/embeddings"):
            self._embeddings(body)
            return
        n, step = fake._take(body, {k.lower(): v for k, v in self.headers.items()})
        fake._sleep(float(step.get("delay", 0)))
        if fake._stopping.is_set():
            self.close_connection = True
            return
        self._answer(n, step, body)

    def _embeddings(self, body: dict[str, Any]) -> None:
        fake = self.server.fake
        with fake._lock:
            fake._embedding_requests.append(body)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self._send_error_json(
                400, "'input' must be a string or a non-empty list of strings", "invalid_request_error", None
            )
            return
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vec = [float(x) for x in fake.embed(text)]
            value: object = base64.b64encode(array.array("f", vec).tobytes()).decode() if as_base64 else vec
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(_estimate_tokens(t) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "fake"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _answer(self, n: int, step: Step, body: dict[str, Any]) -> None:
        if step.get("drop"):
            self.close_connection = True  # the server closes the socket; no status line was sent
            return
        if step.get("context_overflow"):
            self._send_error_json(400, CONTEXT_OVERFLOW_MESSAGE, "invalid_request_error", "context_length_exceeded")
            return
        if "error" in step:
            status = int(step["error"])
            message, etype, code = _DEFAULT_ERRORS.get(status, (f"HTTP {status}", "server_error", None))
            extra = {"Retry-After": str(step["retry_after"])} if step.get("retry_after") is not None else {}
            self._send_error_json(
                status, str(step.get("message", message)), step.get("type", etype), step.get("code", code), extra
            )
            return
        reply = _Reply.from_step(n, step, body)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(reply.chunks(include_usage), float(step.get("chunk_delay", 0)))
        else:
            self._send_json(200, reply.completion())

    # -- writing -------------------------------------------------------------------------------

    def _send_json(self, status: int, payload: object, extra_headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error_json(
        self, status: int, message: str, etype: str, code: str | None, extra: dict[str, str] | None = None
    ) -> None:
        self._send_json(status, {"error": {"message": message, "type": etype, "param": None, "code": code}}, extra)

    def _send_stream(self, chunks: Iterator[dict[str, Any]], chunk_delay: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self._write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self.server.fake._sleep(chunk_delay)
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Reply:
    """One scripted assistant reply, rendered as a completion or as stream chunks."""

    def __init__(
        self, n: int, model: str, fragments: list[str], calls: list[dict[str, str]], finish: str, usage: dict[str, Any]
    ) -> None:
        self.id = f"chatcmpl-fake-{n}"
        self.model = model
        self.fragments = fragments
        self.calls = calls
        self.finish = finish
        self.usage = usage
        self.created = int(time.time())

    @classmethod
    def from_step(cls, n: int, step: Step, body: dict[str, Any]) -> _Reply:
        content = step.get("content", "")
        fragments = [str(c) for c in content] if isinstance(content, list) else _split_text(str(content or ""))
        calls = []
        for i, tc in enumerate(step.get("tool_calls") or []):
            args = tc.get("arguments", {})
            calls.append(
                {
                    "id": str(tc.get("id") or f"call_{n}_{i}"),
                    "name": str(tc["name"]),
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                }
            )
        finish = str(step.get("finish_reason") or ("tool_calls" if calls else "stop"))
        produced = "".join(fragments) + "".join(c["name"] + c["arguments"] for c in calls)
        prompt = _estimate_tokens(json.dumps(body.get("messages", [])))
        completion = _estimate_tokens(produced)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        usage.update(step.get("usage") or {})
        return cls(n, str(body.get("model") or "fake"), fragments, calls, finish, usage)

    def _tool_calls(self) -> list[dict[str, Any]]:
        return [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in self.calls
        ]

    def completion(self) -> dict[str, Any]:
        text = "".join(self.fragments)
        message: dict[str, Any] = {"role": "assistant", "content": text if (text or not self.calls) else None}
        if self.calls:
            message["tool_calls"] = self._tool_calls()
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "usage": self.usage,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def chunks(self, include_usage: bool) -> Iterator[dict[str, Any]]:
        yield self._chunk({"role": "assistant", "content": ""})
        for fragment in self.fragments:
            yield self._chunk({"content": fragment})
        for i, c in enumerate(self.calls):
            head = {"index": i, "id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": ""}}
            yield self._chunk({"tool_calls": [head]})
            for piece in _split_args(c["arguments"]):
                yield self._chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        yield self._chunk({}, self.finish)
        if include_usage:
            yield {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.usage,
            }


def _split_text(text: str) -> list[str]:
    """Word-sized fragments that join back to ``text`` exactly."""
    return re.findall(r"\s+|\S+\s*", text)


def _split_args(arguments: str, parts: int = 3) -> list[str]:
    """Split tool arguments into up to ``parts`` pieces, as real servers do mid-token."""
    if not arguments:
        return []
    size = max(1, math.ceil(len(arguments) / parts))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


# -- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m holon.testing.fake_llm", description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, help="JSON file: a list of steps")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--strict", action="store_true", help="answer 500 once the script runs out")
    parser.add_argument("--requests-log", type=Path, help="append each request body as a JSON line")
    args = parser.parse_args(argv)

    steps: list[Step] = json.loads(args.script.read_text()) if args.script else []
    if not isinstance(steps, list):
        parser.error("--script must hold a JSON list of steps")
    script: Script = steps
    if args.requests_log:
        log_path: Path = args.requests_log
        queue = list(steps)
        lock = threading.Lock()

        def logged(body: dict[str, Any]) -> Step:
            with lock, log_path.open("a") as f:
                f.write(json.dumps(body) + "\n")
                if queue:
                    return queue.pop(0)
            return {"error": 500, "message": "script exhausted"} if args.strict else {"content": EXHAUSTED_TEXT}

        script = logged

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    with FakeLLM(script, strict=args.strict, port=args.port) as fake:
        print(fake.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
