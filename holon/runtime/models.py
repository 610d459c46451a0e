"""Which model an agent talks to: its own settings, else the ``[model]`` defaults, else local.

Agent settings (from ``holon agent configure``) override the config file's ``[model]`` section
key by key. With no model named anywhere, holon starts the embedded local model once per process
(on loopback, stopped on exit, or after ``[local] idle_stop_s`` without a call); when that is not installed either, ``ModelNotConfigured`` says
exactly what to do. Nothing is spent before this resolves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from holon.config import ModelDefaults
from holon.errors import ModelError, ModelNotConfigured
from holon.logs import get_logger
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, Provider, TextSink, context_window_of
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.local import (
    MODEL_NOT_CONFIGURED_MESSAGE,
    LocalModelServer,
    LocalProvider,
    local_model_available,
)
from holon.runtime.secrets import KeyLookup
from holon.runtime.settings import AgentSettings, check_model_policy, read_settings

__all__ = [
    "LOCAL_TURN_CONTEXT_WINDOW",
    "LOCAL_WHAT",
    "MODEL_SETTING_KEYS",
    "ModelResolver",
    "local_settings",
    "model_settings",
    "model_settings_of",
]

log = get_logger("holon.models")

#: How live notices and ``model.started`` events name the local model server.
LOCAL_WHAT = "local model"

LOCAL_TURN_CONTEXT_WINDOW = 8192
"""Context window the local model is served with for turns: SmolLM2's trained length. A turn's
pinned prompt (role contract, tool schemas, inputs) is ~3k tokens, so the server's small default
(2048) would make every turn fail before its first model call."""

#: Agent settings that describe its model.
MODEL_SETTING_KEYS = (
    "model",
    "api_base",
    "api_key_env",
    "temperature",
    "max_output_tokens",
    "context_window",
    "timeout_s",
)


def model_settings(agent: AgentState, defaults: ModelDefaults) -> ModelSettings | None:
    """The agent's model settings, or ``None`` when no model is named (use the local one).

    Read totally (``read_settings``): a bad stored value falls back to the config's. When the
    agent's own model settings break the operator's allow-lists (a ledger written before them), none
    of them is used: the config's ``[model]`` section alone decides, and ``settings_problem`` (the
    daemon's status) says why."""
    return model_settings_of(agent.settings, defaults)


def model_settings_of(raw: Mapping[str, Any], defaults: ModelDefaults) -> ModelSettings | None:
    """``model_settings`` for stored settings ``raw`` (``{}``: the config's model alone)."""
    own = read_settings(raw).settings
    if check_model_policy(own, defaults) is not None:
        own = AgentSettings()
    merged = {k: v if (v := getattr(own, k)) is not None else getattr(defaults, k) for k in MODEL_SETTING_KEYS}
    if not merged["model"]:
        return None
    return ModelSettings(
        model=str(merged["model"]),
        api_base=merged["api_base"],
        api_key_env=merged["api_key_env"],
        temperature=merged["temperature"],
        max_output_tokens=merged["max_output_tokens"],
        context_window=merged["context_window"],
        timeout_s=float(merged["timeout_s"]),
        deadline_s=defaults.call_deadline_s,
    )


def local_settings(served: ModelSettings, raw: Mapping[str, Any], defaults: ModelDefaults) -> ModelSettings:
    """The local server's settings with the operator's limits applied: its timeout (the agent's
    ``timeout_s``, else ``[model] timeout_s``), temperature and output cap. Without this a stalled
    local model held a turn for the dataclass default instead of the configured timeout."""
    own = read_settings(raw).settings
    pick = {k: v if (v := getattr(own, k)) is not None else getattr(defaults, k) for k in MODEL_SETTING_KEYS}
    return replace(
        served,
        timeout_s=float(pick["timeout_s"]),
        temperature=pick["temperature"],
        max_output_tokens=pick["max_output_tokens"],
        deadline_s=defaults.call_deadline_s,
    )


