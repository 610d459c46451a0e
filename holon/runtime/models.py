"""Which model an agent talks to: its own settings, else the ``[model]`` defaults, else local.

Agent settings (from ``holon agent configure``) override the config file's ``[model]`` section
key by key. With no model named anywhere, holon starts the embedded local model once per process
(on loopback, stopped on exit); when that is not installed either, ``ModelNotConfigured`` says
exactly what to do. Nothing is spent before this resolves.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from holon.config import ModelDefaults
from holon.errors import ModelNotConfigured
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelSettings, Provider
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.local import MODEL_NOT_CONFIGURED_MESSAGE, LocalModelServer, local_model_available
from holon.runtime.settings import AgentSettings, check_model_policy, read_settings

__all__ = ["LOCAL_TURN_CONTEXT_WINDOW", "MODEL_SETTING_KEYS", "ModelResolver", "model_settings"]

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
    own = read_settings(agent.settings).settings
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


class ModelResolver:
    """Resolves an agent to (provider, settings); owns the local model server when one is needed."""

    def __init__(self, defaults: ModelDefaults, log_dir: Path, *, provider: Provider | None = None) -> None:
        self.defaults = defaults
        self.log_dir = log_dir
        self.provider: Provider = provider or LiteLLMProvider()
        self._local: LocalModelServer | None = None

    def __call__(self, agent: AgentState) -> tuple[Provider, ModelSettings]:
        settings = model_settings(agent, self.defaults)
        if settings is not None:
            return self.provider, settings
        if not local_model_available():
            raise ModelNotConfigured(MODEL_NOT_CONFIGURED_MESSAGE)
        if self._local is None or not self._local.running:
            self._local = LocalModelServer(self.log_dir, n_ctx=LOCAL_TURN_CONTEXT_WINDOW).start()
        return self.provider, replace(self._local.settings, deadline_s=self.defaults.call_deadline_s)

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
