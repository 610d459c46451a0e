"""The SQLite engine: the ledger in one file beside the home (the embedded default).

``Database`` opens connections with holon's pragmas; ``SqliteEngine`` is the ``Engine`` over it
(``holon.ledger.engine``). Only this package (and the search index's sidecar, ``holon.memory``)
imports ``sqlite3`` (``tests/test_storage_seam.py``).
"""

from holon.ledger.sqlite.db import Database, SqliteConn
from holon.ledger.sqlite.engine import SqliteEngine

__all__ = ["Database", "SqliteConn", "SqliteEngine"]
