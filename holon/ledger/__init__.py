"""The ledger: the append-only event store every holon state is derived from (SQLite by default).

See ``rfcs/0001-ledger-and-projections.md``.

The names below are imported when first used (``__getattr__``), so importing one submodule
(``holon.ledger.events`` for the event models) does not import the store and its engines:
the CLI's commands that only talk to the daemon start faster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holon import lazy

if TYPE_CHECKING:
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

#: Each public name's module, imported when the name is first used (``holon.lazy``).
__getattr__ = lazy.exports(
    __name__,
    {
        "Engine": "holon.ledger.engine",
        "GENESIS_HASH": "holon.ledger.envelope",
        "Event": "holon.ledger.envelope",
        "NewEvent": "holon.ledger.envelope",
        "EventKey": "holon.ledger.query",
        "EventQuery": "holon.ledger.query",
        "Database": "holon.ledger.sqlite",
        "BlobText": "holon.ledger.store",
        "Ledger": "holon.ledger.store",
        "LedgerStats": "holon.ledger.store",
        "Transaction": "holon.ledger.store",
        "TransactionHook": "holon.ledger.store",
        "VerifyResult": "holon.ledger.store",
    },
)
