"""A timer's firing: recorded in the ledger (coalescing missed ones), then delivered as an input.

APScheduler (``holon.daemon.timers``) decides when; ``TimerFiring.fire`` decides what is recorded.
While an input of this timer is still undelivered (the agent is paused, over budget or busy), the
firing is recorded with every due time counted as ``missed`` but adds no input: the agent gets one
prompt however long it could not run, not one per firing.
"""

from __future__ import annotations

from collections.abc import Callable

from holon.clock import Clock
from holon.daemon.wakes import Phase, Wakes
from holon.errors import NotFoundError
from holon.ledger import EventQuery, NewEvent
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import TimerProjection
from holon.runtime.inputs import input_events
from holon.runtime.schedule import due_firings, next_after

__all__ = ["EARLY_US", "TimerFiring"]

log = get_logger("holon.daemon")

EARLY_US = 50_000
"""APScheduler may run a job a hair early: due times this close count as due."""


class TimerFiring:
    def __init__(self, store: Store, *, clock: Clock, wakes: Wakes, phase: Phase) -> None:
        self.store = store
        self.clock = clock
        self.wakes = wakes
        self.phase = phase
        self.owns: Callable[[str], bool] = lambda agent_id: True
        """Whose timers this node fires (RFC 0008: the agent's owner)."""

    async def fire(self, timer_id: str) -> None:
        """Record a firing (coalescing missed ones) and deliver it to the agent as an input.

        Nothing while the daemon stops: the firing stays due in the projection, and the next start
        records it (coalesced)."""
        if self.phase.draining:
            return
        timer = self.store.timer(timer_id)
        if not isinstance(timer, TimerProjection) or timer.status != "scheduled" or not self.owns(timer.agent_id):
            return  # gone, or (several nodes) the agent's owner fires it; its key records it once anyway
        last, count = due_firings(timer, self.clock.now_us() + EARLY_US)
        if count == 0:
            return
        queued = self.input_pending(timer)
        missed = count if queued else count - 1
        nxt = next_after(timer.kind, timer.spec, last)
        key = f"timer:{timer_id}:{last}"
        note = f" ({missed} earlier firings were missed while holon was down.)" if missed else ""
        text = (timer.prompt or f"Timer {timer_id} fired.") + note
        inputs = input_events(
            self.store, timer.agent_id, text, origin=f"timer:{timer_id}", authority="timer", sender="timer",
            channel="timer", wakes=("timer", timer_id),
        )  # fmt: skip
        if queued:
            inputs = inputs[:-1]  # only the waits it resolves; the queued input carries the prompt
        keyed = [
            NewEvent(e.agent_id, e.payload, origin=e.origin, authority=e.authority, idempotency_key=f"{key}:{i}")
            for i, e in enumerate(inputs)
        ]
        fired = ev.TimerFired(timer_id=timer_id, scheduled_for_us=last, missed=missed, next_fire_us=nxt)
        try:
            self.store.append(
                NewEvent(timer.agent_id, fired, origin=f"timer:{timer_id}", authority="timer", idempotency_key=key),
                *keyed,
            )
        except NotFoundError:
            return
        if queued:  # the agent is paused or out of budget: expected, not worth a warning each time
            log.info("timer.coalesced_into_queued_input", timer_id=timer_id, missed=missed)
        elif missed:
            log.warning("timer.missed_coalesced", timer_id=timer_id, missed=missed)
        self.wakes.wake(timer.agent_id)

    def input_pending(self, timer: TimerProjection) -> bool:
        """Does the agent hold an input of this timer that no turn has taken yet?"""
        try:
            pending = set(self.store.agent(timer.agent_id).pending_inputs)
        except NotFoundError:
            return False
        if not pending:
            return False
        query = EventQuery(
            types=("message.received",), agent_id=timer.agent_id, origin=f"timer:{timer.timer_id}",
            seqs=pending,
        )  # fmt: skip
        return self.store.ledger.exists(query)
