"""Providers: LiteLLMProvider through litellm's real HTTP path (against FakeLLM), error
classification, the retry policy, and the scripted provider."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from holon.errors import ModelError
from holon.ledger.events import ToolCallSpec, Usage
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings
from holon.runtime.providers.litellm_provider import LiteLLMProvider, classify
from holon.runtime.providers.retry import RetryPolicy, complete_with_retry
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call, tool_calls
from holon.testing import FakeLLM

SECRET = "sk-test-0123456789abcdef"
KEY_ENV = "HOLON_TEST_MODEL_KEY"
MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def request(fake_or_url: FakeLLM | str, *, tools: list[dict[str, Any]] | None = None, **settings: Any) -> ModelRequest:
    url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.url
    options: dict[str, Any] = {"model": "openai/fake", "api_base": url, "timeout_s": 5.0, **settings}
    return ModelRequest(messages=list(MESSAGES), tools=tools or [], settings=ModelSettings(**options))


def complete(req: ModelRequest, *, env: dict[str, str] | None = None, stream: bool = False) -> tuple[ModelReply, str]:
    fragments: list[str] = []
    provider = LiteLLMProvider(env=env if env is not None else {})
    result = asyncio.run(provider.complete(req, on_text=fragments.append if stream else None))
    return result, "".join(fragments)


def failure(req: ModelRequest, **kwargs: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        complete(req, **kwargs)
    error = info.value
    assert "\n" not in str(error) and SECRET not in str(error)
    return error


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- LiteLLMProvider against FakeLLM ---------------------------------------------------------------


def test_plain_reply(fake: FakeLLM) -> None:
    usage = {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    fake.add({"content": "hello there", "usage": usage})
    result, streamed = complete(request(fake, temperature=0.2, max_output_tokens=64))
    assert result.content == "hello there" and streamed == ""
    assert result.tool_calls == [] and result.finish_reason == "stop"
    assert result.usage == Usage(prompt_tokens=11, completion_tokens=7, total_tokens=18, cached_tokens=4)
    assert result.model == "openai/fake" and result.cost_usd is None and result.latency_ms > 0
    [sent] = fake.requests
    assert sent["messages"] == MESSAGES and sent["temperature"] == 0.2 and sent["max_tokens"] == 64
    assert "tools" not in sent and "stream" not in sent
    assert fake.request_headers[0]["authorization"] == "Bearer not-needed"


def test_api_key_comes_from_the_named_variable(fake: FakeLLM) -> None:
    fake.add({"content": "ok"})
    complete(request(fake, api_key_env=KEY_ENV), env={KEY_ENV: SECRET})
    assert fake.request_headers[0]["authorization"] == f"Bearer {SECRET}"


def test_missing_api_key_variable_is_auth_naming_it(fake: FakeLLM) -> None:
    error = failure(request(fake, api_key_env=KEY_ENV), env={})
    assert error.kind == "auth" and KEY_ENV in str(error) and not error.retryable
    assert fake.requests == []


def test_tool_call_reply_keeps_arguments_exactly(fake: FakeLLM) -> None:
    raw = '{"path":  "a b.txt" , "unterminated'
    fake.add({"tool_calls": [{"name": "read_file", "arguments": raw, "id": "call_x"}]})
    result, _ = complete(request(fake, tools=TOOLS))
    assert result.tool_calls == [ToolCallSpec(call_id="call_x", tool="read_file", arguments=raw)]
    assert result.finish_reason == "tool_calls"
    assert fake.requests[0]["tools"] == TOOLS


def test_streaming_text_and_split_tool_calls(fake: FakeLLM) -> None:
    arguments = '{"path": "notes/today.md",   "lines": [1, 2, 3]}'
    usage = {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}
    fake.add(
        {
            "content": "Let me read that file.",
            "tool_calls": [{"name": "read_file", "arguments": arguments}, {"name": "read_file", "arguments": {"p": 1}}],
            "usage": usage,
        }
    )
    result, streamed = complete(request(fake, tools=TOOLS), stream=True)
    assert streamed == result.content == "Let me read that file."
    assert [(c.tool, c.arguments) for c in result.tool_calls] == [("read_file", arguments), ("read_file", '{"p": 1}')]
    assert all(c.call_id for c in result.tool_calls)
    assert result.usage == Usage(prompt_tokens=20, completion_tokens=9, total_tokens=29)
    assert result.finish_reason == "tool_calls"
    sent = fake.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_streaming_delivers_fragments_as_they_arrive(fake: FakeLLM) -> None:
    fake.add({"content": ["Hel", "lo, ", "world"]})
    fragments: list[str] = []
    result = asyncio.run(LiteLLMProvider(env={}).complete(request(fake), on_text=fragments.append))
    assert fragments == ["Hel", "lo, ", "world"] and result.content == "Hello, world"


def test_an_error_raised_by_on_text_is_not_a_model_error(fake: FakeLLM) -> None:
    fake.add({"content": "a b c"})

    def sink(_: str) -> None:
        raise KeyError("sink bug")

    with pytest.raises(KeyError):
        asyncio.run(LiteLLMProvider(env={}).complete(request(fake), on_text=sink))


def test_cost_is_computed_for_priced_models(fake: FakeLLM) -> None:
    fake.add({"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000}})
    result, _ = complete(request(fake, model="openai/gpt-4o-mini"))
    assert result.cost_usd is not None and result.cost_usd > 0


@pytest.mark.parametrize(
    ("step", "kind", "status"),
    [
        ({"error": 429, "retry_after": 7}, "rate_limit", 429),
        ({"error": 500}, "server", 500),
        ({"error": 503}, "server", 503),
        ({"error": 401}, "auth", 401),
        ({"error": 401, "message": "no such user"}, "auth", 401),  # litellm maps this one to BadRequestError
        ({"error": 403}, "auth", 403),
        ({"error": 400}, "bad_request", 400),
        ({"error": 404}, "bad_request", 404),
        ({"error": 422}, "bad_request", 422),
        ({"context_overflow": True}, "context_overflow", 400),
        ({"drop": True}, "connection", None),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_error_kinds(fake: FakeLLM, step: dict[str, Any], kind: str, status: int | None, stream: bool) -> None:
    fake.add(step)
    error = failure(request(fake), stream=stream)
    assert (error.kind, error.status) == (kind, status)
    assert str(error).startswith("openai/fake: ")
    assert error.retry_after_s == (7.0 if kind == "rate_limit" else None)


def test_error_messages_never_carry_the_key(fake: FakeLLM) -> None:
    fake.add({"error": 401, "message": f"Incorrect API key provided: {SECRET}. Bearer {SECRET}"})
    error = failure(request(fake, api_key_env=KEY_ENV), env={KEY_ENV: SECRET})
    assert error.kind == "auth" and "[redacted]" in str(error)


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    error = failure(request(url))
    assert error.kind == "connection" and error.retryable and error.status is None
    assert url in str(error)


def test_no_key_at_all_is_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    error = failure(request("", model="openai/gpt-4o-mini", api_base=None))
    assert error.kind == "auth" and error.status is None


def test_timeout_before_the_answer(fake: FakeLLM) -> None:
    fake.add({"content": "too late", "delay": 3})
    error = failure(request(fake, timeout_s=0.5))
    assert error.kind == "timeout" and error.retryable


def test_timeout_in_the_middle_of_a_stream(fake: FakeLLM) -> None:
    fake.add({"content": "one two three", "chunk_delay": 2})
    error = failure(request(fake, timeout_s=0.5), stream=True)
    assert error.kind == "timeout"


def test_classify_without_http() -> None:
    assert classify(TimeoutError("slow")).kind == "timeout"
    assert classify(ConnectionRefusedError(111, "Connection refused")).kind == "connection"
    assert classify(ValueError("odd")).kind == "unknown"
    original = ModelError("x", kind="auth")
    assert classify(original) is original
    error = classify(RuntimeError(f"line one\nline two api_key={SECRET}"), model="m")
    assert str(error) == "m: failed: line one line two [redacted]"


@pytest.mark.slow
def test_importing_the_provider_does_not_import_litellm() -> None:
    code = """
