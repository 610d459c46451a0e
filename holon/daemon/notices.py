"""Notices: the daemon's live fan-out to streams (``subscribe``).

Three kinds (``holon.api.port.Notice``): every new ledger event by seq (``event``, published by
the watcher, ``holon.daemon.wakes``), the text of replies being generated (``delta``, from the
turn observer) and model children starting (``model``, sent to every stream). A stalled reader
loses notices past ``QUEUE_LIMIT``; it catches up from the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from holon.api.port import Notice
from holon.errors import NotFoundError
from holon.projections import Store

__all__ = ["QUEUE_LIMIT", "Notices"]

QUEUE_LIMIT = 10_000


class Notices:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.subscribers: list[tuple[str | None, asyncio.Queue[Notice]]] = []
        self.models_starting: set[str] = set()
        """Model children starting now (``model process``, ``local model``): told to new subscribers."""

    def notify(self, notice: Notice) -> None:
        for wanted, queue in self.subscribers:
            if wanted is None or wanted == notice.agent_id or notice.kind == "model":
                with contextlib.suppress(asyncio.QueueFull):  # a stalled reader catches up from the ledger
                    queue.put_nowait(notice)

    def event(self, agent_id: str, seq: int) -> None:
        self.notify(Notice(kind="event", agent_id=agent_id, seq=seq))

    def delta(self, agent_id: str, fragment: str) -> None:
        if not self.subscribers:
            return
        # The turn's id from its projection (set when the turn started, before any model call): the
        # watcher's view lags, and a copy of it was seen a turn behind. ``seq``: the ledger head as
        # this text is written; the watcher publishes events by polling, so a stream sends the
        # events up to it first (a tool's result before the next round's text).
        turn_id = self.store.agent(agent_id).current_turn_id
        head = self.store.ledger.head()
        self.notify(Notice(kind="delta", agent_id=agent_id, seq=head, text=fragment, turn_id=turn_id))

    def model_state(self, what: str, state: str) -> None:
        """A model child is ``starting``, ``ready`` or ``failed``: a live notice to every stream."""
        if state == "starting":
            self.models_starting.add(what)
        else:
            self.models_starting.discard(what)
        self.notify(Notice(kind="model", agent_id="", text=what, state=state))

    async def subscribe(self, agent_id: str | None = None) -> AsyncIterator[Notice]:
        queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        if agent_id is not None:
            with contextlib.suppress(NotFoundError):  # a name is fine too; an unknown id may appear later
                agent_id = self.store.agent(agent_id).agent_id
        entry = (agent_id, queue)
        self.subscribers.append(entry)
        for what in sorted(self.models_starting):  # a start under way: the newcomer hears of it too
            queue.put_nowait(Notice(kind="model", agent_id="", text=what, state="starting"))
        try:
            while True:
                yield await queue.get()
        finally:
            self.subscribers.remove(entry)
