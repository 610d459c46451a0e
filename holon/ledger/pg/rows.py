"""``events`` rows chained on a head with holon's codec, for appends made below the ``Ledger``.

The lease, release and timer-claim transactions of ``holon.ledger.pg.leases`` and
``holon.ledger.pg.timers`` append their own events while holding the ledger lock; they build
their rows exactly as holon's ``Transaction`` does (the same codec, header and chain hash, so the
bytes and hashes are the ones SQLite would store). When the engine behind ``Ledger`` is integrated
(RFC 0008 step 4), those appends go through its ``Transaction`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from holon.ids import new_id
from holon.ledger.codec import BlobBody, chain_hash_of, encode_payload
from holon.ledger.envelope import NewEvent, header_values
from holon.ledger.pg.append import Head

__all__ = ["BLOB_THRESHOLD", "rows_for"]

BLOB_THRESHOLD = 16_384
"""Bytes of a large text field above which its body goes to the blob store (the ledger's default)."""


def rows_for(
    head: Head, events: Sequence[NewEvent], *, now_us: int, blob_threshold: int = BLOB_THRESHOLD
) -> tuple[list[tuple[Any, ...]], list[BlobBody]]:
    """``events`` as rows after ``head``; ``ts_us`` never goes back past the head's (RFC 0008,
    "Timestamps across machines")."""
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
