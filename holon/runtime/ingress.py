"""Delivering an input once: ``deliver_input`` with an optional client idempotency key.

A client that lost the answer to ``POST /v1/agents/{a}/inputs`` (or a hook, or MCP ``send_input``)
cannot know whether the input was stored; with an idempotency key it can simply send it again.
The key is scoped per agent (``input:<agent_id>:<key>``) and stored as the ``message.received``
event's ledger idempotency key, whose unique index makes it hold across processes and restarts.

A retry is recognised inside the same write transaction that would store the input: the key is
looked up first, and when it is known nothing new is appended (not even the waits a fresh input
would resolve now) and the original event comes back, so the client gets its first
acknowledgement again. The same key with a different input is an ``IdempotencyConflict`` naming
the key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from holon.errors import IdempotencyConflict, UsageError
from holon.ledger import Event, EventQuery, NewEvent, Transaction
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.projections import Store
from holon.runtime.inputs import input_events

__all__ = ["MAX_KEY_CHARS", "InputSpec", "check_idempotency_key", "check_text", "deliver_input"]

#: Longest client idempotency key (a UUID is 36 characters).
MAX_KEY_CHARS = 200


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input as it travels from whoever sent it (the API, a hook, the CLI) through the daemon to
    the host, unchanged: what it says and who sent it, how.

    ``event``: an external event's name (it answers the external waits on that name);
    ``idempotency_key``: the client's key, so that a retry stores nothing new
    (``deliver_input``)."""

    text: str
    origin: str = "operator:cli"
    authority: Authority = "operator"
    sender: str = "operator"
    channel: str = "cli"
    event: str | None = None
    idempotency_key: str | None = None


def check_idempotency_key(key: str) -> str:
    """``key`` when it is 1-200 printable ASCII characters without spaces, else ``UsageError``."""
    if not key or len(key) > MAX_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        raise UsageError(
            f"the idempotency key must be 1-{MAX_KEY_CHARS} printable ASCII characters without spaces "
            f"(a UUID will do); got {len(key)} characters"
            + ("" if not key or len(key) > MAX_KEY_CHARS else " with a space, control or non-ASCII character")
        )
    return key


def check_text(text: str, what: str = "the input") -> str:
    """``text`` when it is valid Unicode (storable as UTF-8), else a ``UsageError`` saying where it is not.

    JSON may carry a lone surrogate (``"\\ud800"``), which is no character at all."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        raise UsageError(
            f"{what} holds a lone surrogate (U+{ord(bad):04X} at character {e.start}), which is not valid "
            "Unicode text: send UTF-8 text, and escape a non-BMP character as a surrogate pair"
        ) from e
    return text


def _scoped(agent_id: str, key: str) -> str:
    return f"input:{agent_id}:{key}"


def deliver_input(
    store: Store,
    agent_id: str,
    text: str,
    *,
    origin: str,
    authority: Authority,
    sender: str,
    channel: str,
    wakes: tuple[ev.WaitOn, str | None] | None = None,
    idempotency_key: str | None = None,
    tx: Transaction | None = None,
) -> tuple[Event, bool]:
    """Store an input (with the waits it resolves) once; returns its ``message.received`` event and
    whether it was stored by an earlier call with the same key (a retry). ``tx``: inside that open
    transaction (group commit), else in one of its own."""
    check_text(text)
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    if tx is None:
        with store.ledger.transaction() as own:
            return _deliver(store, own, agent_id, text, origin, authority, sender, channel, wakes, idempotency_key)
    return _deliver(store, tx, agent_id, text, origin, authority, sender, channel, wakes, idempotency_key)


def _deliver(
    store: Store, tx: Transaction, agent_id: str, text: str, origin: str, authority: Authority, sender: str,
    channel: str, wakes: tuple[ev.WaitOn, str | None] | None, idempotency_key: str | None,
) -> tuple[Event, bool]:  # fmt: skip
    # Inside the write lock: the waits read are the current ones, and a concurrent duplicate
    # (another request, another process) either committed before (found here) or waits for this
    # transaction to end.
    events = input_events(
        store, agent_id, text, origin=origin, authority=authority, sender=sender, channel=channel, wakes=wakes
    )
    if idempotency_key is None:
        return tx.append(*events)[-1], False
    key = _scoped(agent_id, idempotency_key)
    try:
        if store.ledger.exists(EventQuery(idempotency_key=key)):
            message = ev.MessageReceived(text=text, sender=sender, channel=channel)
            stored = tx.append(_keyed(agent_id, message, origin, authority, key))
            return stored[-1], True
        events[-1] = replace(events[-1], idempotency_key=key)
        return tx.append(*events)[-1], False
    except IdempotencyConflict as e:
        raise IdempotencyConflict(
            f"idempotency key {idempotency_key!r} was already used for a different input to agent {agent_id}: "
            "use a new key for a new input"
        ) from e


def _keyed(agent_id: str, message: ev.MessageReceived, origin: str, authority: Authority, key: str) -> NewEvent:
    return NewEvent(agent_id, message, origin=origin, authority=authority, idempotency_key=key)
