"""A client frozen inside an append: ``python tests/helpers/pg_lock_holder.py URL READY_FILE``.

Opens holon's append transaction (``begin_append``: ``BEGIN`` and the ledger lock, pipelined as
holon does), touches READY_FILE and then sleeps; the test SIGSTOPs it (a frozen node mid-append).
Exits 0 if its connection was terminated meanwhile (it finds out when continued), 1 otherwise.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main() -> int:
    from holon.ledger.pg.append import begin_append
    from holon.ledger.pg.connect import connect

    url, ready = sys.argv[1], Path(sys.argv[2])
    conn = connect(url, timeout_s=10)
    begin_append(conn)
    ready.touch()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            conn.execute("SELECT 1")
        except Exception as e:  # terminated by a node's watchdog
            print(f"ended: {type(e).__name__}", flush=True)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
