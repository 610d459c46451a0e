"""Model calls in a process of their own: ``ProcessProvider`` and the worker it runs.

The daemon runs every agent's turns on one asyncio loop. Measured (``holon bench daemon``), about
half of a turn's CPU is litellm building the request, parsing the streamed reply and pricing it,
all under the GIL; a thread would not help. ``ProcessProvider`` is a ``Provider`` that hands each
call to a child process (``python -m holon.runtime.providers.model_process``) running
``LiteLLMProvider`` on its own loop, so that work runs on another core while the daemon's loop
assembles prompts, appends to the ledger and serves the API.

Protocol: JSON lines over the child's stdin and stdout.

* parent -> child: ``{"op": "complete", "id", "request": {messages, tools, settings}, "api_key",
  "stream"}``, ``{"op": "window", "id", "model"}`` (the model's input window: the parent never
  imports litellm), ``{"op": "cancel", "id"}``. The API key is looked up by the parent (the same
  ``api_key_for`` as in-process) and travels over the pipe only; it never reaches a log or the ledger.
* child -> parent: ``{"ready": true}`` once, when litellm is imported and the child takes calls;
  ``{"id", "delta": text}`` while a streamed reply arrives, then ``{"id", "reply": {...}}`` or
  ``{"id", "error": {"message", "kind", "status", "retry_after_s"}}``; ``{"id", "window": n | null}``.

Cold start: importing litellm costs seconds (more on a busy machine), so the daemon ``warm()``s a
child when it starts rather than on the first call, and a call that still has to wait for a child
to become ready says how long in ``ModelReply.start_ms``; the turn records that wait as its own
``model.started`` event, so model latency in traces never includes a start-up. ``on_state(what,
state)`` hears ``starting``/``ready``/``failed`` for the daemon's live notices.

Failure semantics match the in-process provider: errors are ``ModelError`` with the kind the child
classified. If the child dies, every call in flight fails with a retryable ``server`` error and
the next call starts a new child. A cancelled call (an aborted turn) is cancelled in the child too.
The child exits when its stdin closes: when the parent closes it, after ``idle_s`` with no call
(``0``: never; the default since a warm child is what makes the first reply quick), and when the
parent dies, even by SIGKILL, so no model process outlives its daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from holon.errors import ModelError
from holon.ledger.events import ToolCallSpec, Usage
from holon.logs import get_logger
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, ModelWindow, TextSink
from holon.runtime.providers.litellm_provider import _litellm, api_key_for, deadline_error

__all__ = ["START_DELAY_ENV", "ProcessProvider", "StateSink", "main"]

log = get_logger("holon.model_process")

#: How much longer than a call's deadline the parent waits for the child to report it cut.
DEADLINE_GRACE_S = 5.0
#: Longest JSON line either side reads (a reply, or a request with its whole prompt).
MAX_LINE = 64 * 1024 * 1024
#: Test hook: seconds the child waits before it reports ready (a slow start, made visible).
START_DELAY_ENV = "HOLONTEST_MODEL_START_DELAY_S"
#: What ``on_state`` names this kind of child.
WHAT = "model process"

#: Hears a model child's state changes: ``(what, "starting" | "ready" | "failed")``.
StateSink = Callable[[str, str], None]


def _reply_json(reply: ModelReply) -> dict[str, Any]:
    return {
        "content": reply.content,
        "tool_calls": [c.model_dump() for c in reply.tool_calls],
        "finish_reason": reply.finish_reason,
        "usage": reply.usage.model_dump(),
        "model": reply.model,
        "cost_usd": reply.cost_usd,
        "latency_ms": reply.latency_ms,
    }


def _reply_of(data: dict[str, Any]) -> ModelReply:
    return ModelReply(
        content=data["content"],
        tool_calls=[ToolCallSpec.model_validate(c) for c in data["tool_calls"]],
        finish_reason=data["finish_reason"],
        usage=Usage.model_validate(data["usage"]),
        model=data["model"],
        cost_usd=data["cost_usd"],
        latency_ms=data["latency_ms"],
    )


def _error_of(err: dict[str, Any]) -> ModelError:
    return ModelError(
        str(err.get("message") or "model call failed"),
        kind=err.get("kind") or "unknown",
        status=err.get("status"),
        retry_after_s=err.get("retry_after_s"),
    )


class _Worker:
    """One child process and the calls in flight in it."""

    def __init__(self, idle_s: float, on_state: Callable[[str], None] | None = None) -> None:
        self.idle_s = idle_s
        self.on_state = on_state
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        self.ready: asyncio.Future[None] | None = None
        self.lock = asyncio.Lock()
        self.pending: dict[int, tuple[asyncio.Future[Any], TextSink | None]] = {}
        self.idle: asyncio.TimerHandle | None = None
        self.questions = 0

    @property
    def calls(self) -> int:
        """Model calls in flight (a question is answered at once: it does not count)."""
        return len(self.pending) - self.questions

    @property
    def alive(self) -> bool:
        return (
            self.proc is not None
            and self.proc.returncode is None
            and self.reader is not None
            and not self.reader.done()
        )

    def _state(self, state: str) -> None:
        if self.on_state is not None:
            with contextlib.suppress(Exception):  # a listener's bug must not fail a model call
                self.on_state(state)

    async def _started(self) -> tuple[asyncio.subprocess.Process, float]:
        """The ready child, and the milliseconds waited for its start (0 when it was ready)."""
        asked = time.monotonic()
        cold = not (self.alive and self.ready is not None and self.ready.done())
        proc = await self._ensure()
        return proc, (time.monotonic() - asked) * 1000 if cold else 0.0

    async def ask(self, call_id: int, message: dict[str, Any]) -> tuple[Any, float]:
        """A question that is not a model call (``window``): its answer, and the milliseconds it
        waited for the child to start."""
        proc, waited_ms = await self._started()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = (future, None)
        self.questions += 1
        try:
            self._send(proc, message)
            return await future, waited_ms
        finally:
            self.questions -= 1
            self.pending.pop(call_id, None)
            self._arm_idle(proc)

    async def call(self, call_id: int, message: dict[str, Any], on_text: TextSink | None) -> ModelReply:
        proc, waited_ms = await self._started()
        future: asyncio.Future[ModelReply] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = (future, on_text)
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        try:
            self._send(proc, message)
            reply = await future
            # Only a wait for a start counts (a ready child answers in well under a millisecond).
            return (
                dataclasses.replace(reply, start_ms=round(waited_ms, 3), start_what=WHAT) if waited_ms >= 1 else reply
            )
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self._send(proc, {"op": "cancel", "id": call_id})
            raise
        finally:
            self.pending.pop(call_id, None)
            self._arm_idle(proc)

    def _arm_idle(self, proc: asyncio.subprocess.Process) -> None:
        if self.idle_s > 0 and not self.pending and self.proc is proc and self.idle is None:
            self.idle = asyncio.get_running_loop().call_later(self.idle_s, self._stop_idle)

    async def warm(self) -> None:
        """Start the child now (if not running) and wait until it is ready; idle timing starts then."""
        proc = await self._ensure()
        self._arm_idle(proc)

    @staticmethod
    def _send(proc: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
        if proc.stdin is None or proc.stdin.is_closing():
            raise ModelError("server error: the model process is gone", kind="server")
        proc.stdin.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")

    async def _ensure(self) -> asyncio.subprocess.Process:
        """The running child, ready for calls: started (and waited for) when there is none."""
        async with self.lock:
            if self.alive and self.ready is not None and self.ready.done() and not self.ready.exception():
                assert self.proc is not None
                return self.proc
            if not self.alive:
                await self._spawn()
            assert self.proc is not None and self.ready is not None
            proc = self.proc
            try:
                await asyncio.shield(self.ready)  # a cancelled caller leaves the start to finish for the next
            except ModelError:
                self._state("failed")
                raise
            return proc

    async def _spawn(self) -> None:
        began = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "holon.runtime.providers.model_process",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=MAX_LINE,
            start_new_session=True,  # a Ctrl-C meant for the daemon must not kill calls it lets finish
        )  # fmt: skip
        self.proc = proc
        self.ready = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved" warning
        self.reader = asyncio.create_task(self._read(proc, self.ready, began), name="model-process:read")
        log.info("model_process.started", pid=proc.pid)
        self._state("starting")

    async def _read(self, proc: asyncio.subprocess.Process, ready: asyncio.Future[None], began: float) -> None:
        assert proc.stdout is not None
        try:
            while line := await proc.stdout.readline():
                msg = json.loads(line)
                if msg.get("ready"):
                    if not ready.done():
                        ready.set_result(None)
                        log.info("model_process.ready", pid=proc.pid, start_s=round(time.monotonic() - began, 3))
                        self._state("ready")
                    continue
                entry = self.pending.get(msg.get("id"))
                if entry is None or entry[0].done():
                    continue  # a call cancelled or failed here already
                future, on_text = entry
                if "delta" in msg:
                    if on_text is not None:
                        try:
                            on_text(msg["delta"])
                        except Exception as e:  # the caller's error propagates to the caller, as in-process
                            future.set_exception(e)
                            self._send(proc, {"op": "cancel", "id": msg["id"]})
                elif "reply" in msg:
                    future.set_result(_reply_of(msg["reply"]))
                elif "window" in msg:
                    future.set_result(msg["window"])
                else:
                    future.set_exception(_error_of(msg.get("error") or {}))
        except Exception as e:  # a broken line or pipe: fail what is in flight, below
            log.error("model_process.read_failed", error=str(e))
        finally:
            if self.proc is proc:  # from now on the next call starts a new process
                self.proc = None
            if not ready.done():
                ready.set_exception(ModelError("server error: the model process exited while starting", kind="server"))
            for future, _sink in list(self.pending.values()):
                if not future.done():
                    future.set_exception(ModelError("server error: the model process exited", kind="server"))
            if proc.returncode is None and proc.stdin is not None:
                proc.stdin.close()
            code = await proc.wait()
            log.info("model_process.exited", pid=proc.pid, code=code)

    def _stop_idle(self) -> None:
        self.idle = None
        if not self.pending and self.proc is not None and self.proc.stdin is not None:
            log.info("model_process.idle_exit", pid=self.proc.pid, idle_s=self.idle_s)
            self.proc.stdin.close()

    async def aclose(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        proc, reader, ready = self.proc, self.reader, self.ready
        self.proc = self.reader = None
        if proc is None:
            return
        if ready is not None and not ready.done() and proc.returncode is None:
            proc.kill()  # still importing its libraries, no call in it: nothing to wait for
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader


class ProcessProvider:
    """``Provider`` whose calls run in ``processes`` child processes (see the module docstring).

    Each call goes to the process with the fewest calls in flight (the first on a tie), so one
    process serves a quiet home and the others start only under load."""

    def __init__(
        self, *, env: Mapping[str, str] | None = None, processes: int = 2, idle_s: float = 0.0,
        on_state: StateSink | None = None,
    ) -> None:  # fmt: skip
        if processes < 1:
            raise ValueError("processes must be at least 1")
        if idle_s < 0:
            raise ValueError("idle_s must be 0 (never stop) or more")
        self._env = env
        self.on_state = on_state
        self._workers = [_Worker(idle_s, self._state) for _ in range(processes)]
        self._ids = itertools.count(1)
        self._windows: dict[str, int | None] = {}

    def _state(self, state: str) -> None:
        if self.on_state is not None:
            self.on_state(WHAT, state)

    @property
    def starting(self) -> bool:
        """A child is starting (spawned, not yet ready)."""
        return any(w.alive and w.ready is not None and not w.ready.done() for w in self._workers)

    async def warm(self) -> None:
        """Start the first child now and wait until it is ready (the daemon calls this in the
        background at start-up, so the first reply does not pay for importing litellm).
        Raises ``ModelError`` when the child dies while starting."""
        await self._workers[0].warm()

    @property
    def pids(self) -> list[int]:
        """The children running now."""
        return [w.proc.pid for w in self._workers if w.proc is not None and w.alive]

    async def context_window(self, model: str) -> ModelWindow:
        """The input window litellm's model map gives ``model``, asked of a child (this process
        never imports litellm: seconds of CPU and ~170 MiB) and kept for the provider's life;
        with the start of a child the question waited for."""
        if model in self._windows:
            return ModelWindow(self._windows[model])
        worker = min(self._workers, key=lambda w: (not w.alive, w.calls))
        call_id = next(self._ids)
        window, waited_ms = await worker.ask(call_id, {"op": "window", "id": call_id, "model": model})
        self._windows[model] = window if isinstance(window, int) and window > 0 else None
        if waited_ms < 1:  # only a wait for a start counts
            return ModelWindow(self._windows[model])
        return ModelWindow(self._windows[model], start_ms=round(waited_ms, 3), start_what=WHAT)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        api_key = api_key_for(request.settings, self._env)
        call_id = next(self._ids)
        message = {
            "op": "complete",
            "id": call_id,
            "request": {"messages": request.messages, "tools": request.tools, "settings": asdict(request.settings)},
            "api_key": api_key,
            "stream": on_text is not None,
        }
        # The least busy process; below a busy one, a running one is preferred to starting another.
        worker = min(self._workers, key=lambda w: (w.calls, not w.alive))
        # The child cuts the call at its deadline; this is the backstop for a child that cannot
        # (stuck outside its event loop): the call is cancelled there and fails here all the same.
        deadline = asyncio.timeout(request.settings.deadline_s + DEADLINE_GRACE_S)
        try:
            async with deadline:
                return await worker.call(call_id, message, on_text)
        except TimeoutError as e:
            if not deadline.expired():
                raise
            raise deadline_error(request.settings) from e

    async def aclose(self) -> None:
        """Close every child's stdin and wait for them together (each killed after 10 s)."""
        await asyncio.gather(*(worker.aclose() for worker in self._workers))


