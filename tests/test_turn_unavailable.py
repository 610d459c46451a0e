"""A model that cannot be used settles the turn visibly and waits, never in a loop (issue 15 item 1).

No model configured, a provider that cannot be reached, an API key variable that is not set: the
turn settles ``failed`` with its inputs re-queued (the operator may fix the configuration), one
error brief per distinct cause reaches the operator, the agent's last error names the cause, and
retries follow a capped exponential backoff with jitter. Once the configuration is fixed the
queued input is answered. Real store, real resolver and provider; only the model and clock are fake.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers.runtime import closed_port_url, payloads
from hypothesis import given
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.projections import Store
from holon.runtime import host as host_module
from holon.runtime import models
from holon.runtime.agents import configure_agent, create_agent
from holon.runtime.host import RETRY_BASE_S, RETRY_MAX_S, AgentHost, retry_delay
from holon.runtime.models import ModelResolver
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.providers.retry import RetryPolicy
from holon.testing import FakeLLM

pytestmark = pytest.mark.timeout(120)

RETRIES = 12


class LogRecorder:
    """Stands in for the host's logger: every line it would write."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda msg, **kw: self.lines.append((level, msg, kw))


def _settled(store: Store, agent_id: str) -> list[Any]:
    return payloads(store, "turn.settled", agent_id=agent_id)


def _errors(store: Store, agent_id: str) -> list[str]:
    return [b.text for b in payloads(store, "brief.delivered", agent_id=agent_id) if b.kind == "error"]


@pytest.mark.parametrize("case", ["unreachable", "key_unset", "no_model"])
def test_an_unusable_model_settles_visibly_once_backs_off_and_answers_after_the_fix(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(models, "local_model_available", lambda: False)
    log = LogRecorder()
    monkeypatch.setattr(host_module, "log", log)
    settings: dict[str, Any] = {"context_window": 8_192, "timeout_s": 5.0}
    if case == "unreachable":
        settings |= {"model": "openai/x", "api_base": closed_port_url()}
        cause = "connection"
    elif case == "key_unset":
        settings |= {"model": "openai/x", "api_base": closed_port_url(), "api_key_env": "OPENAI_API_KEY"}
        cause = "OPENAI_API_KEY is not set"
    else:
        cause = "no model is configured"
    agent_id = create_agent(store, "alice", settings=settings).agent_id
    env: dict[str, str] = {}
    resolver = ModelResolver(store.settings.model, store.paths.logs, provider=LiteLLMProvider(env=env))
    host = AgentHost(
        store, resolver, clock=clock, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None, jitter=lambda: 0.0
    )

    with FakeLLM([{"content": "hello back"}], strict=True) as fake:

        async def scenario() -> None:
            host.start()
            try:
                seq = host.submit("alice", "hello").seq
                await host.run_until_idle(timeout_s=30)
                # Settled visibly: one failed turn, its input still queued, one error brief naming
                # the cause, the agent's last error (what status shows) names it too.
                first = _settled(store, agent_id)
                assert [(s.outcome, s.requeue) for s in first] == [("failed", True)]
                agent = store.agent(agent_id)
                assert agent.pending_inputs == [seq] and host.is_stalled(agent_id)
                assert cause in (agent.last_error or ""), agent.last_error
                errors = _errors(store, agent_id)
                assert len(errors) == 1 and cause in errors[0] and "queued" in errors[0], errors
                # Not a loop: nothing runs again before the retry time (jitter 0: half the base).
                assert host.tick() == 0
                await host.run_until_idle(timeout_s=30)
                assert len(_settled(store, agent_id)) == 1
                clock.advance(seconds=RETRY_BASE_S / 2 - 0.1)
                assert host.tick() == 0
                clock.advance(seconds=0.1)
                assert host.tick() == 1
                await host.run_until_idle(timeout_s=30)
                # Each retry is one turn, and the same cause is neither briefed nor logged again.
                for _ in range(RETRIES):
                    clock.advance(seconds=RETRY_MAX_S)
                    assert host.tick() == 1
                    await host.run_until_idle(timeout_s=30)
                assert len(_settled(store, agent_id)) == RETRIES + 2
                assert len(_errors(store, agent_id)) == 1
                assert len(log.lines) <= 2, log.lines
                assert store.agent(agent_id).pending_inputs == [seq]
                # The operator fixes the configuration: the queued input is answered.
                configure_agent(store, "alice", {"model": "openai/fake", "api_base": fake.url})
                env["OPENAI_API_KEY"] = "sk-test"
                clock.advance(seconds=RETRY_MAX_S)
                assert host.tick() == 1
                await host.run_until_idle(timeout_s=30)
                last = _settled(store, agent_id)[-1]
                assert (last.outcome, last.reply) == ("completed", "hello back")
                agent = store.agent(agent_id)
                assert agent.pending_inputs == [] and agent.last_error is None and not host.is_stalled(agent_id)
            finally:
                await host.close()
                await resolver.aclose()

        asyncio.run(scenario())


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=-1.0, max_value=2.0))
def test_the_retry_delay_doubles_is_capped_and_jittered_within_its_upper_half(n: int, jitter: float) -> None:
    cap = min(RETRY_BASE_S * 2 ** min(n - 1, 32), RETRY_MAX_S)
    assert cap / 2 <= retry_delay(n, jitter) <= cap
    assert retry_delay(n, 0.0) == cap / 2 and retry_delay(n, 1.0) == cap
