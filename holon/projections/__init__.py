"""Projections: state derived from the ledger by pure reducers, kept current inside each append.

See ``rfcs/0001-ledger-and-projections.md``.
"""

from holon.projections.fold import KINDS, derive, fold, fold_event, working_memory_view
from holon.projections.projector import PROJECTOR_VERSION, Projector
from holon.projections.replay import ReplayResult, replay
from holon.projections.store import Store

__all__ = [
    "KINDS",
    "PROJECTOR_VERSION",
    "Projector",
    "ReplayResult",
    "Store",
    "derive",
    "fold",
    "fold_event",
    "replay",
    "working_memory_view",
]
