"""Test doubles that ship with holon, usable by its own tests and by anyone embedding it.

``holon.testing.fake_llm.FakeLLM`` is a scripted OpenAI-compatible chat-completions server on
127.0.0.1: it lets tests drive litellm's real HTTP path without the internet. This package sits in
the lowest layer and imports nothing else from holon.
"""

from holon.testing.fake_llm import FakeLLM, Script, Step

__all__ = ["FakeLLM", "Script", "Step"]
