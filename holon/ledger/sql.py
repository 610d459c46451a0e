"""``Conn``: the one connection type SQL above the engine is written against (RFC 0008, "The engine seam").

``Transaction.conn`` (the open write transaction's connection) and ``Ledger.query`` carry SQL from
``holon.projections``, ``holon.evolve`` and ``holon.memory`` to whichever engine holds the ledger.
That SQL is written in the subset SQLite 3.40 and PostgreSQL 15 both accept: ``?`` placeholders,
``INSERT ... ON CONFLICT (...) DO UPDATE / DO NOTHING``, ``RETURNING``, CTEs, ``coalesce``; no
``INSERT OR IGNORE``, no ``sqlite_master`` (``Ledger.has_table``), no ``PRAGMA``, no JSON1.
What cannot be common is a named method of the engine (``holon.ledger.engine.Engine``).

The SQLite engine's ``Conn`` is the ``sqlite3`` connection itself (a subclass adding ``dialect``
and the two fetch helpers), so ``execute``/``executemany`` stay C calls on the hot path. The
PostgreSQL engine's wraps a psycopg connection and translates ``?`` to ``%s``.

Errors follow DB-API 2.0's optional extension: ``conn.Error`` and ``conn.IntegrityError`` are the
engine driver's exception classes, so a caller catches ``except conn.IntegrityError`` without
importing the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol

__all__ = ["Conn", "Cursor", "Dialect", "Params", "Row"]

Dialect = Literal["sqlite", "postgresql"]

Row = tuple[Any, ...]
"""A result row: its values are whatever the driver returns for the column (int, str, bytes, None)."""
Params = Sequence[Any]
"""Positional parameters for ``?`` placeholders (Any: any value the driver can bind)."""


class Cursor(Protocol):
    """What ``execute`` returns: rows to fetch and the count of rows a write changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...  # Any: a Row or None (sqlite3's own stub says Any)

    def fetchall(self) -> list[Any]: ...  # Any: Rows

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection inside (or outside) a transaction that holon's engine-neutral SQL runs on."""

    @property
    def dialect(self) -> Dialect:
        """Which engine's SQL this is, for the rare DDL that cannot be common (``STRICT``)."""
        ...

    @property
    def Error(self) -> type[Exception]:  # noqa: N802  # DB-API 2.0's name
        """The driver's base database error class."""
        ...

    @property
    def IntegrityError(self) -> type[Exception]:  # noqa: N802  # DB-API 2.0's name
        """The driver's constraint-violation error class."""
        ...

    def execute(self, sql: str, parameters: Params = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Params], /) -> Cursor: ...

    def fetchone(self, sql: str, parameters: Params = ()) -> Row | None:
        """The first row of ``sql``, or ``None``."""
        ...

    def fetchall(self, sql: str, parameters: Params = ()) -> list[Row]:
        """Every row of ``sql``."""
        ...
