"""The real daemon behind the real HTTP API, for API tests: only the model is scripted.

``ApiServer`` opens the home's ``Store``, starts a ``holon.daemon.Daemon`` whose agents answer with
``echo_provider()`` (a ``ScriptedProvider``: ``echo: <last user text>``), and serves
``create_app(daemon)`` with uvicorn on 127.0.0.1, all on one event loop in a background thread,
as ``holon serve`` does in its process. Like the daemon, it needs a token by default: the home's
``api.token`` (made on first use). Tests talk to it with ``server.client()`` (httpx, token sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from helpers.runtime import SCRIPTED, SleepRecorder
from holon.api.app import create_app
from holon.api.server import build_server, free_port
from holon.api.token import ensure_token
from holon.clock import Clock
from holon.config import load_settings
from holon.daemon import Daemon
from holon.paths import resolve_home, write_private
from holon.projections import Store
from holon.repl.client import tls_for
from holon.resources import default_config_text
from holon.runtime.providers.base import ModelReply, ModelRequest, TextSink
from holon.runtime.providers.scripted import ScriptedProvider, reply

__all__ = ["HOME_TOKEN", "ApiServer", "api_server", "echo_provider"]

HOME_TOKEN = "<the home's api.token>"
"""The default ``token``: what the daemon uses without ``[api] token_env`` (``None``: no token at all)."""


def echo_provider() -> ScriptedProvider:
    """A provider that answers every request with ``echo: <last user text>``, forever."""

    class Echo(ScriptedProvider):
        async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
            last = next((m for m in reversed(request.messages) if m.get("role") == "user"), {})
            content = last.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content)
            self.add(reply(f"echo: {str(content or '')[-200:]}"))
            return await super().complete(request, on_text=on_text)

    return Echo()


class ApiServer:
    """The API of a ``TestPort`` served by uvicorn on 127.0.0.1 from a background thread."""

    def __init__(
        self,
        home: Path,
        *,
        token: str | None = HOME_TOKEN,
        max_body_bytes: int = 1_000_000,
        allowed_hosts: tuple[str, ...] = (),
        clock: Clock,
    ) -> None:
        self.home = home
        self.token = token
        self.allowed_hosts = allowed_hosts
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.port_number = free_port()
        self.url = f"http://127.0.0.1:{self.port_number}"
        self.loop = asyncio.new_event_loop()
        self.port: Daemon | None = None
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)
        self._ready = threading.Event()
        self._server: Any = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as e:  # reported to the test thread
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        paths = resolve_home(str(self.home))
        store = Store.open(paths, load_settings(paths), clock=self.clock)
        if not paths.config.exists():  # what init writes: a home on PostgreSQL is known by it (CLI beside the API)
            write_private(paths.config, default_config_text())
        if self.token == HOME_TOKEN:
            self.token = ensure_token(paths.root)
        provider = echo_provider()
        self.port = Daemon(store, resolver=lambda agent: (provider, SCRIPTED), clock=self.clock,
                           sleep=SleepRecorder(), poll_s=0.02)  # fmt: skip
        try:
            async with self.port.running(grace_s=1):
                app = create_app(
                    self.port, token=self.token, max_body_bytes=self.max_body_bytes, allowed_hosts=self.allowed_hosts
                )
                self._server = build_server(app, host="127.0.0.1", port=self.port_number, token=self.token)
                serving = asyncio.create_task(self._server.serve())
                while not self._server.started and not serving.done():
                    await asyncio.sleep(0.01)
                self._ready.set()
                await serving
        finally:
            store.close()

    def start(self) -> ApiServer:
        self._thread.start()
        if not self._ready.wait(20) or self._error is not None:
            raise RuntimeError(f"API server did not start: {self._error!r}")
        return self

    @property
    def headers(self) -> dict[str, str]:
        """What a client of this daemon sends: its token."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for this server that sends the token (close it, or use it in ``with``)."""
        kwargs.setdefault("timeout", 10)
        kwargs.setdefault("verify", tls_for(self.url))  # plain HTTP: no CA bundle loaded per client
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(10)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop (where the store and host live) and return its result."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:
                box["error"] = e
            done.set()

        self.loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise TimeoutError("the server loop did not run the call")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until no agent has pending inputs or a running turn."""
        port = self.port
        assert port is not None

        def busy() -> bool:
            return any(
                (a.pending_inputs and not a.settings.get("paused")) or port.host.is_running(a.agent_id)
                for a in port.store.agents()
            )

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.call(busy):
                return
            time.sleep(0.02)
        raise TimeoutError("agents still busy")


@contextlib.contextmanager
def api_server(home: Path, *, clock: Clock, **kwargs: Any) -> Iterator[ApiServer]:
    server = ApiServer(home, clock=clock, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()
