"""Picking the ledger's engine from ``[storage] url`` (RFC 0008): the home's SQLite file by default,
or a PostgreSQL database.

The one place that turns a setting into an ``Engine``; nothing is connected here (``Ledger`` opens
it). psycopg is imported only for a ``postgresql://`` URL, so a SQLite home never loads it; an
install without the ``postgres`` extra is told how to get it instead of an ``ImportError``.
"""

from __future__ import annotations

from holon.config import HomePaths, Settings, storage_target
from holon.errors import ConfigError
from holon.ledger.engine import Engine
from holon.ledger.sqlite import Database, SqliteEngine

__all__ = ["engine_for"]


def engine_for(paths: HomePaths, settings: Settings) -> Engine:
    """The (unopened) engine of ``paths``' ledger as ``settings`` place it."""
    target = storage_target(paths, settings.storage)
    if target.engine == "postgresql":
        try:
            from holon.ledger.pg.engine import PgEngine
        except ImportError as e:
            raise ConfigError(
                f"storage.url names PostgreSQL but its driver is not installed ({e.name}): "
                "pip install 'holon[postgres]'"
            ) from e
        storage = settings.storage
        return PgEngine(
            target.url, timeout_s=storage.connect_timeout_s, pool_size=storage.pool_size, prepare=storage.prepare
        )
    assert target.path is not None  # a SQLite target always names its file
    cfg = settings.ledger
    return SqliteEngine(Database(target.path, synchronous=cfg.synchronous, busy_timeout_ms=cfg.busy_timeout_ms))
