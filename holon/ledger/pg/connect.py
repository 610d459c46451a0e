"""Reaching a PostgreSQL server: the URL, one connection, the pool, and the start-up probe.

Every way in goes through ``connect`` or ``open_pool`` so that a server that does not answer is
always the same one-line ``StorageUnavailable`` ("cannot reach PostgreSQL at HOST:PORT: cause",
exit 2 at start; RFC 0008, "Unreachable at start"), naming host and port and never the URL's
password. ``connect_timeout`` bounds a server that swallows packets (libpq waits forever by
default). The pool has no checkout ``check``: a failed check makes psycopg_pool sleep a second
before the next try (measured in RFC 0008, "Lost mid-run"); a dead connection is instead seen once
by its caller, and the next checkout reconnects.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from holon.errors import ConfigError, StorageUnavailable

__all__ = ["DEFAULT_PORT", "PgUrl", "connect", "open_pool", "parse_url", "probe", "unreachable"]

DEFAULT_PORT = 5432
_AUTO_PREPARE = 5
"""psycopg's default: a statement is prepared on the server after its fifth run (11-21% less
client CPU per statement, RFC 0008 "The driver"); ``[storage] prepare = false`` turns it off."""


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A ``postgresql://`` URL taken apart: what messages may show of it (never the password)."""

    url: str
    host: str
    port: int
    dbname: str
    user: str

    @property
    def where(self) -> str:
        """``HOST:PORT`` (a Unix socket directory when the URL names no host, as libpq does)."""
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> PgUrl:
    """``url`` as a ``PgUrl``; ``ConfigError`` (one line) when libpq would not understand it."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise ConfigError(f"storage.url is not a PostgreSQL URL libpq understands: {_first_line(e)}") from e
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    try:
        port = int(params.get("port") or DEFAULT_PORT)
    except ValueError as e:
        raise ConfigError(f"storage.url: port {params.get('port')!r} is not a number") from e
    user = str(params.get("user") or "")
    return PgUrl(url=url, host=host, port=port, dbname=str(params.get("dbname") or user), user=user)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def unreachable(pg: PgUrl, e: BaseException) -> StorageUnavailable:
    """The one-line error for a connection that failed: the cause as libpq states it, without its
    ``connection to server at "...", port N failed:`` preamble (host and port come first anyway)."""
    line = _first_line(e)
    cause = re.split(r"\bfailed:\s*", line)[-1].strip() or line
    if cause[:1].isupper() and cause[1:2].islower():
        cause = cause[0].lower() + cause[1:]
    return StorageUnavailable(f"cannot reach PostgreSQL at {pg.where}: {cause}")


def _kwargs(timeout_s: float, *, prepare: bool, autocommit: bool) -> dict[str, Any]:
    return {
        # libpq takes whole seconds (and treats 1 as 2); never 0, which means "wait forever"
        "connect_timeout": max(2, math.ceil(timeout_s)),
        "prepare_threshold": _AUTO_PREPARE if prepare else None,
        "autocommit": autocommit,
    }


def connect(
    url: str, *, timeout_s: float = 5.0, autocommit: bool = True, prepare: bool = True
) -> psycopg.Connection[tuple[Any, ...]]:
    """A new connection (the caller closes it); ``StorageUnavailable`` when the server does not answer.

    Autocommit by default: holon issues ``BEGIN`` and ``COMMIT`` itself, as on SQLite
    (``holon.ledger.sqlite.db``), so that a transaction's first statement can share a pipeline with it."""
    pg = parse_url(url)
    try:
        return psycopg.connect(url, **_kwargs(timeout_s, prepare=prepare, autocommit=autocommit))
    except psycopg.OperationalError as e:
        raise unreachable(pg, e) from e


def probe(url: str, *, timeout_s: float = 5.0) -> int:
    """Connect once and return the server's version number (``150020``); ``StorageUnavailable`` if
    it does not answer. What a command runs before anything else touches the database."""
    with connect(url, timeout_s=timeout_s) as conn:
        return int(conn.info.server_version)


def open_pool(
    url: str, *, size: int = 8, timeout_s: float = 5.0, prepare: bool = True, name: str = "holon"
) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
    """A started pool of autocommit connections for readers (the appender keeps its own connection).

    One direct connection first: a server that does not answer is reported at once with libpq's
    cause (the pool's workers would retry in the background until its timeout and only log why);
    then the pool waits for its first connections."""
    pg = parse_url(url)
    probe(url, timeout_s=timeout_s)
    pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
        url,
        min_size=min(2, size),
        max_size=size,
        kwargs=_kwargs(timeout_s, prepare=prepare, autocommit=True),
        timeout=timeout_s,
        name=name,
        open=False,
    )
    try:
        pool.open(wait=True, timeout=timeout_s + 1)
    except PoolTimeout as e:  # it answered the probe, then stopped answering
        pool.close()
        raise StorageUnavailable(f"cannot reach PostgreSQL at {pg.where}: no connection within {timeout_s:g} s") from e
    return pool
