"""``PRAGMA quick_check``: SQLite's own pass over every page of the file, with a time budget.

``holon ledger verify`` and the daemon's start-up check run it before the row checks of
``holon.ledger.verify``: a damaged page must be named as such, not as rows that cannot be read.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from holon.ledger.engine import QUICK_CHECK_SKIPPED
from holon.ledger.sqlite.damage import database_error

__all__ = ["quick_check"]


def quick_check(conn: sqlite3.Connection, path: Path | str | None, *, budget_s: float | None = None) -> str | None:
    """``PRAGMA quick_check``: the first problem it names, or ``None`` when the file is sound.

    With ``budget_s`` the check stops after that long and counts as passed (``QUICK_CHECK_SKIPPED``
    is logged by the caller): it reads every page, about 4.5 ms per MB here, so a start-up check
    on a large ledger stays bounded and ``holon ledger verify`` does the full one.
    """
    timer = None
    if budget_s is not None:  # interrupt() is honoured inside the page walk (a progress handler is not)
        timer = threading.Timer(budget_s, conn.interrupt)
        timer.daemon = True
        timer.start()
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError as e:
        if budget_s is not None and "interrupt" in str(e).lower():
            return QUICK_CHECK_SKIPPED
        return database_error(path, e).message
    except sqlite3.Error as e:
        return database_error(path, e).message
    finally:
        if timer is not None:
            timer.cancel()
    if rows == [("ok",)]:
        return None
    return f"the database file is damaged (PRAGMA quick_check: {rows[0][0]})"
