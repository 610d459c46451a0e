"""Model calls in child processes (``ProcessProvider``): the same replies and errors as in-process
litellm, streaming, cancellation, a child killed mid-call, idle exit, load spread over processes,
and no child outliving a SIGKILLed parent. Real processes, litellm's real HTTP path to a FakeLLM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.wait import await_for

from holon.errors import ModelError
from holon.runtime.providers.base import ModelRequest, ModelSettings, ModelWindow
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.model_process import ProcessProvider
from holon.testing import FakeLLM

pytestmark = pytest.mark.slow  # every test here starts a process

MESSAGES = [{"role": "user", "content": "hello"}]


def _settings(fake: FakeLLM, **kw: object) -> ModelSettings:
    return ModelSettings(model="openai/fake", api_base=fake.url, timeout_s=30, **kw)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_replies_match_the_in_process_provider_streamed_or_not() -> None:
    step = {"content": ["Hel", "lo ", "there"], "tool_calls": [{"name": "memory_search", "arguments": {"query": "x"}}]}
    with FakeLLM(lambda body: step) as fake:
        settings = _settings(fake)
        request = ModelRequest(messages=MESSAGES, tools=[], settings=settings)

        async def go() -> tuple[object, object, object, list[str]]:
            provider = ProcessProvider(processes=1)
            deltas: list[str] = []
            try:
                streamed = await provider.complete(request, on_text=deltas.append)
                plain = await provider.complete(request)
            finally:
                await provider.aclose()
            direct = await LiteLLMProvider(env={}).complete(request)
            return streamed, plain, direct, deltas

        streamed, plain, direct, deltas = asyncio.run(go())
    assert "".join(deltas) == "Hello there"
    for reply in (streamed, plain):
        assert reply.content == direct.content == "Hello there"  # type: ignore[attr-defined]
        assert [(c.tool, c.arguments) for c in reply.tool_calls] == [  # type: ignore[attr-defined]
            (c.tool, c.arguments)
            for c in direct.tool_calls  # type: ignore[attr-defined]
        ]
        assert reply.usage == direct.usage and reply.finish_reason == direct.finish_reason  # type: ignore[attr-defined]


def test_errors_keep_their_kind_and_a_missing_key_never_leaves_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM(
        [{"error": 429, "message": "slow down", "retry_after": 2}, {"error": 401, "message": "bad key"}]
    ) as fake:

        async def go() -> list[ModelError]:
            provider = ProcessProvider(processes=1, env={})
            errors = []
            try:
                for settings in (_settings(fake), _settings(fake), _settings(fake, api_key_env="NOT_SET_ANYWHERE")):
                    with pytest.raises(ModelError) as caught:
                        await provider.complete(ModelRequest(messages=MESSAGES, settings=settings))
                    errors.append(caught.value)
                assert len(fake.requests) == 2  # the third call failed before any process saw it
            finally:
                await provider.aclose()
            return errors

        rate, auth, missing = asyncio.run(go())
    assert rate.kind == "rate_limit" and rate.retryable and rate.retry_after_s == 2
    assert auth.kind == "auth" and not auth.retryable
    assert missing.kind == "auth" and "NOT_SET_ANYWHERE" in str(missing)


def test_a_cancelled_call_is_cancelled_in_the_child_and_the_next_call_works() -> None:
    # The slow answer takes longer than the test may: only a cancelled child answers the next call.
    with FakeLLM([{"content": "slow", "delay": 600}, {"content": "quick"}]) as fake:
        request = ModelRequest(messages=MESSAGES, settings=_settings(fake))

        async def go() -> str | None:
            provider = ProcessProvider(processes=1)
            try:
                await provider.warm()  # started (litellm imported) first: the call itself is the subject
                call = asyncio.create_task(provider.complete(request, on_text=lambda t: None))
                for _ in range(400):  # until the child has sent the request
                    if fake.requests:
                        break
                    await asyncio.sleep(0.025)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(call, 60)  # a deadline: the cancel reaches the call at once
                reply = await asyncio.wait_for(provider.complete(request), 120)
            finally:
                await provider.aclose()
            return reply.content

        content = asyncio.run(go())
    assert content == "quick"


def test_a_child_killed_mid_call_fails_the_call_retryably_and_the_next_call_starts_another() -> None:
    with FakeLLM([{"content": "never", "delay": 20}, {"content": "again"}]) as fake:
        request = ModelRequest(messages=MESSAGES, settings=_settings(fake))

        async def go() -> tuple[ModelError, int, int, str | None]:
            provider = ProcessProvider(processes=1)
            try:
                await provider.warm()  # started first: the kill is to hit a call, not a start
                call = asyncio.create_task(provider.complete(request))
                for _ in range(400):
                    if fake.requests:
                        break
                    await asyncio.sleep(0.025)
                [first] = provider.pids
                os.kill(first, signal.SIGKILL)
                with pytest.raises(ModelError) as caught:
                    await call
                reply = await provider.complete(request)
                [second] = provider.pids
            finally:
                await provider.aclose()
            return caught.value, first, second, reply.content

        error, first, second, content = asyncio.run(go())
    assert error.kind == "server" and error.retryable and "model process exited" in str(error)
    assert first != second and content == "again"


def test_an_idle_child_exits_and_overlapping_calls_use_a_second_process() -> None:
    with FakeLLM(lambda body: {"content": "ok", "delay": 0.5}) as fake:
        request = ModelRequest(messages=MESSAGES, settings=_settings(fake))

        async def go() -> tuple[set[int], list[int]]:
            provider = ProcessProvider(processes=2, idle_s=0.5)
            try:
                await provider.complete(request)
                alone = list(provider.pids)
                assert len(alone) == 1  # a quiet home needs one process
                seen: set[int] = set()

                async def one() -> None:
                    await provider.complete(request)

                def both_seen() -> bool:
                    seen.update(provider.pids)
                    return len(seen) == 2

                calls = [asyncio.create_task(one()) for _ in range(4)]
                await await_for("a second model process", both_seen)
                await asyncio.gather(*calls)
                for _ in range(200):  # past idle_s both exit (an exit takes a moment under load)
                    if not provider.pids:
                        break
                    await asyncio.sleep(0.05)
                return seen, provider.pids
            finally:
                await provider.aclose()

        seen, after_idle = asyncio.run(go())
    assert len(seen) == 2 and after_idle == []


def test_no_child_outlives_a_sigkilled_parent(tmp_path: Path) -> None:
    with FakeLLM(lambda body: {"content": "ok", "delay": 30}) as fake:
        script = tmp_path / "parent.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import asyncio, sys
                from holon.runtime.providers.base import ModelRequest, ModelSettings, ModelWindow
                from holon.runtime.providers.model_process import ProcessProvider

                async def main():
                    provider = ProcessProvider(processes=1)
                    s = ModelSettings(model="openai/fake", api_base={fake.url!r}, timeout_s=60)
                    call = asyncio.create_task(provider.complete(ModelRequest(messages=[{{"role": "user", "content": "x"}}], settings=s)))
                    while not provider.pids:
                        await asyncio.sleep(0.01)
                    print("CHILD", provider.pids[0], flush=True)
                    await call

                asyncio.run(main())
                """
            )
        )
        parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            assert parent.stdout is not None
            line = ""
            while not line.startswith("CHILD "):  # (log lines come first)
                line = parent.stdout.readline()
                assert line, "the parent exited"
            child = int(line.split()[1])
            deadline = time.monotonic() + 30
            while not fake.requests and time.monotonic() < deadline:  # the call is in flight in the child
                time.sleep(0.05)
            assert fake.requests and _alive(child)
            parent.kill()
            parent.wait(10)
            assert _gone_within(child, 10), "the model process outlived its parent"
        finally:
            if parent.poll() is None:
                parent.kill()


