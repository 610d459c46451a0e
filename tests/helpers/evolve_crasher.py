"""A worker for tests/test_evolve_crash.py: runs evolve jobs and stops dead in the middle of one.

    python tests/helpers/evolve_crasher.py HOME MARKER

It plans the first job's events, touches MARKER and then sleeps inside the job (before the
transaction that would append them and mark the job done), so the parent can SIGKILL it there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from holon.config import load_settings, resolve_home
from holon.evolve import worker
from holon.projections import Store

real_plan = worker.plan


def plan_then_hang(*args, **kwargs):  # type: ignore[no-untyped-def]
    out = real_plan(*args, **kwargs)
    Path(sys.argv[2]).touch()
    time.sleep(600)
    return out


worker.plan = plan_then_hang  # type: ignore[assignment]

if __name__ == "__main__":
    home = resolve_home(Path(sys.argv[1]))
    store = Store.open(home, load_settings(home))
    worker.Evolver(store, worker="crasher").drain()
