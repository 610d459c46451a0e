"""The reaper (tests/helpers/reaper.py): a test that fails or times out leaves no process behind.

A pytest run in a subprocess, on a temporary test file, with only the reaper plugin: its tests
start children (one double-forked into an orphan) and then fail, time out by signal, or keep a
module-scoped child that the next test still sees; the last one times out by pytest-timeout's
``thread`` method, which ends pytest with ``os._exit``. Each child writes its identity to a file;
after the run none of them may be running.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.reaper import alive
from helpers.turn_cli import cli_env
from helpers.wait import wait_for

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent

SUBTESTS = """
import os, subprocess, sys, time
from pathlib import Path

import pytest

OUT = Path(os.environ["REAP_OUT"])
SLEEPER = "import time; time.sleep(600)"
# a child that double-forks: the grandchild is an orphan (parent 1) as soon as the child exits
ORPHAN = "import os, time; os.fork() == 0 and (os.setsid(), time.sleep(600)); os._exit(0)"


def start(name, code=SLEEPER):
    proc = subprocess.Popen([sys.executable, "-c", code])
    return record(name, proc.pid, proc)


def record(name, pid, proc=None):
    start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    with (OUT / name).open("w") as f:
        f.write(f"{pid} {start_ticks}")
    return proc


@pytest.fixture(scope="module")
def module_child():
    proc = start("module")
    yield proc  # no teardown: the reaper stops it after the file's last test


def test_fails_with_a_child():
    start("failed")
    assert False, "fails on purpose"


@pytest.mark.timeout(2, method="signal")
def test_times_out_by_signal_with_a_child():
    start("signal").wait()


def test_orphan():
    start("orphan-parent", ORPHAN).wait()
    me = os.getpid()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != me:
                try:
                    env = Path(f"/proc/{pid}/environ").read_bytes()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if os.environ["PYTEST_REAP_TAG"].encode() in env and b"os.fork" in cmd:
                    record("orphan", int(pid))
                    return
        time.sleep(0.02)
    raise AssertionError("no orphan found")


def test_module_child_first(module_child):
    assert module_child.poll() is None


def test_module_child_still_there(module_child):
    assert module_child.poll() is None  # the reaper left it to the module


@pytest.mark.timeout(2, method="thread")
def test_zz_times_out_by_thread_with_a_child():
    start("thread")
    time.sleep(60)  # the scenario: a test stuck past its timeout
"""


def test_a_failed_or_timed_out_test_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "test_leaky.py").write_text(SUBTESTS)
    env = cli_env(REAP_OUT=str(out), PYTHONPATH=str(TESTS))
    env.pop("PYTEST_REAP_TAG", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "helpers.reaper", "-p", "no:cacheprovider", "-v", "-p", "no:xdist",
         "-o", "addopts=", str(tmp_path / "test_leaky.py")],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    report = run.stdout + run.stderr
    assert run.returncode != 0, report  # two failures, then os._exit(1) from the thread timeout
    outcomes = {
        "test_fails_with_a_child": "FAILED", "test_times_out_by_signal_with_a_child": "FAILED",
        "test_orphan": "PASSED", "test_module_child_first": "PASSED", "test_module_child_still_there": "PASSED",
    }  # fmt: skip
    for test, outcome in outcomes.items():
        assert f"{test} {outcome}" in report, report
    assert "Timeout" in report and "test_zz_times_out_by_thread_with_a_child PASSED" not in report, report
    names = {p.name for p in out.iterdir()}
    assert names == {"failed", "signal", "orphan-parent", "orphan", "module", "thread"}, (names, report)
    procs = {name: tuple(map(int, (out / name).read_text().split())) for name in names}
    # The reaper waits for what it signals; the thread timeout's reaping runs just before os._exit.
    wait_for("every child to be gone", lambda: not [n for n, p in procs.items() if alive(p)], timeout=10)
