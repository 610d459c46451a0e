"""The ledger's start-up check split around the daemon's start (``holon.daemon.ledger_check``,
RFC 0005 "Healthy before the heavy imports"): the bounded part refuses at once; the page walk runs
in a thread, waited for before any input on a small file, and on a large one stops the running
daemon with the same error. A stand-in ledger decides what the checks find (real damage on real
files is covered by ``tests/test_ledger_damage.py`` and ``tests/test_daemon_start_errors.py``)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from holon.daemon.ledger_check import PAGES_BEFORE_INPUT_BYTES, check_ledger
from holon.errors import LedgerError


class _Ledger:
    def __init__(self, *, bounded: str | None, pages: str | None, gate: threading.Event | None = None) -> None:
        self.bounded, self.pages, self.gate = bounded, pages, gate
        self.calls: list[bool] = []

    def start_check(self, *, pages: bool = True) -> str | None:
        self.calls.append(pages)
        if not pages:
            return self.bounded
        if self.gate is not None:
            self.gate.wait()
        return self.pages


def _store(tmp_path: Path, ledger: _Ledger, size: int) -> Any:
    db = tmp_path / "holon.db"
    with db.open("wb") as fh:
        fh.truncate(size)  # sparse: only its size matters
    store = SimpleNamespace(ledger=ledger, paths=SimpleNamespace(db=db, root=tmp_path), closed=False)
    store.close = lambda: setattr(store, "closed", True)
    return store


def test_the_bounded_part_refuses_before_anything_starts(tmp_path: Path) -> None:
    ledger = _Ledger(bounded="event 7: hash does not match its content", pages=None)
    store = _store(tmp_path, ledger, 1024)
    with pytest.raises(LedgerError, match="event 7") as e:
        check_ledger(store)
    assert "holon ledger verify --home" in e.value.message and store.closed
    assert ledger.calls == [False], "no page walk starts for a ledger already refused"


def test_a_small_ledger_is_walked_before_the_daemon_takes_input(tmp_path: Path) -> None:
    ledger = _Ledger(bounded=None, pages="the database file is damaged (PRAGMA quick_check: ...)")
    pages = check_ledger(_store(tmp_path, ledger, PAGES_BEFORE_INPUT_BYTES))
    with pytest.raises(LedgerError, match="start-up check: the database file is damaged"):
        pages.settle()  # waits for the walk
    assert ledger.calls == [False, True]


def test_a_large_ledger_is_walked_while_the_daemon_runs_and_damage_stops_it(tmp_path: Path) -> None:
    gate = threading.Event()
    ledger = _Ledger(bounded=None, pages="the database file is damaged (PRAGMA quick_check: ...)", gate=gate)
    pages = check_ledger(_store(tmp_path, ledger, PAGES_BEFORE_INPUT_BYTES + 1))
    pages.settle()  # does not wait: the walk has not even started
    assert ledger.calls == [False]

    async def daemon() -> None:
        stop, listening = asyncio.Event(), asyncio.Event()
        watch = asyncio.create_task(pages.watch(stop, after=listening))
        await asyncio.sleep(0)
        assert ledger.calls == [False], "the walk waits for the API"
        listening.set()

        async def walk_started() -> None:  # the walk started; it is held at its gate
            while len(ledger.calls) < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(walk_started(), timeout=30)  # a deadline, not a duration
        assert not stop.is_set() and not pages.done.is_set()
        gate.set()  # the walk ends and finds the damage
        await watch
        assert stop.is_set()

    asyncio.run(daemon())
    with pytest.raises(LedgerError, match="start-up check: the database file is damaged"):
        pages.raise_problem()


def test_a_sound_large_ledger_stops_nothing(tmp_path: Path) -> None:
    pages = check_ledger(_store(tmp_path, _Ledger(bounded=None, pages=None), PAGES_BEFORE_INPUT_BYTES + 1))

    async def daemon() -> None:
        stop = asyncio.Event()
        await pages.watch(stop)
        assert not stop.is_set()

    asyncio.run(daemon())
    pages.raise_problem()
