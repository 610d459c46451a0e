"""Identifiers: a short prefix and a time-ordered, collision-resistant body.

``new_id("evt")`` gives ``evt_01JD2Z...``: 48 bits of milliseconds and 80 random bits in Crockford
base32 (the ULID layout), so ids sort roughly by creation time. Ids are generated once and stored
in the ledger; replay reads them back and never generates new ones.
"""

from __future__ import annotations

import base64
import os
import random
import re
import time

__all__ = ["NAME_RE", "is_valid_name", "new_id"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# base64's RFC 4648 alphabet does not sort; translating it to Crockford's keeps the encoding in C
# (fast) and makes ids sort by their millisecond prefix.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())

#: Agent names and other operator-chosen labels: lowercase, digits, '-' and '_', 1-63 chars.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


# Ids need uniqueness, not secrecy (secrets use ``secrets``): a PRNG seeded from the OS is ~20x
# faster than a urandom syscall per id. Reseeded in forked children so they never share a stream.
_rng = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


def new_id(prefix: str, *, ms: int | None = None) -> str:
    """A new id such as ``evt_01JD2Z3K4M5N6P7Q8R9S0T1V2W`` (26 characters after the prefix)."""
    millis = time.time_ns() // 1_000_000 if ms is None else ms
    raw = (millis & 0xFFFF_FFFF_FFFF).to_bytes(6, "big") + _rng.getrandbits(80).to_bytes(10, "big")
    body = base64.b32encode(raw)[:26].translate(_TO_CROCKFORD).decode("ascii")
    return f"{prefix}_{body}"


def is_valid_name(name: str) -> bool:
    return bool(NAME_RE.match(name))