import asyncio, sys
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.base import ModelRequest, ModelSettings
from holon.testing import FakeLLM
assert "litellm" not in sys.modules, "imported at module import"
with FakeLLM([{"content": "ok"}]) as fake:
    req = ModelRequest(messages=[{"role": "user", "content": "hi"}], settings=ModelSettings("openai/fake", fake.url))
    print(asyncio.run(LiteLLMProvider().complete(req)).content)
assert "litellm" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "LiteLLM" not in done.stderr, "litellm's own stderr handlers must be gone"


# -- retry ---------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.delays: list[float] = []
        self.retries: list[tuple[int, str, float]] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)

    def on_retry(self, attempt: int, error: ModelError, delay: float) -> None:
        self.retries.append((attempt, error.kind, delay))


def retry(provider: Any, policy: RetryPolicy | None = None, rec: Recorder | None = None) -> ModelReply:
    rec = rec or Recorder()
    policy = policy or RetryPolicy()
    req = ModelRequest(messages=list(MESSAGES), settings=ModelSettings("scripted"))
    return asyncio.run(
        complete_with_retry(provider, req, policy=policy, sleep=rec.sleep, on_retry=rec.on_retry, rand=lambda: 0.0)
    )


def test_backoff_is_exponential_and_capped() -> None:
    rec = Recorder()
    errors = [ModelError("busy", kind="server") for _ in range(4)]
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.5, max_delay_s=3.0, multiplier=2.0)
    assert retry(ScriptedProvider([*errors, reply("ok")]), policy, rec).content == "ok"
    assert rec.delays == [0.5, 1.0, 2.0, 3.0]
    assert rec.retries == [(1, "server", 0.5), (2, "server", 1.0), (3, "server", 2.0), (4, "server", 3.0)]


