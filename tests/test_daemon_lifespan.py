"""The daemon's one lifespan (``holon.daemon.lifespan``): the stop undoes the start in reverse, and
a start that fails half-way undoes what it did. A real ``Daemon`` on a real store; no model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers.wait import await_for

from holon.daemon import Daemon
from holon.errors import ConflictError
from holon.projections import Store
from holon.runtime.ingress import InputSpec

pytestmark = pytest.mark.timeout(60)


def _no_model(agent: Any) -> Any:
    raise AssertionError("no turn runs in these tests")


def test_running_opens_then_closes_everything(store: Store) -> None:
    asyncio.run(_opens_then_closes(store))


async def _opens_then_closes(store: Store) -> None:
    daemon = Daemon(store, resolver=_no_model, poll_s=0.01)
    async with daemon.running(grace_s=0):
        assert daemon.accepting and daemon.started_us is not None
        assert daemon.timers.scheduler.running
        daemon.create_agent("ann", settings={"paused": True})
        stored = daemon.submit("ann", InputSpec("hello", origin="operator:test", channel="test"))
        assert stored.payload.text == "hello"  # type: ignore[attr-defined]
    assert not daemon.accepting
    await await_for("APScheduler to stop (on the loop's next pass)", lambda: not daemon.timers.scheduler.running)
    with pytest.raises(ConflictError, match="not taking input"):
        daemon.submit("ann", "again")
    again = Daemon(store, resolver=_no_model, poll_s=0.01)  # the host lock was let go
    async with again.running(grace_s=0):
        assert again.accepting


def test_a_start_that_fails_undoes_what_it_did(store: Store) -> None:
    asyncio.run(_fails_half_way(store))


async def _fails_half_way(store: Store) -> None:
    first = Daemon(store, resolver=_no_model, poll_s=0.01)
    async with first.running(grace_s=0):
        second = Daemon(store, resolver=_no_model, poll_s=0.01)
        with pytest.raises(ConflictError, match="another holon process"):
            async with second.running():
                raise AssertionError("a second daemon on the same home must not start")
        assert not second.accepting and not second.timers.scheduler.running
        assert first.accepting
        first.create_agent("bob")
        assert [a["name"] for a in first.status()["agents"]] == ["bob"]
