"""Injected time. Logic never reads the wall clock directly; it asks a ``Clock``.

Timestamps in holon are integers: microseconds since the Unix epoch, UTC. Integers sort, compare
and serialise exactly, which keeps hashes and replays byte-stable.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock", "format_us", "parse_us"]


class Clock(Protocol):
    def now_us(self) -> int:
        """Microseconds since the Unix epoch (UTC)."""
        ...


class SystemClock:
    """The wall clock, made monotonic non-decreasing within one process."""

    def __init__(self) -> None:
        self._last = 0

    def now_us(self) -> int:
        now = time.time_ns() // 1000
        if now <= self._last:
            now = self._last + 1
        self._last = now
        return now


class FakeClock:
    """A clock tests move by hand. Each reading advances it by ``step_us`` (default 1 µs)."""

    def __init__(self, start_us: int = 1_767_225_600_000_000, step_us: int = 1) -> None:
        self._now = start_us
        self._step = step_us

    def now_us(self) -> int:
        now = self._now
        self._now += self._step
        return now

    def advance(self, *, seconds: float = 0.0, us: int = 0) -> None:
        self._now += int(seconds * 1_000_000) + us


def format_us(ts_us: int) -> str:
    """Render a timestamp as ISO 8601 UTC with microseconds, e.g. ``2026-01-01T00:00:00.000000Z``."""
    dt = datetime.fromtimestamp(ts_us / 1_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_us(text: str) -> int:
    """Parse an ISO 8601 timestamp (naive means UTC) into microseconds since the epoch."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp()) * 1_000_000 + dt.microsecond
