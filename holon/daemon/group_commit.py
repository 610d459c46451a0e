"""Group commit: inputs arriving together commit together, in one write transaction.

Each HTTP input used to be its own ``BEGIN IMMEDIATE`` ... ``COMMIT``, and with
``synchronous=FULL`` every COMMIT waits for its own fsync. ``GroupCommit.run(body)`` queues a
transaction body and returns its result once it is committed; the bodies queued while the
previous group was committing (or in the same turn of the event loop) run one after another in
one transaction; each body reads what the ones before it appended, exactly as if it had its own
transaction (``Store``'s reads are served from the projector's folded rows, written or not). The commit runs in
a worker thread, so the loop can take the next requests during the fsync (a ledger read on the
loop, such as a request handler's agent lookup, still waits for the group's transaction to end);
a group holds what the loop got through meanwhile (RFC 0001, "The append path").

Nothing is acknowledged before it is durable: a caller's ``await`` returns only after the COMMIT
of the transaction holding its events returned. When any body of a group raises, the whole group
rolls back and every body runs again alone, in its own transaction: one caller's error (an
idempotency conflict, an unknown agent) stays that caller's, and the others commit as they would
have alone.

``enabled=False`` (``[daemon] group_commit = false``) commits each body alone, on the event loop,
as inputs were committed before group commit: the in-run baseline of ``holon bench daemon``'s
input section. The counters (``commits``, ``inputs``) are kept either way and shown by ``GET
/v1/status`` under ``inputs``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from holon.ledger import Ledger, Transaction

__all__ = ["GroupCommit"]

T = TypeVar("T")

Body = Callable[[Transaction], Any]  # Any: each caller's own result type (``run`` restores it)


class _Outcome(Generic[T]):
    __slots__ = ("error", "value")

    def __init__(self, value: T | None = None, error: Exception | None = None) -> None:
        self.value = value
        self.error = error


class GroupCommit:
    """Runs transaction bodies queued together in one write transaction of ``ledger``."""

    def __init__(self, ledger: Ledger, *, max_group: int = 128, enabled: bool = True) -> None:
        self.ledger = ledger
        self.max_group = max_group
        self.enabled = enabled
        self._queue: list[tuple[Body, asyncio.Future[Any]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.groups = 0
        """Transactions committed for groups (a health counter; ``bodies / groups`` is the batching)."""
        self.bodies = 0

    def counters(self) -> dict[str, Any]:
        """What ``GET /v1/status`` shows under ``inputs``: bodies (inputs) committed, in how many
        transactions, and whether they are grouped."""
        return {"group_commit": self.enabled, "inputs": self.bodies, "commits": self.groups}

    async def run(self, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in a write transaction shared with the bodies queued beside it; returns its
        result once that transaction is committed (or raises what ``body`` raised, alone)."""
        if not self.enabled:  # the baseline: alone, in the loop, as before group commit
            with self.ledger.transaction() as tx:
                value = body(tx)
            self.groups += 1
            self.bodies += 1
            return value
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append((body, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            group, self._queue = self._queue[: self.max_group], self._queue[self.max_group :]
            try:
                outcomes = await asyncio.to_thread(self._commit, [body for body, _ in group])
            except BaseException as e:  # the worker itself failed (cancelled, interpreter stopping)
                for _, future in group:
                    if not future.done():
                        future.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
                raise
            for (_, future), outcome in zip(group, outcomes, strict=True):
                if future.done():  # the caller went away (its request was cancelled)
                    continue
                if outcome.error is not None:
                    future.set_exception(outcome.error)
                else:
                    future.set_result(outcome.value)

    def _commit(self, bodies: list[Body]) -> list[_Outcome[Any]]:
        """One transaction for all of ``bodies``; if any raises, each alone in its own."""
        if len(bodies) > 1:
            try:
                values = []
                with self.ledger.transaction() as tx:
                    for body in bodies:
                        values.append(body(tx))
            except Exception:  # whose error it was is found by running each alone below
                pass
            else:
                self.groups += 1
                self.bodies += len(bodies)
                return [_Outcome(v) for v in values]
        outcomes: list[_Outcome[Any]] = []
        for body in bodies:
            try:
                with self.ledger.transaction() as tx:
                    outcomes.append(_Outcome(body(tx)))
            except Exception as e:
                outcomes.append(_Outcome(error=e))
            self.groups += 1
            self.bodies += 1
        return outcomes
