"""The CLI checks and shows schedules with the pure schedule maths (``holon.runtime.schedule``),
never loading APScheduler, which only the daemon's scheduler (``holon.daemon.timers``) imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CODE = """
from holon.cli import agent_cmd, schedules
from holon.runtime.schedule import parse_schedule, timer_event
parse_schedule("CRON_TZ=Europe/Paris 0 9 * * 1-5")
timer_event("@daily", now_us=1_900_000_000_000_000)
"""


@pytest.mark.slow
def test_the_cli_parses_schedules_without_importing_apscheduler() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _CODE], capture_output=True, text=True, timeout=120, check=True
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "holon.cli.agent_cmd" in imported and "holon.runtime.schedule" in imported
    assert not [m for m in imported if m.split(".")[0] == "apscheduler"], "the CLI imported APScheduler"
    assert "holon.daemon.timers" not in imported
