"""CPU profiles of a running holon process, per thread, over a window chosen from outside.

``HOLON_CPU_PROFILE=DIR`` in a process's environment (``holon serve`` and its model children
read it at start; ``holon bench cluster --profile DIR`` sets it on its nodes) arms the profiler:

* every thread runs under a ``cProfile.Profile`` of its own whose timer is ``time.thread_time``,
  so the figures are that thread's **CPU** seconds (not wall time: a thread blocked in ``select``
  or on a socket costs nothing) and the threads do not mix their call stacks;
* ``DIR/armed-PID`` is written, so a driver knows which processes take the signal (``SIGUSR2``
  ends an unarmed process);
* the first ``SIGUSR2`` opens the window: every thread's profile is cleared and each thread's CPU
  so far noted (``/proc/self/task``); the second closes it: ``DIR/PID-ROLE-THREAD.prof`` per
  thread (``pstats`` files) and ``DIR/PID-ROLE.json`` (the process's role, its CPU in the window
  from ``/proc``, per thread by name: the profiler's overhead is in these too, so compare them
  with an unprofiled run's CPU per turn, not with each other's absolutes).

Start-up (imports, migrations) is left out by construction: only the window counts. Overhead is
that of ``cProfile`` with a C timer (roughly 1.5-2x the CPU of Python-heavy code); the shares are
what a profile is for. Stdlib only; imports nothing from holon.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

__all__ = ["ENV", "install_from_env"]

ENV = "HOLON_CPU_PROFILE"

_profiles: dict[int, tuple[str, cProfile.Profile]] = {}
"""native thread id -> (thread name, its profile)."""


class _State:
    dir: Path = Path(".")
    role: str = ""
    opened: tuple[float, dict[int, float]] | None = None
    """(monotonic time, per-thread CPU) when the window opened; ``None`` while none is open."""


_state = _State()


def _task_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for d in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = (d / "stat").read_text()
            rest = raw[raw.rindex(")") + 2 :].split()
            out[int(d.name)] = (int(rest[11]) + int(rest[12])) / tick
    return out


def _start_profile(name: str) -> cProfile.Profile:
    prof = cProfile.Profile(time.thread_time)
    _profiles[threading.get_native_id()] = (name, prof)
    prof.enable()
    return prof


def _patch_threads() -> None:
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]  # private, stable since 3.x

    def bootstrap_inner(self: threading.Thread) -> None:
        prof = _start_profile(self.name)
        try:
            original(self)
        finally:
            prof.disable()

    threading.Thread._bootstrap_inner = bootstrap_inner  # type: ignore[attr-defined]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]


def _on_signal(signum: int, frame: FrameType | None) -> None:
    out, role, pid = _state.dir, _state.role, os.getpid()
    if _state.opened is None:
        for _name, prof in list(_profiles.values()):
            prof.clear()
        _state.opened = (time.monotonic(), _task_cpu())
        return
    (t0, cpu0), _state.opened = _state.opened, None
    cpu1 = _task_cpu()
    threads: dict[str, float] = {}
    names = {tid: name for tid, (name, _p) in _profiles.items()}
    for tid, cpu in cpu1.items():
        name = names.get(tid, f"native-{tid}")
        threads[name] = round(threads.get(name, 0.0) + cpu - cpu0.get(tid, 0.0), 3)
    for tid, (name, prof) in list(_profiles.items()):
        prof.snapshot_stats()  # reads the entries; the thread keeps running under its profile
        with contextlib.suppress(OSError):
            import marshal

            _write(out / f"{pid}-{role}-{_safe(name)}-{tid}.prof", marshal.dumps(prof.stats))
    summary = {
        "pid": pid,
        "role": role,
        "wall_s": round(time.monotonic() - t0, 3),
        "cpu_s": round(sum(cpu1.values()) - sum(v for k, v in cpu0.items() if k in cpu1), 3),
        "threads_cpu_s": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
    }
    _write(out / f"{pid}-{role}.json", json.dumps(summary, indent=1).encode())  # last: the window's files are complete


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader polling for the file never sees it half written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def install_from_env(role: str) -> bool:
    """Arm the profiler of the module docstring if ``HOLON_CPU_PROFILE`` names a directory
    (made if missing); ``role`` names this process in the files. Must run in the main thread,
    before other threads start. Returns whether it armed."""
    where = os.environ.get(ENV)
    if not where or threading.current_thread() is not threading.main_thread():
        return False
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    _state.dir, _state.role = out, _safe(role)
    _patch_threads()
    _start_profile("MainThread")
    signal.signal(signal.SIGUSR2, _on_signal)
    (out / f"armed-{os.getpid()}").write_text(" ".join(sys.argv[:6]))
    return True