def test_retry_after_is_honoured_and_capped() -> None:
    rec = Recorder()
    steps = [
        ModelError("slow down", kind="rate_limit", retry_after_s=7),
        ModelError("x", kind="rate_limit", retry_after_s=99),
    ]
    retry(ScriptedProvider([*steps, reply("ok")]), RetryPolicy(max_delay_s=20), rec)
    assert rec.delays == [7.0, 20.0]


def test_non_retryable_errors_raise_at_once() -> None:
    rec = Recorder()
    provider = ScriptedProvider([ModelError("no", kind="auth", status=401), reply("never")])
    with pytest.raises(ModelError) as info:
        retry(provider, rec=rec)
    assert info.value.kind == "auth" and rec.delays == [] and len(provider.requests) == 1


def test_exhausted_attempts_reraise_the_last_error() -> None:
    rec = Recorder()
    errors = [ModelError(f"busy {i}", kind="timeout") for i in range(3)]
    with pytest.raises(ModelError) as info:
        retry(ScriptedProvider([*errors, reply("never")]), RetryPolicy(max_attempts=3), rec)
    assert info.value is errors[2] and rec.delays == [0.5, 1.0]


def test_policy_validates() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(multiplier=0.5)


def test_retry_end_to_end_through_litellm(fake: FakeLLM) -> None:
    fake.add({"error": 429, "retry_after": 3}, {"error": 500}, {"drop": True}, {"content": "finally"})
    rec = Recorder()
    provider = LiteLLMProvider(env={})
    result = asyncio.run(
        complete_with_retry(
            provider, request(fake), policy=RetryPolicy(), sleep=rec.sleep, on_retry=rec.on_retry, rand=lambda: 0.0
        )
    )
    assert result.content == "finally"
    assert rec.retries == [(1, "rate_limit", 3.0), (2, "server", 1.0), (3, "connection", 2.0)]
    assert len(fake.requests) == 4


def test_retry_end_to_end_does_not_retry_auth(fake: FakeLLM) -> None:
    fake.add({"error": 401}, {"content": "never"})
    rec = Recorder()
    with pytest.raises(ModelError) as info:
        asyncio.run(complete_with_retry(LiteLLMProvider(env={}), request(fake), sleep=rec.sleep))
    assert info.value.kind == "auth" and rec.delays == [] and len(fake.requests) == 1


# -- ScriptedProvider ----------------------------------------------------------------------------


def test_scripted_provider_plays_its_steps() -> None:
    async def later(req: ModelRequest) -> ModelReply:
        return reply(f"async saw {len(req.messages)}")

    boom = ModelError("boom", kind="server")
    provider = ScriptedProvider(
        [reply("one"), boom, lambda req: reply(f"saw {req.messages[-1]['content']}"), later, tool_call("t", {"a": 1})]
    )
    req = ModelRequest(messages=list(MESSAGES), settings=ModelSettings("scripted"))
    fragments: list[str] = []

    async def run() -> list[Any]:
        out: list[Any] = [await provider.complete(req, on_text=fragments.append)]
        with pytest.raises(ModelError) as info:
            await provider.complete(req)
        out.append(info.value)
        out += [await provider.complete(req) for _ in range(3)]
        with pytest.raises(ModelError) as info:
            await provider.complete(req)
        out.append(info.value)
        return out

    one, raised, saw, async_saw, call, exhausted = asyncio.run(run())
    assert one.content == "one" and fragments == ["one"]
    assert raised is boom
    assert saw.content == "saw hi" and async_saw.content == "async saw 1"
    assert call.tool_calls[0].tool == "t" and json.loads(call.tool_calls[0].arguments) == {"a": 1}
    assert exhausted.kind == "bad_request" and "script exhausted" in str(exhausted)
    assert len(provider.requests) == 6 and provider.remaining == 0


def test_scripted_helpers() -> None:
    raw = tool_call("read_file", '{"path": broken', call_id="c1")
    assert raw.tool_calls == [ToolCallSpec(call_id="c1", tool="read_file", arguments='{"path": broken')]
    assert raw.finish_reason == "tool_calls" and raw.content is None
    a, b = tool_call("x", {}), tool_call("x", {})
    assert a.tool_calls[0].call_id != b.tool_calls[0].call_id
    both = tool_calls(("a", {"q": 1}), ("b", "{}", "id-b"), content="two at once")
    assert [(c.tool, c.arguments) for c in both.tool_calls] == [("a", '{"q": 1}'), ("b", "{}")]
    assert both.tool_calls[1].call_id == "id-b" and both.content == "two at once"
    text = reply("hi there", usage=Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5))
    assert (text.content, text.finish_reason, text.usage.total_tokens) == ("hi there", "stop", 5)
