"""``holon.testing.cpuprofile``: a real process armed by ``HOLON_CPU_PROFILE``, its window opened
and closed by SIGUSR2, per-thread CPU profiles written; and ``holon bench cluster``'s
latency-bound verdict."""

from __future__ import annotations

import json
import marshal
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.turn_cli import REPO

from holon.bench.cluster import latency_bound

CHILD = """
import threading, time
from holon.testing.cpuprofile import install_from_env
assert install_from_env("probe")

def busy_worker():
    while True:
        sum(i * i for i in range(20_000))
        time.sleep(0.001)

threading.Thread(target=busy_worker, name="busy", daemon=True).start()
print("ready", flush=True)
time.sleep(120)
"""


def _wait(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow  # starts a process
def test_an_armed_process_writes_per_thread_cpu_profiles_of_its_window(tmp_path: Path) -> None:
    env = {**os.environ, "HOLON_CPU_PROFILE": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert (tmp_path / f"armed-{proc.pid}").exists()
        for attempt in range(1, 6):  # a loaded machine may not schedule the busy thread in a short window
            for old in tmp_path.glob(f"{proc.pid}-probe*"):
                old.unlink()
            proc.send_signal(signal.SIGUSR2)  # opens the window
            time.sleep(0.3 * attempt)  # lets the busy thread spend CPU inside the window (a length, not an assertion)
            proc.send_signal(signal.SIGUSR2)  # closes it: the files follow
            summary = tmp_path / f"{proc.pid}-probe.json"
            _wait(lambda summary=summary: summary.exists() and any(tmp_path.glob(f"{proc.pid}-probe-busy-*.prof")))
            report = json.loads(summary.read_text())
            assert report["role"] == "probe" and report["pid"] == proc.pid
            assert "busy" in report["threads_cpu_s"] and "MainThread" in report["threads_cpu_s"]
            [busy] = tmp_path.glob(f"{proc.pid}-probe-busy-*.prof")
            stats = marshal.loads(busy.read_bytes())
            # the busy loop's own work (frames already running when the window opened count from
            # their next call on: a cleared profile forgets the stack it had)
            if any(file == "<string>" and func == "<genexpr>" for (file, _line, func) in stats):
                break
        else:
            raise AssertionError(f"the busy thread's work is in no window's profile: {sorted(stats)[:5]}")
        assert proc.poll() is None  # the signal did not end it
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.slow  # starts a process
def test_no_variable_no_profiler(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HOLON_CPU_PROFILE"}
    env["PYTHONPATH"] = str(REPO)
    code = "from holon.testing.cpuprofile import install_from_env; print(install_from_env('x'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_latency_bound_verdict() -> None:
    # 3 nodes x 2 agents at 1 s per call and one call per turn: at most 6 turns/s
    near = latency_bound(5.4, nodes=3, per_node=2, latency_ms=1000, calls=1.0)
    assert near == {"bound_turns_per_s": 6.0, "of_bound": 0.9, "latency_bound": True}
    starved = latency_bound(7.2, nodes=3, per_node=2, latency_ms=200, calls=1.0)
    assert starved["bound_turns_per_s"] == 30.0 and starved["latency_bound"] is False
    # two calls per turn halve the bound
    assert latency_bound(2.0, nodes=1, per_node=2, latency_ms=500, calls=2.0)["bound_turns_per_s"] == 2.0
