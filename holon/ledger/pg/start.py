"""What a command does with a ``postgresql://`` storage URL until the engine is wired in.

RFC 0008 builds the PostgreSQL engine in steps; the ledger runs on it (step 4: ``PgEngine``,
which ``Store.open`` picks from the URL), but until the rest of a home does (steps 5-7), a home
whose ``[storage] url`` names PostgreSQL is refused at start by ``holon init``/``holon serve`` and
every command with one line and exit 2, so nobody believes their home is on PostgreSQL while
only its ledger could be. The server is
probed first, so the one line is the more useful of the two: an unreachable server is named as
such ("cannot reach PostgreSQL at HOST:PORT: cause", the message the finished engine gives too).
Imports psycopg only when called: a SQLite home never loads it, and an install without the
``postgres`` extra gets an instruction instead of an ``ImportError``.
"""

from __future__ import annotations

import os

from holon.errors import ConfigError

__all__ = ["PREVIEW_ENV", "refuse_until_wired"]

PREVIEW_ENV = "HOLON_PG_HOME_PREVIEW"
"""Set to ``1``: let a home run on PostgreSQL before step 7 lifts this refusal (the several-node
tests of steps 9-11 need whole daemons there; search is not on PostgreSQL yet). Interim."""


def refuse_until_wired(url: str, *, timeout_s: float) -> None:
    """Raises ``StorageUnavailable`` when the server does not answer, else ``ConfigError`` (unless
    ``HOLON_PG_HOME_PREVIEW=1``, interim: then it returns)."""
    try:
        from holon.ledger.pg.connect import parse_url, probe
    except ImportError as e:
        raise ConfigError(
            f"storage.url names PostgreSQL but its driver is not installed ({e.name}): pip install 'holon[postgres]'"
        ) from e
    pg = parse_url(url)
    probe(url, timeout_s=timeout_s)
    if os.environ.get(PREVIEW_ENV) == "1":
        return
    raise ConfigError(
        f"storage.url names PostgreSQL at {pg.where} (database {pg.dbname}), but holon's PostgreSQL engine is "
        "not wired yet for a whole home (the ledger, projections and the evolve queue run there; the search "
        "index follows: RFC 0008 step 7); leave [storage] url empty to keep the home in its SQLite file, "
        "or use 'holon storage migrate' to copy a home's ledger there"
    )
