"""The warm model path (RFC 0005): the model library and the model children, readied in the
background while the API is already up.

* The turn machinery (the turn runner, context assembly, the tools, the tokenizers), and the
  model library (litellm) when the daemon calls models in its own process (``[daemon]
  model_process = false``; by default only the model children import it, and they answer the
  models' windows too), are imported off the loop: imported by the first turn they would stall
  every agent and timer for seconds, and awaited at start they would keep the API (health,
  status, inputs) closed for as long. Turns wait for them (``ready``). ``holon serve`` starts the
  import once its API listens (``start(after=...)``): an import thread started earlier shares the
  GIL with the start-up and delays health by as much as it takes.
* The model children the home's agents will call start in the background: never for a home
  without agents, the local server only for agents that use it; again whenever an agent is
  created or configured (``warm``).

Only with the daemon's own resolver (``resolver`` not ``None``); a resolver given from outside
(tests) is ready at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from holon.config import DaemonSettings
from holon.daemon.wakes import Phase
from holon.projections import Store
from holon.runtime.settings import read_settings

__all__ = ["Warmth"]


class Warmth:
    def __init__(self, store: Store, *, settings: DaemonSettings, resolver: Any, phase: Phase) -> None:
        """``resolver``: the daemon's own ``ModelResolver``, or ``None``."""
        self.store = store
        self.settings = settings
        self.resolver = resolver
        self.phase = phase
        self._library: asyncio.Future[Any] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._models: asyncio.Task[None] | None = None

    def ready(self) -> bool:
        """Whether turns may start: the model library is loaded (or never needed loading)."""
        return self._library is None or self._library.done()

    async def loaded(self) -> None:
        """Return once the model library's import ended (loaded, failed or given up); at once
        without one to load."""
        if self._library is not None:
            await asyncio.wait({self._library})  # its outcome is not ours to raise; our own cancel is

    def start(self, *, after: asyncio.Event | None = None) -> None:
        """Import the turn machinery and the model library in a thread and warm the model children,
        at once or once ``after`` is set (turns wait either way)."""
        if self.resolver is None:
            return
        self._library = asyncio.get_running_loop().create_future()
        self._starting = asyncio.create_task(self._start(after), name="daemon:warm")

    async def _start(self, after: asyncio.Event | None) -> None:
        if after is not None:
            await after.wait()
        library = _in_daemon_thread(_load_turn_machinery, self._models_in_use(), not self.settings.model_process)
        library.add_done_callback(self._loaded)
        self.warm()

    def _models_in_use(self) -> tuple[str, ...]:
        """The models the home's agents talk to (read on the loop: the store is not the thread's);
        ``local`` stands for the embedded model, counted with o200k_base like any unknown name. An
        agent created later loads its tokenizer with its first turn (each is ~95 MiB for o200k_base:
        not loaded for a home that has no use for it)."""
        from holon.runtime.models import model_settings

        defaults = self.store.settings.model
        return tuple(
            sorted({getattr(model_settings(a, defaults), "model", None) or "local" for a in self.store.agents()})
        )

    def _loaded(self, library: asyncio.Future[Any]) -> None:
        if self._library is None or self._library.done():
            return
        if library.cancelled():
            self._library.cancel()
        elif (error := library.exception()) is not None:
            self._library.set_exception(error)
        else:
            self._library.set_result(library.result())

    def warm(self) -> None:
        """Start the model children the home's agents will call, unless a start is under way."""
        if self.resolver is None or not self.settings.warm_model or self.phase.draining:
            return
        if self._models is not None and not self._models.done():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # called off the loop (a thread): the next pass on the loop warms
            return
        agents = [a for a in self.store.agents() if not read_settings(a.settings).settings.diagnostic]
        if agents:
            self._models = asyncio.create_task(self.resolver.warm(agents), name="daemon:warm-model")

    async def stop(self) -> None:
        """Cancel a model start under way. An unfinished library import is left to its daemon
        thread: waiting for it made every stop in the first seconds take seconds more."""
        if self._starting is not None:
            self._starting.cancel()
        if self._library is not None and not self._library.done():
            self._library.cancel()
        if self._models is not None:
            self._models.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._models


def _load_turn_machinery(models: tuple[str, ...], library: bool) -> None:
    """What the first turn would otherwise do on the loop: import the turn runner (context
    assembly, tools), build the tools' registry, load the tokenizers of ``models`` (an agent's
    first input reached its live stream 0.5-0.7 s after its acknowledgement while its first turn
    read o200k_base's file on the loop: ``holon bench dashboard``'s ``live_delay_first_ms``), and
    with ``library`` the model library. Only with ``[daemon] model_process = false`` does the
    daemon call models in its own process: otherwise litellm (~5 s of CPU, ~170 MiB) is imported
    by the model children alone, which also answer the models' windows."""
    import holon.runtime.turn.runner  # noqa: F401
    from holon.context.tokens import warm_encodings
    from holon.runtime.tools import builtin_registry

    if library:
        from holon.runtime.providers.litellm_provider import known_context_window

        known_context_window("gpt-4o-mini")
    builtin_registry()
    warm_encodings(models)


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``fn(*args)`` in a daemon thread, its outcome as a future of the running loop.

    Unlike ``asyncio.to_thread`` (the loop's executor, joined when the loop closes and again at
    exit), a daemon thread never holds the process up: a stop does not wait for an import."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled by ``stop``
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn(*args)
        except BaseException as e:  # handed to the loop, which re-raises it to whoever awaits
            error = e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="holon:import-model-library", daemon=True).start()
    return future
