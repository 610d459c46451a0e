"""The local model's timeout is honoured (issue 15 item 5): a real ``holon run`` on the local model
path (``ModelResolver`` starting ``LocalModelServer``), with a loopback server standing in for the
model's that accepts the completion and never answers. Before: the local server's settings
carried the dataclass default (120 s) whatever ``[model] timeout_s`` said, and a timeout was
retried four times; a stalled input held the turn for minutes. Now the turn settles failed after
one call that times out at the configured timeout, with a reason that says what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.daemon import payloads
from helpers.turn_cli import REPO, cli_env, quick_home, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

STALLED_HOLON = Path(__file__).resolve().parent / "helpers" / "turn_stalled_local.py"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_stalled_local_model_settles_the_turn_failed_within_its_timeout(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "tiny")  # no model named anywhere: the local one
    pid_file = tmp_path / "stalled.pid"
    env = cli_env(HOLON_MODEL_TIMEOUT_S="2", STALLED_PID_FILE=str(pid_file))
    proc = subprocess.run(
        [sys.executable, str(STALLED_HOLON), "--home", str(home), "run", "tiny", "Say hello.", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=100, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    [(*_, settled)] = payloads(home, "turn.settled")
    assert settled["outcome"] == "failed", settled
    reason = settled["reason"]
    assert "timed out" in reason and "did not answer within 2 s" in reason and "holon model set" in reason, reason
    # One call, not four: a timeout of the local model is final.
    responded = [p for *_, p in payloads(home, "model.responded")]
    assert [p["error_kind"] for p in responded] == ["timeout"], responded
    # The stand-in server (the model's child process) was stopped with the command.
    pid = int(pid_file.read_text())
    wait_for("the stalled server to be stopped", lambda: _gone(pid), timeout=15)
