"""What a command does with a ``postgresql://`` storage URL until the engine is wired in.

RFC 0008 builds the PostgreSQL engine in steps; until ``holon.ledger.engine`` opens one (step 4
integrated), a home whose ``[storage] url`` names PostgreSQL is refused at start with one line
and exit 2, so nobody believes their ledger is on PostgreSQL while it is not. The server is
probed first, so the one line is the more useful of the two: an unreachable server is named as
such ("cannot reach PostgreSQL at HOST:PORT: cause", the message the finished engine gives too).
Imports psycopg only when called: a SQLite home never loads it, and an install without the
``postgres`` extra gets an instruction instead of an ``ImportError``.
"""

from __future__ import annotations

from holon.errors import ConfigError

__all__ = ["refuse_until_wired"]


def refuse_until_wired(url: str, *, timeout_s: float) -> None:
    """Always raises: ``StorageUnavailable`` when the server does not answer, else ``ConfigError``."""
    try:
        from holon.ledger.pg.connect import parse_url, probe
    except ImportError as e:
        raise ConfigError(
            f"storage.url names PostgreSQL but its driver is not installed ({e.name}): pip install 'holon[postgres]'"
        ) from e
    pg = parse_url(url)
    probe(url, timeout_s=timeout_s)
    raise ConfigError(
        f"storage.url names PostgreSQL at {pg.where} (database {pg.dbname}), but holon's PostgreSQL engine is "
        "not wired yet (RFC 0008, step 4); leave [storage] url empty to keep the ledger in the home's SQLite file"
    )
