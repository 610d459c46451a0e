"""What a command checks first about a ``postgresql://`` storage URL: the driver and the server.

``check_storage`` (``holon.runtime.home``) calls ``check_server`` before anything touches a
database, so the one line a user sees is the useful one: an install without the ``postgres``
extra is told to ``pip install 'holon[postgres]'``, an unreachable server is named as such
("cannot reach PostgreSQL at HOST:PORT: cause", ``StorageUnavailable``, exit 2; the URL's password
never printed). A reachable server is then opened by ``Store.open`` (``PgEngine``). Imports
psycopg only when called: a SQLite home never loads it.
"""

from __future__ import annotations

from holon.errors import ConfigError

__all__ = ["check_server"]


def check_server(url: str, *, timeout_s: float) -> None:
    """Return when PostgreSQL at ``url`` answers; ``ConfigError`` without the driver,
    ``StorageUnavailable`` when the server does not answer within ``timeout_s``."""
    try:
        from holon.ledger.pg.connect import probe
    except ImportError as e:
        raise ConfigError(
            f"storage.url names PostgreSQL but its driver is not installed ({e.name}): pip install 'holon[postgres]'"
        ) from e
    probe(url, timeout_s=timeout_s)