def test_a_window_is_asked_of_the_child_once_with_the_start_it_waited_for() -> None:
    """The daemon never imports litellm: the model's window comes from a child and is kept; the
    answer says how long the question waited for the child to start (the turn records that cold
    start before its first request), and the call after it waited for nothing."""
    from holon.runtime.providers.litellm_provider import known_context_window

    with FakeLLM(lambda body: {"content": "ok"}) as fake:
        request = ModelRequest(messages=MESSAGES, settings=_settings(fake))

        async def go() -> tuple[list[ModelWindow], float | None]:
            provider = ProcessProvider(processes=2)
            try:
                answers = [
                    await provider.context_window("openai/gpt-4o-mini"),
                    await provider.context_window("openai/fake"),
                ]
                [pid] = provider.pids
                kept = await provider.context_window("openai/gpt-4o-mini")  # no question: kept
                assert kept == ModelWindow(answers[0].window) and provider._workers[0].questions == 0
                reply = await provider.complete(request)
                assert provider.pids == [pid]  # a question never starts a second process
            finally:
                await provider.aclose()
            return answers, reply.start_ms

        (cold, unknown), call_start = asyncio.run(go())
    assert cold.window == known_context_window("openai/gpt-4o-mini") and cold.window and cold.window > 100_000
    assert cold.start_ms is not None and cold.start_ms >= 1 and cold.start_what == "model process"
    assert unknown == ModelWindow(None)  # asked of a ready child: no start to report
    assert call_start is None
