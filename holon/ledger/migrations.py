"""``Migration``: one named, versioned step of DDL, applied once, forwards, in its own transaction.

Each engine keeps its own frozen history of them (``holon.ledger.sqlite.migrations`` for SQLite's
ledger tables), and each projection with tables of its own keeps one in its namespace
(``holon.projections.framework``). A migration is plain DDL so that what it does never changes
when Python models change later.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Migration"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
