"""A small but real ``DaemonPort`` for API tests: a ``Store`` and an ``AgentHost`` with scripted models.

It does what the daemon does for the API, minus schedules and process management: inputs are
appended (durable) and wake the host, turns run with a ``ScriptedProvider``, and every new ledger
event and every generated fragment is published to subscribers as a ``Notice``. Pause is a host
gate, delete removes the agent's home and hides it (a real daemon records ``agent.deleted``).

``ApiServer`` runs the app with uvicorn on 127.0.0.1 in a background thread with its own event
loop; the port lives on that loop, as it does in the daemon. Tests talk to it with httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from helpers.runtime import FAST_RETRY, SCRIPTED, SleepRecorder
from holon.api.app import create_app
from holon.api.port import AgentStatus, Notice
from holon.api.server import build_server, free_port
from holon.clock import Clock
from holon.config import load_settings
from holon.errors import NotFoundError, UsageError
from holon.ledger import Event
from holon.ledger.events import Authority
from holon.paths import resolve_home
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import configure_agent, create_agent
from holon.runtime.host import AgentHost
from holon.runtime.providers.base import ModelReply, ModelRequest, TextSink
from holon.runtime.providers.scripted import ScriptedProvider, reply
from holon.runtime.turn import TurnObserver

__all__ = ["ApiServer", "TestPort", "echo_provider"]


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


class _Deltas(TurnObserver):
    def __init__(self, port: TestPort) -> None:
        self.port = port

    def on_text(self, agent_id: str, fragment: str) -> None:
        self.port.publish(Notice(kind="delta", agent_id=agent_id, text=fragment))


class TestPort:
    """``DaemonPort`` over a store and a host; all methods run on the host's event loop."""

    def __init__(self, store: Store, *, clock: Clock, provider: ScriptedProvider | None = None) -> None:
        self.store = store
        self.provider = provider or echo_provider()
        self.paused: set[str] = set()
        self.deleted: set[str] = set()
        self.tokens: dict[str, str] = {}
        self._subscribers: list[tuple[str | None, asyncio.Queue[Notice]]] = []
        self._published = store.ledger.head()
        self.host = AgentHost(
            store,
            lambda agent: (self.provider, SCRIPTED),
            clock=clock,
            retry=FAST_RETRY,
            sleep=SleepRecorder(),
            observer=_Deltas(self),
            gate=lambda agent_id: agent_id not in self.paused,
        )
        self._watcher: asyncio.Task[None] | None = None

    # --- lifecycle (on the loop) ------------------------------------------------------------

    async def start(self) -> None:
        self.host.start()
        self._watcher = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await self.host.close()

    async def _watch(self) -> None:
        while True:
            self.publish_new()
            await asyncio.sleep(0.02)

    def publish_new(self) -> None:
        for event in self.store.ledger.read(self._published):
            self._published = event.seq
            self.publish(Notice(kind="event", agent_id=event.agent_id, seq=event.seq))

    def publish(self, notice: Notice) -> None:
        for agent_id, queue in self._subscribers:
            if agent_id is None or agent_id == notice.agent_id:
                queue.put_nowait(notice)

    async def subscribe(self, agent_id: str | None = None) -> AsyncIterator[Notice]:
        queue: asyncio.Queue[Notice] = asyncio.Queue()
        entry = (agent_id, queue)
        self._subscribers.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(entry)

    # --- the port ---------------------------------------------------------------------------

    def _agent(self, ref: str) -> AgentState:
        agent = self.store.agent(ref)
        if agent.agent_id in self.deleted:
            raise NotFoundError(f"no agent named {ref!r}")
        return agent

    def submit(self, agent: str, text: str, *, origin: str, authority: Authority, sender: str, channel: str) -> Event:
        a = self._agent(agent)
        event = self.host.submit(a.agent_id, text, origin=origin, authority=authority, sender=sender, channel=channel)
        self.host.schedule(a.agent_id)
        return event

    def create_agent(
        self,
        name: str,
        *,
        template: str = "assistant",
        workspace: str | None = None,
        schedule: str | None = None,
        prompt: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> AgentState:
        if schedule is not None:
            raise UsageError("schedules need the daemon")
        return create_agent(self.store, name, template=template, workspace=workspace, settings=settings)

    def configure_agent(self, agent: str, changes: dict[str, Any], *, unset: list[str] | None = None) -> AgentState:
        return configure_agent(self.store, self._agent(agent).agent_id, changes, unset=unset or [])

    def pause(self, agent: str) -> AgentState:
        a = self._agent(agent)
        self.paused.add(a.agent_id)
        return a

    def resume(self, agent: str) -> AgentState:
        a = self._agent(agent)
        self.paused.discard(a.agent_id)
        if a.pending_inputs:
            self.host.schedule(a.agent_id)
        return a

    def delete(self, agent: str) -> None:
        a = self._agent(agent)
        self.deleted.add(a.agent_id)
        self.tokens.pop(a.agent_id, None)
        shutil.rmtree(a.home, ignore_errors=True)

    def abort(self, agent: str) -> bool:
        run = self.host.active_run(self._agent(agent).agent_id)
        if run is None:
            return False
        run.cancel()
        return True

    def status(self) -> dict[str, Any]:
        agents = [a for a in self.store.agents() if a.agent_id not in self.deleted]
        return {
            "head_seq": self.store.ledger.head(),
            "agents": [
                AgentStatus(a.agent_id, a.name, "paused" if a.agent_id in self.paused else "idle") for a in agents
            ],
        }

    def external_token(self, agent: str) -> str:
        a = self._agent(agent)
        return self.tokens.setdefault(a.agent_id, secrets.token_urlsafe(24))

    def agent_for_token(self, token: str) -> AgentState | None:
        for agent_id, known in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode("utf-8", "surrogateescape")):
                return self.store.agent(agent_id)
        return None


class ApiServer:
    """The API of a ``TestPort`` served by uvicorn on 127.0.0.1 from a background thread."""

    def __init__(self, home: Path, *, token: str | None = None, max_body_bytes: int = 1_000_000, clock: Clock) -> None:
        self.home = home
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self.port_number = free_port()
        self.url = f"http://127.0.0.1:{self.port_number}"
        self.loop = asyncio.new_event_loop()
        self.port: TestPort | None = None
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
        self.port = TestPort(store, clock=self.clock)
        await self.port.start()
        app = create_app(self.port, token=self.token, max_body_bytes=self.max_body_bytes)
        self._server = build_server(app, host="127.0.0.1", port=self.port_number, token=self.token)
        serving = asyncio.create_task(self._server.serve())
        while not self._server.started and not serving.done():
            await asyncio.sleep(0.01)
        self._ready.set()
        try:
            await serving
        finally:
            await self.port.stop()
            store.close()

    def start(self) -> ApiServer:
        self._thread.start()
        if not self._ready.wait(20) or self._error is not None:
            raise RuntimeError(f"API server did not start: {self._error!r}")
        return self

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
            return any(a.pending_inputs or port.host.is_running(a.agent_id) for a in port.store.agents())

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
