"""Group commit: inputs arriving together share one transaction; an error stays its caller's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from helpers.factories import agent_created, make_event

from holon.daemon.group_commit import GroupCommit
from holon.errors import IdempotencyConflict
from holon.ledger import Transaction
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.ingress import deliver_input

A = "agt_alice"


def _deliver(store: Store, text: str, key: str | None = None) -> Callable[[Transaction], int]:
    def body(tx: Transaction) -> int:
        stored, _ = deliver_input(
            store, A, text, origin="operator:api", authority="operator", sender="operator", channel="api",
            wakes=("operator", None), idempotency_key=key, tx=tx,
        )  # fmt: skip
        return stored.seq

    return body


def test_inputs_queued_together_commit_in_one_transaction(store: Store) -> None:
    store.append(agent_created(A, "alice"))
    group = GroupCommit(store.ledger)

    async def main() -> list[int]:
        return await asyncio.gather(*(group.run(_deliver(store, f"input {i}")) for i in range(20)))

    seqs = asyncio.run(main())
    assert seqs == list(range(2, 22))
    assert (group.groups, group.bodies) == (1, 20)
    assert store.agent("alice").pending_inputs == seqs
    assert store.ledger.verify().ok and store.replay().ok


def test_each_body_reads_what_the_ones_before_it_wrote(store: Store) -> None:
    """A pending operator wait is resolved by the first input of the group only, as if each input
    had its own transaction (the projection rows are flushed between the bodies)."""
    store.append(agent_created(A, "alice"))
    store.append(make_event(A, ev.WaitRegistered(wait_id="w1", on="operator", recheck_at_us=10**15)))
    group = GroupCommit(store.ledger)

    async def main() -> list[int]:
        return await asyncio.gather(*(group.run(_deliver(store, f"reply {i}")) for i in range(3)))

    asyncio.run(main())
    assert group.groups == 1
    types = [e.type for e in store.ledger.read()]
    assert types.count("wait.resolved") == 1
    assert store.replay().ok


def test_an_error_fails_only_its_own_input(store: Store) -> None:
    store.append(agent_created(A, "alice"))
    first = GroupCommit(store.ledger)

    async def seed() -> int:
        return await first.run(_deliver(store, "hello", key="k1"))

    seeded = asyncio.run(seed())
    group = GroupCommit(store.ledger)

    async def main() -> list[int | BaseException]:
        bodies = [_deliver(store, "a"), _deliver(store, "different", key="k1"), _deliver(store, "b")]
        return await asyncio.gather(*(group.run(b) for b in bodies), return_exceptions=True)

    a, conflict, b = asyncio.run(main())
    assert isinstance(conflict, IdempotencyConflict) and "k1" in str(conflict)
    assert isinstance(a, int) and isinstance(b, int) and b == a + 1 and a == seeded + 1
    assert store.ledger.head() == b
    with pytest.raises(IdempotencyConflict):  # the same as alone, outside any group
        deliver_input(
            store, A, "different", origin="o", authority="operator", sender="s", channel="c", idempotency_key="k1"
        )


def test_disabled_commits_each_input_alone(store: Store) -> None:
    """``[daemon] group_commit = false``: every body its own transaction, as before group commit;
    the counters say so (one input per commit)."""
    store.append(agent_created(A, "alice"))
    group = GroupCommit(store.ledger, enabled=False)

    async def main() -> list[int]:
        return await asyncio.gather(*(group.run(_deliver(store, f"input {i}")) for i in range(5)))

    seqs = asyncio.run(main())
    assert seqs == list(range(2, 7))
    assert group.counters() == {"group_commit": False, "inputs": 5, "commits": 5}
    assert store.agent("alice").pending_inputs == seqs
    assert store.ledger.verify().ok and store.replay().ok
