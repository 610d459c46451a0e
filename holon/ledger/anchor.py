"""The ledger's anchor: the last committed seq and hash, kept in a small file outside the database.

SQLite cannot notice what it has lost: a deleted or damaged WAL, or a tail cut off by a crash or
a bad copy, leaves a database that is perfectly consistent, only shorter. The anchor is what the
database would have to agree with. After each commit the ledger writes ``(seq, hash)`` to
``<home>/ledger.anchor``; ``verify`` and the daemon's start-up check compare it with the
database: a database whose head is below the anchor has lost events (and says how many), one
whose event at the anchor's seq has another hash is not the ledger that was committed.

The file is two fixed-size slots, each ``seq``, ``hash`` and a CRC-32 of both. A commit
overwrites the slot ``seq % 2`` in place (one ``pwrite``, no new inode), so a torn write can
spoil at most one slot and the other still holds the previous commit. The reader takes the valid
slot with the greater seq. Writes reach the disk on a cadence (``fdatasync`` every
``sync_every`` commits or ``sync_interval_s`` seconds, and on close), which keeps the cost of a
commit to one system call. After a power loss the anchor may be a little behind the database,
never ahead of what was acknowledged: behind is harmless, it only weakens the check.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from holon.errors import LedgerError
from holon.paths import open_private

__all__ = ["Anchor", "AnchorMark", "read_anchor"]

_SLOT = 128
_FORMAT = "holon-anchor v1 {seq:020d} {hash} {crc:08x}\n"
_PATTERN = re.compile(rb"holon-anchor v1 (\d{20}) ([0-9a-f]{64}) ([0-9a-f]{8})\n")


@dataclass(frozen=True, slots=True)
class AnchorMark:
    """What the anchor says was committed last."""

    seq: int
    hash: str


def _crc(seq: int, hash_: str) -> int:
    return zlib.crc32(f"{seq}:{hash_}".encode("ascii"))


# ``_FORMAT`` as bytes, padded to the slot: one ``%`` per commit instead of ``str.format``, an
# encode and ``ljust`` (issue 18: the slot was half of ``record``'s 3.5 us; the bytes are the same,
# ``test_anchor_slot_bytes_are_the_format``).
# A line is 111 bytes for any seq below 10**20 (every seq SQLite can hold: at most 2**63 - 1).
_SLOT_BYTES = b"holon-anchor v1 %020d %s %08x\n" + b" " * (_SLOT - 111)


def _slot(seq: int, hash_: str) -> bytes:
    h = hash_.encode("ascii")
    return _SLOT_BYTES % (seq, h, zlib.crc32(b"%d:%s" % (seq, h)))


def _parse(raw: bytes) -> AnchorMark | None:
    m = _PATTERN.match(raw)
    if m is None:
        return None
    seq, hash_, crc = int(m.group(1)), m.group(2).decode("ascii"), int(m.group(3), 16)
    return AnchorMark(seq, hash_) if _crc(seq, hash_) == crc else None


def read_anchor(path: Path) -> AnchorMark | None:
    """The anchor at ``path``; ``None`` when there is none. A file with no valid slot is an error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LedgerError(f"the ledger anchor {path} cannot be read: {e.strerror}") from e
    marks = [m for m in (_parse(data[i : i + _SLOT]) for i in (0, _SLOT)) if m is not None]
    if not marks:
        if not data:
            return None  # created, never written (a home that has committed nothing yet)
        raise LedgerError(f"the ledger anchor {path} is damaged (no readable record)")
    return max(marks, key=lambda m: m.seq)


class Anchor:
    """The writer of one ledger's anchor file (one per open ``Ledger``; thread-safe under its lock)."""

    def __init__(self, path: Path, *, sync_every: int = 4096, sync_interval_s: float = 1.0) -> None:
        self.path = path
        self.sync_every = sync_every
        self.sync_interval_s = sync_interval_s
        self._fd: int | None = None
        self._unsynced = 0
        self._synced_at = time.monotonic()
        self._last_seq = 0

    def read(self) -> AnchorMark | None:
        return read_anchor(self.path)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
        return self._fd

    def record(self, seq: int, hash_: str) -> None:
        """Note that ``seq`` (with ``hash_``) is committed. Called after each COMMIT."""
        if seq <= self._last_seq:
            return
        fd = self._open()
        os.pwrite(fd, _slot(seq, hash_), (seq % 2) * _SLOT)
        self._last_seq = seq
        self._unsynced += 1
        now = time.monotonic()
        if self._unsynced >= self.sync_every or now - self._synced_at >= self.sync_interval_s:
            self.sync(now)

    def reset(self, seq: int, hash_: str) -> None:
        """Write both slots: a new database (``holon init``) or the first write of this process."""
        fd = self._open()
        os.pwrite(fd, _slot(seq, hash_) * 2, 0)
        self._last_seq = seq
        self.sync()

    def sync(self, now: float | None = None) -> None:
        if self._fd is not None and self._unsynced:
            os.fdatasync(self._fd)
        self._unsynced = 0
        self._synced_at = time.monotonic() if now is None else now

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.sync()
            os.close(self._fd)
            self._fd = None
