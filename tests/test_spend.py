"""The typed spend read behind daily budgets: events through the codec, a pure reducer, a window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from holon.clock import FakeClock
from holon.ledger import Database, Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import UPCASTERS
from holon.projections import spend
from holon.projections.spend import Spend, spend_of, spent_in_window

DAY_US = 86_400 * 1_000_000


def _settled(tokens: int, cost: float | None) -> ev.TurnSettled:
    return ev.TurnSettled(turn_id="t", outcome="completed", usage=ev.Usage(total_tokens=tokens), cost_usd=cost)


def _used(tokens: int, cost: float | None) -> ev.EvolveModelUsed:
    return ev.EvolveModelUsed(job="j", turn_id="t", model="m", usage=ev.Usage(total_tokens=tokens), cost_usd=cost)


def test_spend_of_counts_turns_tokens_and_dollars() -> None:
    assert spend_of(_settled(10, 0.5)) == Spend(1, 10, 0.5)
    assert spend_of(_settled(10, None)) == Spend(1, 10, 0.0)
    assert spend_of(_used(7, 0.25)) == Spend(0, 7, 0.25)
    assert spend_of(ev.MessageReceived(text="hi")) == Spend()


@pytest.mark.parametrize("chunk", [1, 2, 256])
def test_the_window_walk_counts_only_the_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(spend, "_CHUNK", chunk)
    day_start = (1_767_225_600_000_000 // DAY_US + 1) * DAY_US
    clock = FakeClock(start_us=day_start - 1_000)
    ledger = Ledger(Database(tmp_path / "holon.db", synchronous="OFF"), clock=clock)
    try:
        ledger.append(NewEvent("a", _settled(1_000, 9.0)))  # yesterday
        clock.advance(us=2_000)
        for tokens in (10, 20, 30):
            ledger.append(NewEvent("a", _settled(tokens, 0.5)), NewEvent("b", _settled(99, 1.0)))
        ledger.append(NewEvent("a", _used(5, 0.25)), NewEvent("a", ev.MessageReceived(text="not spending")))
        head = ledger.head()
        got = spent_in_window(ledger, "a", start_us=day_start, end_us=day_start + DAY_US, upto=head)
        assert got == Spend(3, 65, 1.75)
        # ``upto`` bounds the read; ``base`` is added to.
        first = spent_in_window(
            ledger, "a", start_us=day_start, end_us=day_start + DAY_US, upto=3, base=Spend(1, 1, 1.0)
        )
        assert first == Spend(2, 11, 1.5)
    finally:
        ledger.close()


def test_an_old_version_is_upcast_before_it_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``turn.settled`` stored at an older version is read through its upcaster, so a new version
    of the event cannot silently stop budgets from counting."""
    ledger = Ledger(Database(tmp_path / "holon.db", synchronous="OFF"), clock=FakeClock())
    try:
        ledger.append(NewEvent("a", _settled(40, 2.0)))
        # Pretend turn.settled is now at v2, with an upcaster that doubles what v1 recorded.
        monkeypatch.setattr(ev.TurnSettled, "VERSION", 2)

        def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
            usage = dict(data.get("usage") or {})
            usage["total_tokens"] = 2 * int(usage.get("total_tokens", 0))
            return {**data, "usage": usage}

        monkeypatch.setitem(UPCASTERS, ("turn.settled", 1), v1_to_v2)
        got = spent_in_window(ledger, "a", start_us=0, end_us=2**62, upto=ledger.head())
        assert got == Spend(1, 80, 2.0)
    finally:
        ledger.close()
