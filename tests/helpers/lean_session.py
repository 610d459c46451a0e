"""Test processes that spend their CPU on tests, not on the garbage collector or on exiting.

Measured on the fast loop (``pytest -m "not slow" -n 2``, 1,568 tests, 2026-11-28):

- **Collections.** With CPython's default thresholds (700, 10, 10) a worker ran ~8,000
  collections, 35 of them full, for 9-20 s of its ~130 s: the suite keeps a large heap alive
  (imports, the libraries' caches, the section and rendering caches of every home it made). A
  young generation of 50,000 objects (``GC_THRESHOLDS``) runs ~100 collections, none full, for 6-8 s.
  The collector runs less often, on more objects at a time; cyclic garbage that reaches the oldest
  generation waits longer to be freed (a full collection comes after 2,000 young ones).
- **Exiting.** At the end of the session every worker waited ~2 s in pytest's final
  ``gc.collect()`` and then ~7 s in the interpreter's finalisation (freeing every module and
  object, one at a time), while the controller waited for both: 10-12 s of the run's wall time
  after its last test. A worker now freezes its heap when its session ends (the final collection
  then walks only what the teardown left) and leaves with ``os._exit`` after the exit handlers
  registered after this plugin (see ``_leave``) have run. A worker's exit status is not what
  reports its results (xdist reads them from its channel, which is closed by then), and every
  process a test started has been reaped at session end (``helpers.reaper``).

Only xdist workers leave early: a serial run's exit status is pytest's own, so it exits normally.

- **Bytecode.** Where ``PYTHONDONTWRITEBYTECODE`` is set (it is on the project's machines), every
  run compiled holon's modules and rewrote the assertions of every test module again, in every
  worker: 12.3 s of collection against 3.5 s with the bytecode kept. Importing this module (the
  first thing ``tests/conftest.py`` imports, before holon) lets this process write bytecode
  beside the sources, in the ``__pycache__`` folders git ignores, as Python does by default.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys

import pytest

__all__ = ["GC_THRESHOLDS", "pytest_configure"]

GC_THRESHOLDS = (50_000, 20, 100)

sys.dont_write_bytecode = False  # see "Bytecode" above: from here on, this process keeps what it compiles


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _leave() -> None:
    """The last exit handler a worker runs (registered first, so run last, of those registered
    from ``pytest_configure`` on): flush what is buffered, then skip the interpreter's finalisation."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _Lean:
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    if _is_worker(config) and not config.pluginmanager.has_plugin("holon-lean-session"):
        config.pluginmanager.register(_Lean(), "holon-lean-session")
        atexit.register(_leave)
