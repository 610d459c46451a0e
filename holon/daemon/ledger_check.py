"""The ledger's start-up check, split so that a large ledger does not hold up the daemon's start.

``Ledger.start_check`` is a page walk of the file (``PRAGMA quick_check``, about 4.5 ms per MB,
at most 1 s) plus the anchor and the last rows' hash chain (the same few milliseconds at any
size). ``holon serve`` runs the bounded part before anything else (``check_ledger``) and the page
walk in a thread of its own (``PageCheck``).

A file up to ``PAGES_BEFORE_INPUT_BYTES`` is walked beside the start-up's imports (SQLite leaves
the GIL while it walks) and before the daemon takes input (``settle``): a damaged small ledger is
refused at start, as before. A larger one is walked once the daemon's API listens (at 1M events,
1 GB, the walk alone took the whole second a restart may take); if it finds damage, the daemon
stops with the same one-line error and exit code as a refusal at start (``problem``), so new
events are not buried on top of it for longer than the walk took.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from holon.errors import LedgerError
from holon.logs import get_logger

__all__ = ["PAGES_BEFORE_INPUT_BYTES", "PageCheck", "check_ledger", "refusal"]

#: Ledger files up to this size are walked before the daemon takes input (~0.3 s here, beside the
#: start-up's imports, so it adds nothing to the time to healthy).
PAGES_BEFORE_INPUT_BYTES = 64 * 2**20


def refusal(store: Any, problem: str) -> LedgerError:
    return LedgerError(
        f"the ledger failed its start-up check: {problem}. Not serving it; run "
        f"'holon ledger verify --home {store.paths.root}' for the full report"
    )


def check_ledger(store: Any) -> PageCheck:
    """Refuse to serve a ledger that fails the bounded part of its start-up check (the anchor, the
    last rows' chain), then start the page walk in a thread and return it.

    A daemon that appends to a damaged ledger, or to one that lost committed events, buries the
    damage under new events; the operator gets one line naming the command that shows it all.
    """
    problem = store.ledger.start_check(pages=False)
    if problem is not None:
        store.close()
        raise refusal(store, problem)
    return PageCheck(store)


class PageCheck:
    """``Ledger.start_check`` with its page walk, in a daemon thread (a stop never waits for it).

    A small file's walk starts at once (beside the imports, waited for by ``settle``); a large
    file's when the daemon's API listens (``watch``): on two cores shared with other work, a walk
    beside the start-up took CPU from it, and nothing waits for that walk before health."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.problem: str | None = None
        self.done = threading.Event()
        self._started = False
        try:
            self.size = store.paths.db.stat().st_size
        except OSError:
            self.size = 0
        if self.size <= PAGES_BEFORE_INPUT_BYTES:
            self._start()

    def _start(self) -> None:
        if not self._started:
            self._started = True
            threading.Thread(target=self._run, name="holon:ledger-page-check", daemon=True).start()

    def _run(self) -> None:
        try:
            self.problem = self.store.ledger.start_check()
        except Exception as e:  # a check that cannot run is a problem to report, not a crash
            self.problem = str(e)
        finally:
            self.done.set()

    def settle(self) -> None:
        """Before the daemon takes input: wait for the walk of a small file and refuse a damaged one;
        a larger file's walk goes on (see ``problem``)."""
        if self._started:
            self.done.wait()
        self.raise_problem()

    def raise_problem(self) -> None:
        if self.done.is_set() and self.problem is not None:
            raise refusal(self.store, self.problem)

    async def watch(self, stop: asyncio.Event, *, after: asyncio.Event | None = None) -> None:
        """Start the walk (once ``after`` is set) unless it started, wait for it and set ``stop``
        if it found damage. Polled, not awaited in an executor thread: the loop's executor is
        joined at exit, and a stop must not wait for a walk."""
        if after is not None:
            await after.wait()
        self._start()
        while not self.done.is_set():
            await asyncio.sleep(0.1)
        if self.problem is not None:
            get_logger("holon.daemon").error("ledger.damaged", problem=self.problem)
            stop.set()
