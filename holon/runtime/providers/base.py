"""The provider interface: messages, tool schemas and settings in; text, tool calls, usage out.

Every provider (litellm, the scripted in-process one for unit tests) implements ``Provider``.
Failures raise ``holon.errors.ModelError`` with a ``kind``; retrying is the caller's policy
(``holon.runtime.providers.retry``), never the provider's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from holon.ledger.events import ToolCallSpec, Usage

__all__ = ["ModelReply", "ModelRequest", "ModelSettings", "ModelWindow", "Provider", "TextSink", "context_window_of"]

#: Receives streamed text fragments of a reply as they arrive.
TextSink = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """How to reach a model. ``api_key_env`` names an environment variable; keys never live here."""

    model: str
    """litellm model name, e.g. ``openai/gpt-4o-mini`` or ``anthropic/claude-sonnet-4``."""
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    context_window: int | None = None
    timeout_s: float = 120.0
    """Longest silence of the server (connect, or between two pieces of the reply)."""
    deadline_s: float = 600.0
    """Wall-clock limit of the whole call, streaming included (``[model] call_deadline_s``)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    # OpenAI-style chat messages and tool schemas: JSON data by nature, hence Any.
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    settings: ModelSettings = ModelSettings(model="unset")


@dataclass(frozen=True, slots=True)
class ModelReply:
    content: str | None
    tool_calls: list[ToolCallSpec]
    finish_reason: str | None
    usage: Usage
    model: str
    cost_usd: float | None = None
    latency_ms: float = 0.0
    start_ms: float | None = None
    """How long this call waited for a model process or the local model server to start (a cold
    start); not part of ``latency_ms``. The turn records it as a ``model.started`` event."""
    start_what: str = ""
    """What the call waited for: ``model process`` or ``local model``."""


class Provider(Protocol):
    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        """One model call. Streams text to ``on_text`` when given. Raises ``ModelError``."""
        ...


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """A provider's answer to "what is ``model``'s input window?"."""

    window: int | None
    """In tokens; ``None``: unknown."""
    start_ms: float | None = None
    """How long the question waited for a model process to start (a cold start, before the turn
    began: the turn records it as a ``model.started`` event before its first request)."""
    start_what: str = ""


async def context_window_of(provider: Provider, model: str) -> ModelWindow:
    """What ``provider`` knows of ``model``'s input window (its optional ``context_window(model)``
    coroutine); unknown for a provider that cannot tell (test doubles). A turn asks before it
    starts, so its budget never depends on timing. Raises ``ModelError``."""
    ask = getattr(provider, "context_window", None)
    if ask is None:
        return ModelWindow(None)
    answer: ModelWindow = await ask(model)
    return answer