# --- the child ------------------------------------------------------------------------------------


class _Child:
    """The child's side: each request a task of its own, its answer a line on stdout."""

    def __init__(self) -> None:
        from holon.runtime.providers.litellm_provider import LiteLLMProvider

        self.out = os.fdopen(sys.stdout.fileno(), "wb", buffering=0, closefd=False)
        self.provider = LiteLLMProvider()
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")

    def take(self, msg: dict[str, Any]) -> None:
        """One line from the parent: start its task, or cancel one."""
        op, call_id = msg.get("op"), int(msg.get("id") or 0)
        if op == "complete":
            job = self.run(call_id, msg["request"], msg.get("api_key"), bool(msg["stream"]))
            self.tasks[call_id] = asyncio.create_task(job)
        elif op == "window":
            self.tasks[call_id] = asyncio.create_task(self.window(call_id, str(msg["model"])))
        elif op == "cancel" and (task := self.tasks.get(call_id)) is not None:
            task.cancel()

    async def run(self, call_id: int, body: dict[str, Any], api_key: str | None, stream: bool) -> None:
        send = self.send
        try:
            request = ModelRequest(
                messages=body["messages"], tools=body["tools"], settings=ModelSettings(**body["settings"])
            )
            sink = (lambda text: send({"id": call_id, "delta": text})) if stream else None
            reply = await self.provider.complete_with_key(request, api_key, on_text=sink)
            send({"id": call_id, "reply": _reply_json(reply)})
        except asyncio.CancelledError:
            pass
        except ModelError as e:
            error = {"message": str(e), "kind": e.kind, "status": e.status, "retry_after_s": e.retry_after_s}
            send({"id": call_id, "error": error})
        except Exception as e:  # never lose a call: the parent gets an error for it
            message = f"model process: {type(e).__name__}: {e}"[:500]
            send({"id": call_id, "error": {"message": message, "kind": "unknown"}})
        finally:
            self.tasks.pop(call_id, None)

    async def window(self, call_id: int, model: str) -> None:
        from holon.runtime.providers.litellm_provider import known_context_window

        try:
            self.send({"id": call_id, "window": await asyncio.to_thread(known_context_window, model)})
        finally:
            self.tasks.pop(call_id, None)

    async def stop(self) -> None:
        """Stdin closed: the parent is gone or done with us."""
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    child = _Child()
    await asyncio.to_thread(_litellm)  # the cost of a cold start, paid before the parent calls it ready
    if delay := float(os.environ.get(START_DELAY_ENV) or 0):
        await asyncio.sleep(delay)
    try:
        child.send({"ready": True})
    except BrokenPipeError:  # the parent died while we were starting: nobody to serve
        return
    while line := await reader.readline():
        child.take(json.loads(line))
    await child.stop()


def main() -> None:
    """Serve until stdin closes, then end at once: every reply is already written (unbuffered), and
    the interpreter's teardown of litellm's modules took 1.5-2 s of the daemon's stop per child."""
    from holon.testing.cpuprofile import install_from_env

    install_from_env("model")  # HOLON_CPU_PROFILE only
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve())
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
