"""Where a benchmark says how far it got: ``step(label, done, total)``, shown by the CLI.

Benchmarks run for minutes and used to print nothing until their report. They call ``step`` at
the edges of their phases (filling a ledger, each measured round), never inside a timed region,
and the CLI (``holon bench ...``) installs a sink that draws a progress bar on a terminal and a
few plain lines otherwise (``holon.cli.progress``). With no sink installed (tests, library use)
``step`` does nothing. A module-level sink, not a parameter threaded through every helper: the
benchmarks stay as they read, with one line per phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Sink", "reporting", "step"]

Sink = Callable[[str, int, "int | None"], None]
"""``(label, done, total)``: what the benchmark is doing now, and how far (``total`` ``None``: unknown)."""

_sinks: list[Sink] = []
"""The installed sinks, innermost last; only the last one hears ``step``."""


def step(label: str, done: int = 0, total: int | None = None) -> None:
    """Report progress (cheap when nobody listens)."""
    if _sinks:
        _sinks[-1](label, done, total)


@contextmanager
def reporting(sink: Sink) -> Iterator[None]:
    """Send ``step`` calls to ``sink`` while the block runs."""
    _sinks.append(sink)
    try:
        yield
    finally:
        _sinks.remove(sink)
