"""An idle daemon sleeps (issue 14, finding 11: 1,000 idle agents used 6-10% of a core).

What woke it: ``holon serve`` rebuilt ``daemon.json`` every second, a few queries per agent, and
the watcher polled the ledger head 20 times a second whatever happened. Now the status file is
rebuilt only when ``Daemon.status_key`` moves (and the status reads every agent's waits and timers
in two queries), and the watcher backs off to ``IDLE_POLL_S`` while nothing happens. The CPU
itself is measured by ``holon bench daemon`` (``idle_cpu_pct_1000_agents``), not asserted here:
these tests pin the mechanisms, without clocks.
"""

from __future__ import annotations

import asyncio

import pytest

from holon.clock import FakeClock
from holon.daemon import Daemon
from holon.daemon.core import IDLE_POLL_S, watch_interval
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent

pytestmark = pytest.mark.timeout(60)


def test_the_watcher_backs_off_while_idle_and_snaps_back_on_news() -> None:
    waits, interval = [], 0.05
    for _ in range(8):
        interval = watch_interval(interval, busy=False, poll_s=0.05)
        waits.append(interval)
    assert waits[:4] == [0.1, 0.2, 0.4, IDLE_POLL_S] and set(waits[4:]) == {IDLE_POLL_S}
    assert watch_interval(IDLE_POLL_S, busy=True, poll_s=0.05) == 0.05
    assert watch_interval(0.01, busy=False, poll_s=2.0) == 2.0  # never faster than asked when idle


def _no_model(agent: object) -> tuple[object, object]:
    raise AssertionError("these agents never call a model")


def _daemon(store: Store) -> Daemon:
    return Daemon(store, resolver=_no_model, poll_s=0.01)  # type: ignore[arg-type]


def test_status_key_holds_still_while_idle_and_moves_with_the_ledger(store: Store) -> None:
    for name in ("a1", "a2", "a3"):
        create_agent(store, name)

    async def main() -> None:
        daemon = _daemon(store)
        async with daemon.running(grace_s=1):
            daemon.configure_agent("a1", {"paused": True})  # its input stays queued: no model call
            await daemon.until_idle(timeout_s=10)
            key = daemon.status_key()
            assert [daemon.status_key() for _ in range(3)] == [key] * 3, "nothing happened, yet the key moved"
            daemon.submit("a1", "hello", origin="operator:test", authority="operator", sender="op", channel="test")
            assert daemon.status_key() != key, "an input arrived but the status file would not be rebuilt"

    asyncio.run(main())


def test_status_reads_waits_and_timers_in_bulk_and_agrees_with_each_agent(store: Store, clock: FakeClock) -> None:
    ids = {name: create_agent(store, name).agent_id for name in ("waiter", "sleeper", "timed", "plain")}
    now = clock.now_us()
    store.append(
        NewEvent(ids["waiter"], ev.WaitRegistered(wait_id="w1", on="operator", recheck_at_us=now + 3_600_000_000,
                                                  reason="approval"), origin="operator:test", authority="operator"),
        NewEvent(ids["sleeper"], ev.WaitRegistered(wait_id="w2", on="until", recheck_at_us=now + 7_200_000_000),
                 origin="operator:test", authority="operator"),
    )  # fmt: skip

    async def main() -> None:
        daemon = _daemon(store)
        async with daemon.running(grace_s=1):
            daemon.add_timer("timed", "every 1d", prompt="daily")
            status = daemon.status()
            by_name = {a["name"]: a for a in status["agents"]}
            for agent in store.agents():
                one = daemon.agent_status(agent)  # reads its own waits and timers
                row = by_name[agent.name]
                assert (row["state"], row["detail"], row["next_wake_us"]) == (one.state, one.detail, one.next_wake_us)
            assert by_name["waiter"]["state"] == "waiting" and by_name["waiter"]["waits"][0]["wait_id"] == "w1"
            assert by_name["sleeper"]["state"] == "asleep" and by_name["sleeper"]["waits"][0]["on"] == "until"
            assert by_name["timed"]["state"] == "asleep" and by_name["timed"]["next_wake_us"] is not None
            assert by_name["plain"]["state"] == "idle" and "waits" not in by_name["plain"]

    asyncio.run(main())
