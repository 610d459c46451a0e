"""holon: a long-lived agent runtime built on an append-only ledger.

The package is layered (see ``rfcs/0001-ledger-and-projections.md`` and the import-linter
contract in ``pyproject.toml``); dependencies point down only::

    holon.cli
    holon.bench
    holon.projections
    holon.ledger
    holon.config | holon.clock | holon.ids | holon.errors | holon.logs
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
