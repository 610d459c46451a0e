"""Progress of long commands on stderr: a rich bar on a terminal, a few plain lines otherwise.

Every command that can take more than a couple of seconds (``bench``, ``trace export``, ``ledger
replay``, ``memory reindex``) reports through ``progress(label, total)``:

* stderr is a terminal: a rich progress bar (label, bar, count, elapsed), removed when done, so
  the command's own output stays what it was;
* otherwise (a pipe, a file, CI, systemd): a plain line at the first step of the work, at most
  one every ``PLAIN_EVERY_S`` seconds while it runs, and one when it ends; enough to see that it
  moves, never a line per item. A command that fails before its first step prints only its
  one-line error.

stdout is never touched (``--json`` and ``--out -`` stay clean). rich is imported here only, and
only when a bar is drawn: ``holon --help`` must stay fast.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["PLAIN_EVERY_S", "Progress", "progress"]

PLAIN_EVERY_S = 5.0
"""At most one plain progress line per this many seconds (plus the first and the last)."""


class Progress:
    """One piece of work with a count (``total`` may be unknown, or change as it runs)."""

    def __init__(self, label: str, total: int | None, stream: TextIO, *, bar: bool, silent: bool = False) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream
        self._bar: Any = None  # rich.progress.Progress: imported lazily, so typed loosely
        self._task: Any = None
        self._started = time.monotonic()
        self._last_line = 0.0
        self._silent = silent
        if bar:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(file=stream), transient=True,
            )  # fmt: skip
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def update(self, done: int, total: int | None = None, *, label: str | None = None) -> None:
        """Record progress: ``done`` items of ``total`` (keep the old total when ``None``)."""
        self.done = done
        self.total = total if total is not None else self.total
        self.label = label or self.label
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total, description=self.label)
        elif not self._last_line or time.monotonic() - self._last_line >= PLAIN_EVERY_S:
            self._line("")

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def stage(self, label: str, total: int | None = None) -> None:
        """A new phase of the same work: a new label and count, from zero."""
        self.update(0, total, label=label)
        if self._bar is None:
            self._line("")

    def close(self, ok: bool) -> None:
        """End the bar, or print the closing line (none on failure: the error says what happened)."""
        if self._bar is not None:
            self._bar.stop()
        elif ok:
            self._line("done")

    def _line(self, note: str) -> None:
        self._last_line = time.monotonic()
        if self._silent:
            return
        count = f"{self.done}/{self.total}" if self.total else (str(self.done) if self.done else "")
        elapsed = f"{time.monotonic() - self._started:.1f} s"
        parts = [p for p in (count, note, elapsed) if p]
        self._stream.write(f"{self.label}: {', '.join(parts)}\n")
        self._stream.flush()


@contextmanager
def progress(
    label: str, total: int | None = None, *, stream: TextIO | None = None, quiet: bool = False
) -> Iterator[Progress]:
    """Report a long piece of work on stderr (a bar on a terminal, plain lines otherwise).

    ``quiet`` (the command's ``--json``): no plain lines, so a program reading stderr too sees only
    what the command itself writes there; a terminal still gets its bar, which leaves no trace."""
    out = stream or sys.stderr
    bar = _is_terminal(out)
    p = Progress(label, total, out, bar=bar, silent=quiet and not bar)
    ok = False
    try:
        yield p
        ok = True
    finally:
        p.close(ok)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
