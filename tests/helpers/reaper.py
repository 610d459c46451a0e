"""A pytest plugin that reaps every process a test leaves behind, failed, timed out or not.

A process belongs to this pytest process when it descends from it (by parent pid) or when it
carries this session's tag in its environment (``PYTEST_REAP_TAG``: not a ``HOLON_*`` variable, so
``cli_env`` and the hermetic fixture keep it and every child inherits it), so an orphan whose parent
was killed (a daemon's model child, a command's process group) is found too.

- After each test: what its call phase started and still runs after teardown gets SIGTERM, then
  SIGKILL after a grace period. What setup started (a module-scoped daemon, say) lives on until
  the last test of its file has torn down, then goes the same way.
- A test that pytest-timeout ends with its ``thread`` method (``os._exit``, no teardown): the reaper
  runs first.
- ``pytest_sessionfinish``: everything left.

Linux only (``/proc``); elsewhere it does nothing. A summary names what had to be reaped, so a leaky
test shows. Load it with ``-p helpers.reaper`` (tests/conftest.py registers it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["TAG_VAR", "Proc", "Reaper", "alive", "ours", "reap"]

TAG_VAR = "PYTEST_REAP_TAG"
GRACE_S = 5.0
PROC = Path("/proc")

Proc = tuple[int, int]
"""(pid, start time in clock ticks since boot): a process, not just a pid that may be reused."""


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of ``pid``, or None when it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def _tagged(pid: int, tag: bytes) -> bool:
    try:
        return tag in (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False


def ours(root: int, tag: str | None) -> set[Proc]:
    """Living (not zombie) processes below ``root`` or carrying ``tag``; ``root`` itself excluded."""
    if not PROC.is_dir():
        return set()
    table: dict[int, tuple[int, str, int]] = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    if tag:
        needle = f"{TAG_VAR}={tag}\0".encode()
        own_start = table.get(root, (0, "", 0))[2]
        # Only processes started since this session began can carry its tag: skip the rest cheaply.
        found.update(
            p for p, (_, _, start) in table.items() if start >= own_start and p not in found and _tagged(p, needle)
        )
    found.discard(root)
    return {(p, table[p][2]) for p in found if table[p][1] not in ("Z", "X")}


def alive(proc: Proc) -> bool:
    st = _stat(proc[0])
    return st is not None and st[2] == proc[1] and st[1] not in ("Z", "X")


def _signal(procs: set[Proc], sig: int) -> None:
    for pid, start in procs:
        if alive((pid, start)):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def _collect_zombies(procs: set[Proc]) -> None:
    """Reap the exit status of those that were our own children (nobody else waits for them now)."""
    for pid, _ in procs:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)


def reap(procs: set[Proc], grace_s: float = GRACE_S) -> None:
    """SIGTERM ``procs``; SIGKILL those still running after ``grace_s``."""
    if not procs:
        return
    _signal(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _collect_zombies(procs)
        if not any(alive(p) for p in procs):
            return
        time.sleep(0.02)
    _signal(procs, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in procs):
        _collect_zombies(procs)
        time.sleep(0.02)
    _collect_zombies(procs)


def _describe(procs: set[Proc]) -> list[str]:
    out = []
    for pid, _ in sorted(procs):
        try:
            cmd = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        out.append(f"{pid} {cmd[:160]}")
    return out


def _file_of(item: pytest.Item | None) -> str | None:
    return None if item is None else item.nodeid.split("::", 1)[0]


_SPAWNS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "pty.spawn"}
)
_spawned = [0]


def _count_spawns(event: str, args: tuple[Any, ...]) -> None:
    if event in _SPAWNS:
        _spawned[0] += 1


class Reaper:
    """The plugin: see the module docstring.

    Scanning ``/proc`` costs milliseconds, so a test during which nothing started a process (an
    audit hook counts process starts, whatever the thread) is not scanned at all."""

    def __init__(self) -> None:
        self.root = os.getpid()
        self.tag = f"{uuid.uuid4().hex}-{self.root}"
        os.environ[TAG_VAR] = self.tag  # inherited by every child from here on
        self.baseline = ours(self.root, self.tag)
        self.last: set[Proc] = set()  # what ran after the last scan and reaping
        self.kept: set[Proc] = set()  # started by setup: module- or class-scoped fixtures' processes
        self.dirty = False  # a process was started since the current file began
        self.reaped: list[tuple[str, list[str]]] = []
        sys.addaudithook(_count_spawns)

    def _reap(self, procs: set[Proc], why: str) -> None:
        procs = {p for p in procs if alive(p)}
        if procs:
            self.reaped.append((why, _describe(procs)))
            reap(procs)

    def now(self) -> set[Proc]:
        self.last = ours(self.root, self.tag) - self.baseline
        return self.last

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        before = self.last
        item.stash[_SPAWNED_BEFORE] = _spawned[0]
        yield
        spawned = _spawned[0] != item.stash[_SPAWNED_BEFORE]
        self.dirty |= spawned
        if _file_of(nextitem) == _file_of(item):
            if not spawned:
                return
            left = self.now()
            # setup's processes may be a longer-scoped fixture's, still needed by the next test
            started_in_setup = item.stash.get(_AFTER_SETUP, before) - before
            self.kept |= started_in_setup & left
            self._reap(left - before - started_in_setup, item.nodeid)
            self.last = left & (before | started_in_setup)
        else:
            if self.dirty or self.kept:
                self._reap(self.now(), item.nodeid)
            self.last, self.kept, self.dirty = set(), set(), False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        yield
        if _spawned[0] != item.stash.get(_SPAWNED_BEFORE, _spawned[0]):
            item.stash[_AFTER_SETUP] = self.now()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._reap(self.now(), "session end")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.reaped:
            return
        terminalreporter.section("processes reaped after tests (a test or fixture did not stop them)")
        for why, procs in self.reaped:
            for line in procs:
                terminalreporter.write_line(f"{why}: {line}")

    def before_exit(self) -> None:
        """pytest-timeout's thread method is about to ``os._exit``: no teardown will run."""
        with contextlib.suppress(Exception):
            reap(self.now(), grace_s=1.0)


_AFTER_SETUP = pytest.StashKey[set[Proc]]()
_SPAWNED_BEFORE = pytest.StashKey[int]()


def _wrap_thread_timeout(reaper: Reaper) -> None:
    try:
        import pytest_timeout
    except ImportError:
        return
    original = pytest_timeout.timeout_timer
    if getattr(original, "_reaps", False):
        return

    def timeout_timer(item: Any, settings: Any) -> None:
        reaper.before_exit()
        original(item, settings)

    timeout_timer._reaps = True  # type: ignore[attr-defined]
    pytest_timeout.timeout_timer = timeout_timer


def pytest_configure(config: pytest.Config) -> None:
    if not PROC.is_dir() or config.pluginmanager.has_plugin("holon-reaper"):
        return
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # an xdist controller runs no tests (its workers are its children): each worker reaps its own
    reaper = Reaper()
    config.pluginmanager.register(reaper, "holon-reaper")
    _wrap_thread_timeout(reaper)
