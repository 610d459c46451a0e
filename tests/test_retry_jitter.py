"""Retries carry jitter (issue 15): 100 agents refused by one 429 do not come back in lockstep.

Two places retry: a model call inside a turn (``complete_with_retry``, honouring ``Retry-After``)
and the host holding back an agent whose turn failed transiently (``retry_delay``). Each is driven
with its real, default random source for 100 agents failing at once; their delays must spread over
a good part of the window instead of landing on one instant. Without jitter every delay is equal.
"""

from __future__ import annotations

import asyncio
import statistics

from holon.errors import ModelError
from holon.runtime.host import AgentHost, retry_delay
from holon.runtime.providers.base import ModelRequest, ModelSettings
from holon.runtime.providers.retry import RetryPolicy, complete_with_retry
from holon.runtime.providers.scripted import ScriptedProvider, reply

AGENTS = 100


def _assert_spread(delays: list[float], low: float, high: float) -> None:
    assert len(delays) == AGENTS
    assert all(low <= d <= high for d in delays), (low, high, sorted(delays))
    assert len({round(d, 6) for d in delays}) > AGENTS * 0.9, sorted(delays)  # hardly two in the same microsecond
    assert max(delays) - min(delays) > (high - low) * 0.5, sorted(delays)
    assert statistics.pstdev(delays) > (high - low) * 0.1, sorted(delays)


def test_a_shared_429_is_retried_at_spread_out_times() -> None:
    """100 calls refused with ``Retry-After: 2`` wait at least 2 s each, and not the same 2 s."""
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    async def one() -> None:
        provider = ScriptedProvider([ModelError("slow down", kind="rate_limit", retry_after_s=2.0), reply("ok")])
        request = ModelRequest(messages=[{"role": "user", "content": "hi"}], settings=ModelSettings("scripted"))
        assert (await complete_with_retry(provider, request, sleep=sleep)).content == "ok"

    async def all_agents() -> None:
        await asyncio.gather(*(one() for _ in range(AGENTS)))

    asyncio.run(all_agents())
    policy = RetryPolicy()
    _assert_spread(delays, 2.0, 2.0 * (1 + policy.jitter))


def test_the_backoff_without_retry_after_is_spread_too() -> None:
    policy = RetryPolicy()
    error = ModelError("busy", kind="server")
    import random

    delays = [policy.delay(3, error, random.random()) for _ in range(AGENTS)]
    base = policy.base_delay_s * policy.multiplier**2
    _assert_spread(delays, base, base * (1 + policy.jitter))


def test_agents_held_back_together_come_back_at_spread_out_times() -> None:
    """The host's own backoff, with the jitter source an ``AgentHost`` uses by default."""
    jitter = AgentHost.__init__.__kwdefaults__["jitter"]
    for failures in (1, 4):
        cap = retry_delay(failures, 1.0)
        _assert_spread([retry_delay(failures, jitter()) for _ in range(AGENTS)], cap / 2, cap)


def test_no_jitter_is_exact() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert policy.delay(2, ModelError("x", kind="server"), 0.9) == 1.0
    assert RetryPolicy().delay(1, ModelError("x", kind="rate_limit", retry_after_s=3), 0.0) == 3.0
