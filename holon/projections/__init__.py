"""Projections: state derived from the ledger by pure reducers, kept current inside each append.

See ``rfcs/0001-ledger-and-projections.md``.

The names below are imported when first used (``__getattr__``), so importing one submodule
(``holon.projections.state`` for the state models) does not import the store, the reducers and
the projector: the CLI's commands that only talk to the daemon start faster. The functions ``fold`` and
``replay`` are imported from their modules (``holon.projections.fold``, ``.replay``), whose
names they would shadow here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holon import lazy

if TYPE_CHECKING:
    from holon.projections.fold import KINDS, derive, fold_event, working_memory_view
    from holon.projections.projector import PROJECTOR_VERSION, Projector
    from holon.projections.replay import ReplayResult
    from holon.projections.store import Store

__all__ = [
    "KINDS",
    "PROJECTOR_VERSION",
    "Projector",
    "ReplayResult",
    "Store",
    "derive",
    "fold_event",
    "working_memory_view",
]

#: Each public name's module, imported when the name is first used (``holon.lazy``).
__getattr__ = lazy.exports(
    __name__,
    {
        "KINDS": "holon.projections.fold",
        "derive": "holon.projections.fold",
        "fold_event": "holon.projections.fold",
        "working_memory_view": "holon.projections.fold",
        "PROJECTOR_VERSION": "holon.projections.projector",
        "Projector": "holon.projections.projector",
        "ReplayResult": "holon.projections.replay",
        "Store": "holon.projections.store",
    },
)
