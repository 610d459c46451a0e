"""Marks for tests that run over both storage engines (the ``engine`` fixture, RFC 0008 "Tests")."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["sqlite_only"]


def sqlite_only(why: str) -> Any:  # Any: pytest's MarkDecorator
    """Run this test on the SQLite engine only; ``why`` says what it checks that only SQLite has
    (a raw ``sqlite3`` connection, the file, its pragmas). Not a skip: the PostgreSQL instance is
    never generated, so no ``postgresql`` test reports skipped."""
    assert why, "say why the test is SQLite's alone"
    return pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
