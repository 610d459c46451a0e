"""How many examples a property test tries: every one in the full suite, a quarter in the inner loop.

The inner loop (``pytest -m "not slow"``) is what a developer runs between edits; it is meant to
stay under two minutes. Its property tests took 41 s of its 258 s of test time on 2026-11-29
(``--durations=0``), most of it in a few searches of 150-300 examples. In the inner loop each
test tries a quarter of its examples (at least ``FLOOR``, never more than it asks for), and tests
that name no count try ``INNER_DEFAULT`` instead of hypothesis' 100. The full suite, which CI and
the README's test command run, tries every example (CI starts from a fresh clone, with no
``.hypothesis`` database of earlier failures to replay first).

``configure`` runs in ``pytest_configure``, before any test module is imported, so the counts
given to ``@settings`` at import time already know which run this is (each xdist worker
configures itself with the controller's options).
"""

from __future__ import annotations

import pytest
from hypothesis import settings

__all__ = ["FLOOR", "INNER_DEFAULT", "configure", "examples", "inner_loop"]

SHARE = 4
FLOOR = 10
INNER_DEFAULT = 25
_inner = False


def inner_loop(config: pytest.Config) -> bool:
    """Whether this run leaves the slow tests out: the inner loop."""
    return "not slow" in (config.option.markexpr or "")


def configure(config: pytest.Config) -> None:
    global _inner  # noqa: PLW0603  # set once per process, before any test module is imported
    _inner = inner_loop(config)
    if _inner:
        settings.register_profile("holon-inner", parent=settings.get_profile("holon"), max_examples=INNER_DEFAULT)
        settings.load_profile("holon-inner")


def examples(n: int) -> int:
    """``n`` in the full suite; a quarter of it (at least ``FLOOR``, at most ``n``) in the inner loop."""
    return min(n, max(FLOOR, n // SHARE)) if _inner else n
