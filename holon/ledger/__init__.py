"""The ledger: the append-only SQLite event store every holon state is derived from.

See ``rfcs/0001-ledger-and-projections.md``.
"""

from holon.ledger.db import Database
from holon.ledger.envelope import GENESIS_HASH, Event, NewEvent
from holon.ledger.query import EventKey, EventQuery
from holon.ledger.store import BlobText, Ledger, LedgerStats, Transaction, TransactionHook, VerifyResult

__all__ = [
    "EventKey",
    "EventQuery",
    "GENESIS_HASH",
    "BlobText",
    "Database",
    "Event",
    "Ledger",
    "LedgerStats",
    "NewEvent",
    "Transaction",
    "TransactionHook",
    "VerifyResult",
]
