"""Naming a damaged or foreign database file, and translating SQLite's errors into ``LedgerError``.

Opening a ledger first looks at the file itself (``file_state``): only a path with no file may be
created (``holon init``); a 0-byte file is a truncated or never-finished database, never a fresh
one. An existing file must hold holon's schema (``check_schema``): a foreign SQLite database is
refused, not migrated. Errors SQLite raises on a damaged file (``file is not a database``,
``database disk image is malformed``, undecodable text) become one-line ``LedgerError`` messages
(exit 5) naming the file, at the ledger's boundary and, as a safety net, at the CLI's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

from holon.errors import LedgerError

__all__ = [
    "FileState",
    "check_schema",
    "database_error",
    "empty_file_error",
    "file_state",
    "inspect_existing",
    "translate",
]

FileState = Literal["absent", "empty", "present"]

#: Tables every holon database has (from migrations 1 and the bookkeeping table).
_HOLON_TABLES = frozenset({"schema_migrations", "events"})


def file_state(path: Path) -> FileState:
    """Whether ``path`` is missing, an empty (0-byte) file, or a file with content."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        raise LedgerError(f"the ledger database {path} cannot be read: {e.strerror}") from e
    if not path.is_file():
        raise LedgerError(f"the ledger database {path} is not a regular file")
    return "empty" if size == 0 else "present"


def empty_file_error(path: Path) -> LedgerError:
    return LedgerError(
        f"the ledger database {path} is empty (0 bytes): it was truncated or never finished; holon does "
        "not initialise over it. Restore it from a backup, or move it away and run 'holon init'"
    )


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a database that does not hold holon's schema (a foreign or an empty SQLite file)."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as e:
        raise database_error(path, e) from e
    if tables >= _HOLON_TABLES:
        return
    what = "has no tables" if not tables else f"has tables {', '.join(sorted(tables)[:5])} but no holon ledger"
    raise LedgerError(
        f"{path} is a SQLite database that is not a holon ledger ({what}); holon does not initialise "
        "over an existing file. Move it away and run 'holon init', or pass the right --home"
    )


def inspect_existing(path: Path) -> None:
    """Check an existing file holds holon's schema before holon touches it (read-only).

    Holon's own connections set ``journal_mode=WAL``, which rewrites the file header: a foreign
    database must be refused before that, by a connection that cannot write."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as e:
        raise database_error(path, e) from e
    try:
        check_schema(conn, path)
    finally:
        conn.close()


def database_error(path: Path | str | None, e: BaseException) -> LedgerError:
    """A one-line ``LedgerError`` for an error SQLite raised on ``path``."""
    msg = str(getattr(e, "orig", None) or e).splitlines()[0] if str(e) else type(e).__name__
    where = f"the ledger database {path}" if path else "the ledger database"
    low = msg.lower()
    if "file is not a database" in low:
        return LedgerError(f"{where} is not a SQLite database (damaged, or a foreign file)")
    if "malformed" in low or "corrupt" in low:
        return LedgerError(f"{where} is damaged ({msg}): restore it from a backup")
    if "could not decode" in low:
        return LedgerError(f"{where} holds a damaged row (text that is not UTF-8); run 'holon ledger verify'")
    return LedgerError(f"{where} cannot be read: {msg}")


def translate(e: BaseException, path: Path | str | None = None) -> LedgerError | None:
    """``e`` as a ``LedgerError`` when it is a database error (sqlite3's or SQLAlchemy's), else ``None``."""
    if isinstance(e, sqlite3.Error):
        return database_error(path, e)
    orig = getattr(e, "orig", None)
    if isinstance(orig, sqlite3.Error):  # sqlalchemy.exc.DBAPIError wraps the driver's error
        return database_error(path, orig)
    return None
