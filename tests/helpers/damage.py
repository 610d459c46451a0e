"""Ways to damage a holon home's database on disk, as a crash, a bad disk or a bad copy would.

Each works on the closed files (no holon process holds them). ``checkpoint`` first moves every
committed page from the WAL into the main file, so a byte flipped there is the only copy.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["checkpoint", "flip_byte", "make_foreign", "make_garbage", "overwrite_page", "truncate_pages", "zero"]


def checkpoint(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def flip_byte(db: Path, needle: bytes, *, offset: int = 0, to: int | None = None) -> int:
    """Change one byte of the first ``needle`` in the file (``to``, or the byte XOR 0x01).

    Returns the file offset changed. Raises when ``needle`` is not in the file."""
    checkpoint(db)
    data = bytearray(db.read_bytes())
    at = data.find(needle)
    if at < 0:
        raise AssertionError(f"{needle!r} not found in {db}")
    pos = at + offset
    data[pos] = (data[pos] ^ 0x01) if to is None else to
    db.write_bytes(bytes(data))
    return pos


def truncate_pages(db: Path, *, keep_bytes: int) -> None:
    """Cut the main file short (a partial copy, a full disk)."""
    checkpoint(db)
    with db.open("r+b") as fh:
        fh.truncate(keep_bytes)


def overwrite_page(db: Path, page: int) -> None:
    """Fill one page (numbered from 1) with junk, as a bad sector or a torn write leaves it."""
    checkpoint(db)
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    data[(page - 1) * size : page * size] = b"\xaa" * size
    db.write_bytes(bytes(data))


def zero(db: Path) -> None:
    """A 0-byte database file."""
    db.write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


def make_foreign(db: Path) -> None:
    """Replace the database with some other program's SQLite database."""
    zero(db)
    db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    conn.execute("INSERT INTO moz_places(url) VALUES ('https://example.org')")
    conn.commit()
    conn.close()


def make_garbage(db: Path) -> None:
    """Replace the database with bytes that are not SQLite at all."""
    zero(db)
    db.write_bytes(b"this is not a database\n" * 400)
