"""Rows for ``holon.ledger.pg.append`` built with holon's codec, and a worker process for the
concurrency test of tests/test_pg_ledger.py.

    python tests/helpers/pg_appender.py URL N WORKER GATE_DIR

The worker connects, touches ``GATE_DIR/ready-WORKER``, waits for ``GATE_DIR/go`` (so that every
worker starts at once), then appends N events of agent ``agt_wWORKER`` in transactions of 1 to 3
events, each ``DecisionRecorded`` text saying ``wWORKER #i`` so that the parent can check each
worker's order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from holon.ids import new_id
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import BlobBody, chain_hash_of, encode_payload
from holon.ledger.envelope import header_values
from holon.ledger.pg.append import Head


def rows_for(
    head: Head, events: Sequence[NewEvent], *, now_us: int, blob_threshold: int = 16_384
) -> tuple[list[tuple[Any, ...]], list[BlobBody]]:
    """``events`` as ``events`` rows chained on ``head``, as holon's ``Transaction`` makes them;
    time never goes backwards past the head's (RFC 0008, "Timestamps across machines")."""
    rows: list[tuple[Any, ...]] = []
    blobs: list[BlobBody] = []
    seq, prev, ts = head.seq, head.hash, max(now_us, head.ts_us)
    for ne in events:
        enc = encode_payload(ne.payload, blob_threshold=blob_threshold, preview_chars=40)
        seq += 1
        header = header_values(ne, seq=seq, event_id=new_id("evt"), ts_us=ts)
        prev = chain_hash_of(prev, header, enc.data)
        rows.append((*header, enc.text, prev))
        blobs.extend(enc.blobs)
    return rows, blobs


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