class ModelResolver:
    """Resolves an agent to (provider, settings); owns the local model server when one is needed.

    The local server is launched without waiting (its URL is known at once) and each call waits for
    it off the loop (``_LocalModel``), so a start of seconds holds up only the calls that need it.
    ``warm(agents)`` starts what those agents will call before any input arrives; ``maintain()``
    stops the local server after ``local_idle_s`` without a call (``0``: never).
    ``on_state(what, state)`` hears ``starting``/``ready``/``failed`` (the daemon's live notices).

    ``home``: whose secrets file completes the environment when a key is looked up (the default
    provider's ``KeyLookup``); ``who`` names this process in a missing key's message."""

    def __init__(
        self, defaults: ModelDefaults, log_dir: Path, *, provider: Provider | None = None,
        local_idle_s: float = 0.0, on_state: Callable[[str, str], None] | None = None,
        home: Path | None = None, who: str = "this command",
    ) -> None:  # fmt: skip
        self.defaults = defaults
        self.log_dir = log_dir
        self.provider: Provider = provider or LiteLLMProvider(env=KeyLookup(home, who=who))
        self.local_idle_s = local_idle_s
        self.on_state = on_state
        self._local: LocalModelServer | None = None
        self._local_calls = 0
        self._local_used = time.monotonic()

    def uses_local(self, agent: AgentState) -> bool:
        """The agent has no model of its own or from the config: it talks to the local model."""
        return model_settings(agent, self.defaults) is None

    def __call__(self, agent: AgentState) -> tuple[Provider, ModelSettings]:
        settings = model_settings(agent, self.defaults)
        if settings is not None:
            return self.provider, settings
        if not local_model_available():
            raise ModelNotConfigured(MODEL_NOT_CONFIGURED_MESSAGE)
        served = self._launch_local().settings
        return LocalProvider(_LocalModel(self)), local_settings(served, agent.settings, self.defaults)

    def _launch_local(self) -> LocalModelServer:
        if self._local is None or not self._local.running:
            self._local = LocalModelServer(self.log_dir, n_ctx=LOCAL_TURN_CONTEXT_WINDOW).launch()
            self._local_used = time.monotonic()
        return self._local

    def _state(self, state: str) -> None:
        if self.on_state is not None:
            with contextlib.suppress(Exception):
                self.on_state(LOCAL_WHAT, state)

    async def local_ready(self) -> float:
        """Wait (in a thread) until the local server answers; the milliseconds waited, 0 when it was ready."""
        server = self._launch_local()
        if server.ready:
            return 0.0
        began = time.monotonic()
        self._state("starting")
        try:
            await asyncio.to_thread(server.wait_ready)
        except ModelError:
            self._state("failed")
            raise
        log.info("local_model.ready", pid=server.pid, start_s=round(time.monotonic() - began, 3))
        self._state("ready")
        return (time.monotonic() - began) * 1000

    async def warm(self, agents: Iterable[AgentState]) -> None:
        """Start, in the background, what ``agents`` will call: the model process when there is any
        agent, the local model server when one of them uses it. Failures are logged (the first call
        reports them to its turn); nothing starts for a home without agents."""
        agents = list(agents)
        if not agents:
            return
        jobs: list[Awaitable[object]] = []
        warm_provider = getattr(self.provider, "warm", None)
        if warm_provider is not None:
            jobs.append(self._warm_provider(warm_provider, agents))
        if any(self.uses_local(a) for a in agents) and local_model_available():
            jobs.append(self.local_ready())
        for outcome in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.warning("model.warm_failed", error=str(outcome)[:300])

    async def _warm_provider(self, warm: Callable[[], Awaitable[None]], agents: list[AgentState]) -> None:
        """The provider's start, then the windows of the agents' models asked of it (kept by it),
        so that their first turns do not ask."""
        await warm()
        for model in sorted(
            {s.model for a in agents if (s := model_settings(a, self.defaults)) and not s.context_window}
        ):
            await context_window_of(self.provider, model)

    def maintain(self) -> None:
        """Stop the local server once it has had no call for ``local_idle_s`` (never when 0)."""
        server = self._local
        if (
            self.local_idle_s > 0 and server is not None and server.ready and self._local_calls == 0
            and time.monotonic() - self._local_used >= self.local_idle_s
        ):  # fmt: skip
            log.info("local_model.idle_stop", pid=server.pid, idle_s=self.local_idle_s)
            self._local = None
            server.stop()

    async def aclose(self) -> None:
        """Stop what the provider runs (the model process), then the local model server."""
        aclose = getattr(self.provider, "aclose", None)
        if aclose is not None:
            await aclose()
        self.close()

    def close(self) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None


class _LocalModel:
    """The resolver's provider for the local model: waits for the server to be ready (off the loop),
    then calls through; a wait for a start is reported as the reply's ``start_ms``."""

    def __init__(self, resolver: ModelResolver) -> None:
        self.resolver = resolver

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        r = self.resolver
        try:
            waited = await r.local_ready()
        except ModelNotConfigured:
            raise
        except ModelError as e:
            # Not retried within the turn (each attempt would wait out another start): the turn
            # fails with the inputs re-queued, and the host retries it with backoff.
            raise ModelNotConfigured(f"the local model could not start: {e}") from e
        r._local_calls += 1
        try:
            reply = await r.provider.complete(request, on_text=on_text)
        finally:
            r._local_calls -= 1
            r._local_used = time.monotonic()
        if waited >= 1:
            total = waited + (reply.start_ms or 0.0)
            return dataclasses.replace(reply, start_ms=round(total, 3), start_what=LOCAL_WHAT)
        return reply
