"""Rows for ``holon.ledger.pg.append`` built with holon's codec (``holon.ledger.pg.rows.rows_for``,
re-exported for the tests), and a worker process for the concurrency test of tests/test_pg_ledger.py.

    python tests/helpers/pg_appender.py URL N WORKER GATE_DIR

The worker connects, touches ``GATE_DIR/ready-WORKER``, waits for ``GATE_DIR/go`` (so that every
worker starts at once), then appends N events of agent ``agt_wWORKER`` in transactions of 1 to 3
events, each ``DecisionRecorded`` text saying ``wWORKER #i`` so that the parent can check each
worker's order.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.pg.rows import rows_for

__all__ = ["rows_for"]


def main() -> int:
    from holon.ledger.pg.append import append
    from holon.ledger.pg.connect import connect

    url, n, worker, gate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    agent = f"agt_w{worker}"
    with connect(url, timeout_s=10) as conn:
        (gate / f"ready-{worker}").touch()
        deadline = time.monotonic() + 120
        while not (gate / "go").exists():
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.005)
        i = 0
        while i < n:
            k = min(1 + i % 3, n - i)
            batch = [NewEvent(agent, ev.DecisionRecorded(text=f"w{worker} #{j}")) for j in range(i, i + k)]
            append(conn, lambda head, b=batch: rows_for(head, b, now_us=time.time_ns() // 1000))  # type: ignore[misc]
            i += k
    return 0


if __name__ == "__main__":
    sys.exit(main())
