"""Retrying model calls: exponential backoff for retryable ``ModelError`` kinds.

The policy lives here, not in the provider (litellm is called with ``max_retries=0``), so a test
can assert every delay: ``sleep`` and the random source are injected. A server's ``Retry-After``
wins over the backoff, capped at ``max_delay_s``. Every delay then grows by a random part of up to
``jitter`` of itself, so that many agents refused together (one 429 for a whole home, a provider
back up) do not all call again in the same instant.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from holon.errors import ModelError
from holon.runtime.providers.base import ModelReply, ModelRequest, Provider, TextSink

__all__ = ["OnRetry", "RetryPolicy", "Sleep", "complete_with_retry"]

#: Called before each backoff sleep with (failed attempt number from 1, its error, delay in seconds).
OnRetry = Callable[[int, ModelError, float], object]
Sleep = Callable[[float], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most ``max_attempts`` calls; after failed attempt n wait ``base * multiplier**(n-1)``
    (or the server's ``Retry-After``), capped at ``max_delay_s``, plus up to ``jitter`` of that."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must not be negative")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be at least 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")

    def delay(self, attempt: int, error: ModelError, rand: float = 0.0) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based); ``rand`` in [0, 1) picks the
        jitter (0: none). A ``Retry-After`` of 0 is spread over ``base_delay_s`` instead."""
        if error.retry_after_s is not None:
            delay = min(max(error.retry_after_s, 0.0), self.max_delay_s)
        else:
            delay = min(self.base_delay_s * self.multiplier ** (attempt - 1), self.max_delay_s)
        return delay + (delay or self.base_delay_s) * self.jitter * min(max(rand, 0.0), 1.0)


async def complete_with_retry(
    provider: Provider,
    request: ModelRequest,
    *,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Sleep = asyncio.sleep,
    on_text: TextSink | None = None,
    on_retry: OnRetry | None = None,
    rand: Callable[[], float] = random.random,
) -> ModelReply:
    """``provider.complete(request)``, retrying retryable ``ModelError`` s per ``policy``.

    Non-retryable errors raise at once; when attempts run out the last error is re-raised.
    A retried streaming call streams again from the start: ``on_text`` may see a partial reply
    followed by the full one (``on_retry`` is the place to tell the sink to reset).
    ``on_retry`` may be a plain function or a coroutine function; ``rand`` draws each jitter.
    """
    attempt = 1
    while True:
        try:
            return await provider.complete(request, on_text=on_text)
        except ModelError as error:
            if not error.retryable or attempt >= policy.max_attempts:
                raise
            delay = policy.delay(attempt, error, rand())
            if on_retry is not None:
                result = on_retry(attempt, error, delay)
                if inspect.isawaitable(result):
                    await result
            await sleep(delay)
            attempt += 1
