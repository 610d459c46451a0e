"""The ``events`` row: its columns, its INSERT, and the one mapping between rows and ``Event``s.

Engine-independent (the statement uses ``?`` placeholders, which every ``Conn`` takes): the
append path builds rows in this order, every engine stores and returns them as they are, and
``row_to_event`` decodes them, whichever engine holds the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from holon.errors import EventValidationError
from holon.ledger.codec import decode_payload
from holon.ledger.envelope import EVENT_FIELDS, Event
from holon.ledger.events import Payload

__all__ = ["EVENT_COLUMNS", "EVENT_INSERT", "event_row", "row_to_event"]

EVENT_COLUMNS = ", ".join(EVENT_FIELDS)
"""The ``events`` columns in ``Event`` field order (a row read with them decodes by ``row_to_event``)."""
EVENT_INSERT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join('?' for _ in EVENT_FIELDS)})"
"""One row of ``events``: values in ``EVENT_FIELDS`` order (``event_row``)."""

_row_values = itemgetter(*EVENT_FIELDS)


def row_to_event(row: Sequence[Any]) -> Event:  # Any: a row's values (int, str, bytes)
    """An ``events`` row (``EVENT_COLUMNS``) as an ``Event``, its payload decoded and upcast."""
    # Positional (rows come in EVENT_FIELDS order, the payload second to last): no dict per row.
    seq, id_, agent, type_, version, ts_us, origin, authority, turn, work_item, task, episode, key, payload, hash_ = row
    return Event(
        seq, id_, agent, type_, version, ts_us, origin, authority, turn, work_item, task, episode, key,
        _decode(seq, type_, version, payload), hash_,
    )  # fmt: skip


def event_row(envelope: Mapping[str, Any], payload_text: str, hash_: str) -> tuple[Any, ...]:
    """The ``events`` row (``EVENT_INSERT``'s values) of a header envelope, its payload text and hash."""
    values: tuple[Any, ...] = _row_values({**envelope, "payload": payload_text, "hash": hash_})
    return values


def _decode(seq: int, type_: str, version: int, payload: str | bytes) -> Payload:
    try:
        return decode_payload(type_, version, payload)
    except EventValidationError as e:
        raise EventValidationError(f"event {seq} cannot be read: {e}; run 'holon ledger verify'") from e
