"""Inputs for agents, with the waits they satisfy.

Every input is a ``message.received`` event whose envelope says where it came from (``origin``)
and how far it may be trusted (``authority``). An input that is what a pending wait waited for
(an operator reply, a task's result, an external event, a timer) resolves that wait in the same
transaction.
"""

from __future__ import annotations

from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.projections import Store
from holon.projections.state import WaitProjection

__all__ = ["input_events", "wakes_of"]


def _satisfies(wait: WaitProjection, wakes: tuple[ev.WaitOn, str | None]) -> bool:
    on, target = wakes
    if wait.on != on:
        return False
    return wait.target is None or target is None or wait.target == target


def wakes_of(authority: Authority, event: str | None = None) -> tuple[ev.WaitOn, str | None] | None:
    """The waits an input answers, by who sent it: an operator's input answers ``operator`` waits,
    an external event ``external`` waits (those on ``event`` when it is named). Inputs of other
    authorities (tasks, timers) name their wait themselves."""
    if authority == "operator":
        return "operator", None
    if authority == "external":
        return "external", event
    return None


def input_events(
    store: Store,
    agent_id: str,
    text: str,
    *,
    origin: str,
    authority: Authority,
    sender: str,
    channel: str,
    wakes: tuple[ev.WaitOn, str | None] | None = None,
    task_id: str | None = None,
) -> list[NewEvent]:
    """The events that deliver ``text`` to an agent: resolved waits first, then the message."""
    events = []
    if wakes is not None:
        for wait in store.waits(agent_id=agent_id, status="pending"):
            if _satisfies(wait, wakes):
                events.append(
                    NewEvent(
                        agent_id,
                        ev.WaitResolved(wait_id=wait.wait_id, resolution="satisfied"),
                        origin=origin,
                        authority=authority,
                        task_id=task_id,
                    )
                )
    events.append(
        NewEvent(
            agent_id,
            ev.MessageReceived(text=text, sender=sender, channel=channel),
            origin=origin,
            authority=authority,
            task_id=task_id,
        )
    )
    return events
