"""``PgConn``: the PostgreSQL engine's ``holon.ledger.sql.Conn``, a psycopg connection speaking ``?``.

SQL above the engine is written once, with SQLite's ``?`` placeholders (RFC 0008, "The engine
seam"); psycopg takes ``%s`` and reads every ``%`` as the start of one. ``pg_sql`` rewrites a
statement once per distinct string (cached: holon's statements are a few hundred constants and
f-strings over fixed column lists) and ``PgConn`` always hands psycopg a parameter sequence, so
the doubled ``%`` comes back single on the server.

``?`` inside a quoted literal or identifier (``'...'``, ``"..."``) is left alone; holon's SQL has
none (its values are always bound), and nothing here parses dollar quotes or comments, so a
``?`` in either would be taken for a placeholder: SQL with those does not go through a ``Conn``
(the migrations' function bodies run on psycopg directly). PostgreSQL's jsonb ``?`` operators
are spelled ``jsonb_exists`` / ``@>`` for the same reason.

A connection the server dropped (``conn.broken``: a terminated backend, a restarted server, a
network cut) is reported as ``StorageUnavailable`` (retryable, RFC 0008 "Lost mid-run") and
replaced by a fresh one on the next statement outside a transaction: the ``Ledger`` keeps the
same ``PgConn`` for its life. Every other database error stays psycopg's, reachable as
``conn.Error`` / ``conn.IntegrityError`` (DB-API's optional extension) so that callers above the
engine catch it without importing the driver.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Final

import psycopg

from holon.errors import HolonError, LedgerError, StorageUnavailable
from holon.ledger.sql import Params, Row

__all__ = ["PgConn", "Raw", "lost", "pg_sql", "translate"]

Raw = psycopg.Connection[tuple[Any, ...]]


@functools.lru_cache(maxsize=4096)
def pg_sql(sql: str) -> str:
    """``sql`` with ``?`` as ``%s`` and ``%`` as ``%%`` outside quoted literals and identifiers."""
    if "?" not in sql and "%" not in sql:
        return sql
    out: list[str] = []
    quote = ""
    for ch in sql:
        if quote:
            if ch == quote:
                quote = ""  # a doubled quote ('') closes and reopens: same result
            out.append("%%" if ch == "%" else ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            if ch in "'\"":
                quote = ch
            out.append(ch)
    return "".join(out)


class PgConn:
    """A psycopg connection in autocommit mode (holon sends ``BEGIN``/``COMMIT`` itself) behind ``Conn``.

    ``reopen`` makes a replacement when the server dropped the connection (``None``: the
    connection is not replaced, for a reader lent by the pool)."""

    dialect: Final = "postgresql"
    Error: Final = psycopg.Error
    IntegrityError: Final = psycopg.IntegrityError

    def __init__(self, raw: Raw, *, where: str, reopen: Callable[[], Raw] | None = None) -> None:
        self.raw = raw
        self.where = where
        self._reopen = reopen
        self.in_write = False
        """Set by the engine from ``BEGIN`` to ``COMMIT``/``ROLLBACK`` of its own transactions: a
        connection lost inside one is not replaced until the engine ends it, so no statement of
        that transaction can run, committed on its own, on a fresh connection."""
        self.held: Callable[[], None] | None = None
        """Set by the engine while it holds back an append's rows to send them with the COMMIT (one
        round trip for rows and commit): called before any other statement on this connection, so
        that every read and write after an append, in the same transaction, sees its rows."""

    # --- Conn -----------------------------------------------------------------------------------

    def execute(self, sql: str, parameters: Params = (), /) -> psycopg.Cursor[tuple[Any, ...]]:
        self._send_held()
        raw = self._live()
        try:
            return raw.execute(pg_sql(sql), parameters)
        except psycopg.Error as e:
            err = self._lost(e)
            if err is None:
                raise
            raise err from e

    def executemany(self, sql: str, parameters: Iterable[Params], /) -> psycopg.Cursor[tuple[Any, ...]]:
        self._send_held()
        raw = self._live()
        cur = raw.cursor()
        try:
            cur.executemany(pg_sql(sql), parameters)  # psycopg pipelines the rows: one round trip
        except psycopg.Error as e:
            err = self._lost(e)
            if err is None:
                raise
            raise err from e
        return cur

    def fetchone(self, sql: str, parameters: Params = ()) -> Row | None:
        row: Row | None = self.execute(sql, parameters).fetchone()
        return row

    def fetchall(self, sql: str, parameters: Params = ()) -> list[Row]:
        return self.execute(sql, parameters).fetchall()

    # --- the engine's own -------------------------------------------------------------------------

    def _send_held(self) -> None:
        send, self.held = self.held, None
        if send is not None:
            send()

    @property
    def in_transaction(self) -> bool:
        raw = self.raw
        return not raw.closed and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def _live(self) -> Raw:
        """The connection; a fresh one when the old one was lost and no transaction spans it (the
        transaction it held is gone with it, and its owner has already been told)."""
        raw = self.raw
        if raw.closed and self._reopen is not None:
            if self.in_write:
                raise StorageUnavailable(
                    f"lost the connection to PostgreSQL at {self.where}: the open transaction went with it"
                )
            self.raw = raw = self._reopen()
        return raw

    def _lost(self, e: psycopg.Error) -> StorageUnavailable | None:
        """``e`` as ``StorageUnavailable`` when it cost the connection, else ``None`` (raised as is)."""
        if not (self.raw.broken or self.raw.closed):
            return None
        return lost(self.where, e)

    def close(self) -> None:
        self.raw.close()


def lost(where: str, e: BaseException) -> StorageUnavailable:
    """The retryable error for a connection the server dropped, in one line."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    return StorageUnavailable(f"lost the connection to PostgreSQL at {where}: {first}")


def translate(e: BaseException, *, where: str | None = None, location: str | None = None) -> HolonError | None:
    """A psycopg error (or SQLAlchemy's wrapping one) as holon's, else ``None``: a server that went
    away is ``StorageUnavailable`` (retryable), anything else a one-line ``LedgerError``."""
    orig = e if isinstance(e, psycopg.Error) else getattr(e, "orig", None)
    if not isinstance(orig, psycopg.Error):
        return None
    if isinstance(orig, psycopg.OperationalError):
        return lost(where or "the server", orig)
    text = str(orig).strip()
    first = text.splitlines()[0] if text else type(orig).__name__
    what = f"the ledger database {location}" if location else "the ledger database"
    return LedgerError(f"{what} cannot be read: {first}")
