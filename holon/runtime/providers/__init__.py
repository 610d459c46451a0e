"""Model providers: one method wide. ``litellm_provider`` is the only module that imports litellm."""

from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, Provider, TextSink

__all__ = ["ModelReply", "ModelRequest", "ModelSettings", "Provider", "TextSink"]
