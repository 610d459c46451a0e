"""Building agent hosts for turn-loop tests, and reading what their turns left in the ledger.

A host here resolves every agent to a test provider (a ``ScriptedProvider`` or a
``LiteLLMProvider`` aimed at a ``FakeLLM`` on 127.0.0.1), retries without real delays (every
backoff goes to a ``SleepRecorder``), and is started and closed inside the test's own event loop.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

from holon.clock import Clock
from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.host import AgentHost
from holon.runtime.providers.base import ModelSettings, Provider
from holon.runtime.providers.retry import RetryPolicy
from holon.runtime.tools import ToolRegistry
from holon.runtime.turn import TurnLimits, TurnObserver
from holon.testing import FakeLLM

__all__ = [
    "FAST_RETRY",
    "SCRIPTED",
    "WINDOW",
    "SleepRecorder",
    "assert_sound",
    "closed_port_url",
    "events",
    "fake_settings",
    "make_host",
    "payloads",
    "running",
    "text",
    "tool_messages",
    "turn_events",
]

WINDOW = 128_000
"""A roomy context window: these tests are about the turn loop, not about squeezing prompts."""
SCRIPTED = ModelSettings(model="scripted", context_window=WINDOW)
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=30.0, jitter=0.0)  # delays exact
"""Three attempts with no backoff (a server's Retry-After still sets the recorded delay)."""


class SleepRecorder:
    """An async ``sleep`` that records the delays it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def fake_settings(fake: FakeLLM | str, *, timeout_s: float = 10.0) -> ModelSettings:
    """Settings that send litellm to ``fake`` (or to a URL) as an OpenAI-compatible server."""
    url = fake if isinstance(fake, str) else fake.url
    return ModelSettings(model="openai/fake", api_base=url, timeout_s=timeout_s, context_window=WINDOW)


def closed_port_url() -> str:
    """An ``api_base`` on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def make_host(
    store: Store,
    providers: Provider | Mapping[str, Provider],
    *,
    clock: Clock,
    settings: ModelSettings | Mapping[str, ModelSettings] = SCRIPTED,
    registry: ToolRegistry | None = None,
    limits: TurnLimits | None = None,
    retry: RetryPolicy = FAST_RETRY,
    sleep: SleepRecorder | None = None,
    observer: TurnObserver | None = None,
) -> AgentHost:
    """An ``AgentHost`` whose agents use ``providers`` (one for all, or by agent name; ``"*"`` is the default)."""

    def pick(table: Any, agent: AgentState) -> Any:
        if not isinstance(table, Mapping):
            return table
        return table[agent.name] if agent.name in table else table["*"]

    def resolve(agent: AgentState) -> tuple[Provider, ModelSettings]:
        return pick(providers, agent), pick(settings, agent)

    return AgentHost(
        store,
        resolve,
        clock=clock,
        registry=registry,
        limits=limits,
        retry=retry,
        sleep=sleep or SleepRecorder(),
        observer=observer,
    )


@contextlib.asynccontextmanager
async def running(host: AgentHost) -> AsyncIterator[AgentHost]:
    """``start()`` the host (lock + recovery) and ``close()`` it on the way out."""
    host.start()
    try:
        yield host
    finally:
        await host.close()


# --- reading the ledger ------------------------------------------------------------------------


def events(store: Store, type_: str | None = None, *, agent_id: str | None = None) -> list[Event]:
    """Every event (of one type, of one agent) in ledger order."""
    return [e for e in store.ledger.read(0, agent_id=agent_id) if type_ is None or e.type == type_]


def payloads(store: Store, type_: str, *, agent_id: str | None = None) -> list[Any]:
    return [e.payload for e in events(store, type_, agent_id=agent_id)]


def turn_events(store: Store, turn_id: str) -> list[Event]:
    return [e for e in store.ledger.read(0) if e.turn_id == turn_id]


def text(store: Store, value: ev.LargeText | None) -> str | None:
    """A ``LargeText`` (inline or blob) as a plain string."""
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved
    return resolved.text


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("role") == "tool"]


def assert_sound(store: Store) -> None:
    """The hash chain verifies and a full replay rebuilds the same projections."""
    verified = store.ledger.verify()
    assert verified.ok, verified
    replayed = store.replay()
    assert replayed.ok, replayed


def run_through_litellm(store: Store, clock: Clock, fake: FakeLLM, agent_id: str, text: str) -> list[Any]:
    """Submit ``text`` as the operator and run the agent's turns through litellm and ``fake``."""
    from holon.runtime.providers.litellm_provider import LiteLLMProvider

    async def scenario() -> list[Any]:
        host = make_host(store, LiteLLMProvider(env={}), clock=clock, settings=fake_settings(fake))
        async with running(host):
            host.submit(agent_id, text)
            return await host.run_agent(agent_id)

    import asyncio

    return asyncio.run(scenario())
