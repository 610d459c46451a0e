"""Projections: state derived from the ledger by pure reducers, kept current inside each append.

See ``rfcs/0001-ledger-and-projections.md``.

The names below are imported when first used (``__getattr__``), so importing one submodule
(``holon.projections.state`` for the state models) does not import the store, the reducers and
the projector: the CLI's commands that only talk to the daemon start faster. The functions ``fold`` and
``replay`` are imported from their modules (``holon.projections.fold``, ``.replay``), whose
names they would shadow here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

#: Each public name -> the module that defines it (imported on first use: ``__getattr__``).
_LAZY = {
    "KINDS": "holon.projections.fold",
    "derive": "holon.projections.fold",
    "fold_event": "holon.projections.fold",
    "working_memory_view": "holon.projections.fold",
    "PROJECTOR_VERSION": "holon.projections.projector",
    "Projector": "holon.projections.projector",
    "ReplayResult": "holon.projections.replay",
    "Store": "holon.projections.store",
}


def __getattr__(name: str) -> Any:  # Any: whichever public object ``name`` is
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value
