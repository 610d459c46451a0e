"""Packages that export their submodules' names on first use (PEP 562).

A package's ``__init__`` that imports the modules of every name it exports makes importing any
one submodule import them all (Python runs the package's ``__init__`` first): the CLI paid for
the ledger's store and every reducer to read three state models (RFC 0005, "Two start-up costs
of a command sent to the daemon"). Such a package names each export's module instead::

    __getattr__ = lazy.exports(__name__, {"Store": "holon.projections.store", ...})

and lists the same imports under ``TYPE_CHECKING`` for mypy and import-linter. A name and a
submodule must not share a name: the import system sets each imported submodule on its package,
and a module attribute is found before ``__getattr__`` is asked.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``homes`` imported from its module (a full
    dotted name) when first asked for, then kept on the package as a plain attribute."""
    clash = [name for name, module in homes.items() if module == f"{package}.{name}"]
    if clash:
        raise ValueError(f"{package}: {clash} would be shadowed by the submodules of the same name")

    def attribute(name: str) -> Any:  # Any: whichever object the name is
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    return attribute
