"""Injected time. Logic never reads the wall clock directly; it asks a ``Clock``.

Timestamps in holon are integers: microseconds since the Unix epoch, UTC. Integers sort, compare
and serialise exactly, which keeps hashes and replays byte-stable.

This module is also the one place that turns them into text and back: ``format_us`` writes ISO
8601 UTC, ``parse_us`` reads any ISO 8601 time (``ValueError`` when it is none), ``parse_iso``
reads a time a user or a model typed (a ``UsageError`` naming the field), and ``utc`` gives the
``datetime`` for calendar arithmetic. Conversions are exact integer arithmetic, never floats.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, overload

from holon.errors import UsageError

__all__ = ["Clock", "FakeClock", "SystemClock", "format_us", "parse_iso", "parse_us", "to_us", "utc"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


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


def utc(ts_us: int) -> datetime:
    """The aware UTC ``datetime`` of a timestamp (``OverflowError`` outside the years 1-9999)."""
    return _EPOCH + timedelta(microseconds=ts_us)


def to_us(when: datetime) -> int:
    """Microseconds since the epoch of an aware ``datetime`` (a naive one is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _US


def format_us(ts_us: int) -> str:
    """Render a timestamp as ISO 8601 UTC with microseconds, e.g. ``2026-01-01T00:00:00.000000Z``."""
    return utc(ts_us).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_us(text: str) -> int:
    """Parse an ISO 8601 timestamp (naive means UTC) into microseconds since the epoch.

    Raises ``ValueError`` for anything that is not one; ``parse_iso`` is the front for user input.
    """
    return to_us(datetime.fromisoformat(text.replace("Z", "+00:00")))


@overload
def parse_iso(value: str, *, field: str, shown: int | None = None) -> int: ...
@overload
def parse_iso(value: None, *, field: str, shown: int | None = None) -> None: ...
def parse_iso(value: str | None, *, field: str, shown: int | None = None) -> int | None:
    """A time a user or a model gave as ``field``, in microseconds; ``None`` stays ``None``.

    Any string that is not an ISO 8601 time (garbage, NUL bytes, a year past 9999) is a
    ``UsageError`` naming ``field`` and the value (its first ``shown`` characters, if given).
    """
    if value is None:
        return None
    try:
        return parse_us(value)
    except (ValueError, OverflowError) as e:
        raise UsageError(f"{field} is not an ISO 8601 time: {value[:shown]!r}") from e
