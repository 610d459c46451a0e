"""Every model call has a wall-clock deadline (issue 15, "Runs where daemons run").

litellm's ``timeout`` bounds each silence of the server, so a server that keeps a stream alive with
SSE keep-alive comments, or trickles a byte now and then, never trips it. ``PingLLM`` is such a
server (it never answers); every call to it, streamed or not, in this process or in the daemon's
model process, and a whole ``holon run``, must end at ``[model] call_deadline_s`` with a timeout
naming the deadline. Without the deadline these tests hang until pytest-timeout fails them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers.ping_llm import PingLLM
from helpers.turn_cli import cli_env, holon, make_home

from holon.errors import ModelError
from holon.runtime.providers.base import ModelRequest, ModelSettings
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.model_process import ProcessProvider
from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.timeout(120)

MESSAGES = [{"role": "user", "content": "Say hello."}]


def _request(server: PingLLM) -> ModelRequest:
    # A generous silence timeout (the pings never let it fire) and a short deadline.
    settings = ModelSettings("openai/fake", api_base=server.url, timeout_s=60.0, deadline_s=1.0)
    return ModelRequest(messages=list(MESSAGES), settings=settings)


def _assert_deadline(error: ModelError) -> None:
    assert error.kind == "timeout" and error.retryable, error
    assert "call deadline of 1 s" in str(error) and "[model] call_deadline_s" in str(error), error


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_server_that_keeps_the_call_alive_is_cut_at_the_deadline(stream: bool, fake: FakeLLM) -> None:
    texts: list[str] = []
    provider = LiteLLMProvider(env={})
    # One answered call first, so that litellm's lazy imports on a loaded machine do not eat the
    # 1 s deadline before the request below is even sent.
    warm = ModelRequest(messages=list(MESSAGES), settings=ModelSettings("openai/fake", api_base=fake.url))
    asyncio.run(provider.complete(warm, on_text=(lambda _s: None) if stream else None))
    with PingLLM() as server:
        with pytest.raises(ModelError) as info:
            asyncio.run(provider.complete(_request(server), on_text=texts.append if stream else None))
        assert len(server.requests) == 1 and bool(server.requests[0].get("stream")) is stream
    _assert_deadline(info.value)
    assert texts == []


@pytest.mark.slow
def test_the_model_process_cuts_the_call_too() -> None:
    async def call(server: PingLLM) -> None:
        provider = ProcessProvider(processes=1, idle_s=60)
        try:
            await provider.complete(_request(server), on_text=lambda _s: None)
        finally:
            await provider.aclose()

    with PingLLM() as server, pytest.raises(ModelError) as info:
        asyncio.run(call(server))
    _assert_deadline(info.value)


@pytest.mark.slow
def test_a_turn_on_a_pinging_server_settles_failed_with_the_reason(tmp_path: Path) -> None:
    with PingLLM() as server:
        home = make_home(tmp_path, "bob", "--model", "openai/fake", "--api-base", server.url)
        env = cli_env(HOLON_MODEL_CALL_DEADLINE_S="1", HOLON_RUNTIME_RETRY_ATTEMPTS="1")
        r = holon(home, "run", "bob", "hello?", "--json", env=env, timeout=90)
        asked = len(server.requests)
    assert r.code != 0 and "Traceback" not in r.err, r
    data = json.loads(r.out)
    assert data["outcome"] == "failed", data
    assert "call deadline of 1 s" in data["reason"], data
    assert asked == 1
