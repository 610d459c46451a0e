"""The ledger: the append-only event store every holon state is derived from (SQLite by default).

See ``rfcs/0001-ledger-and-projections.md``.
"""

from holon.ledger.engine import Engine
from holon.ledger.envelope import GENESIS_HASH, Event, NewEvent
from holon.ledger.query import EventKey, EventQuery
from holon.ledger.sqlite import Database
from holon.ledger.store import BlobText, Ledger, LedgerStats, Transaction, TransactionHook, VerifyResult

__all__ = [
    "EventKey",
    "EventQuery",
    "GENESIS_HASH",
    "BlobText",
    "Database",
    "Engine",
    "Event",
    "Ledger",
    "LedgerStats",
    "NewEvent",
    "Transaction",
    "TransactionHook",
    "VerifyResult",
]
