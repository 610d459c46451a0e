"""``EventQuery``: a named, typed filter over the events table.

Callers outside ``holon.ledger`` describe *which* events they want (types, agent, turn, origin,
a seq window, an idempotency key) and the ledger turns that into SQL for its engine. This keeps
every ``FROM events`` inside the ledger package, so a second engine implements one seam
(RFC 0001, "The storage seam").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["EventKey", "EventQuery"]


class EventKey(NamedTuple):
    """The envelope columns most readers filter and group by; no payload is decoded."""

    seq: int
    agent_id: str
    type: str
    turn_id: str | None


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Events with ``after < seq <= upto`` that match every given field, in seq order.

    ``types`` matches any of the listed event types, ``turn_ids`` any of the listed turns;
    ``since_us <= ts_us < until_us`` bounds the append time. ``None`` fields do not filter.
    ``newest_first`` orders by descending seq (``limit`` then keeps the newest).
    """

    types: Collection[str] | None = None
    agent_id: str | None = None
    turn_id: str | None = None
    turn_ids: Collection[str] | None = None
    origin: str | None = None
    idempotency_key: str | None = None
    seqs: Collection[int] | None = None
    after: int = 0
    upto: int | None = None
    since_us: int | None = None
    until_us: int | None = None
    limit: int | None = None
    newest_first: bool = False

    def _where(self) -> tuple[str, list[object]]:
        clauses = ["seq > ?"]
        params: list[object] = [self.after]
        if self.upto is not None:
            clauses.append("seq <= ?")
            params.append(self.upto)
        if self.since_us is not None:
            clauses.append("ts_us >= ?")
            params.append(self.since_us)
        if self.until_us is not None:
            clauses.append("ts_us < ?")
            params.append(self.until_us)
        for column, value in (
            ("agent_id", self.agent_id),
            ("turn_id", self.turn_id),
            ("origin", self.origin),
            ("idempotency_key", self.idempotency_key),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.types is not None:
            types = list(dict.fromkeys(self.types))
            clauses.append(f"type IN ({', '.join('?' for _ in types)})" if types else "1 = 0")
            params += types
        if self.turn_ids is not None:
            turns = list(dict.fromkeys(self.turn_ids))
            clauses.append(f"turn_id IN ({', '.join('?' for _ in turns)})" if turns else "1 = 0")
            params += turns
        if self.seqs is not None:
            seqs = sorted(set(self.seqs))
            clauses.append(f"seq IN ({', '.join('?' for _ in seqs)})" if seqs else "1 = 0")
            params += seqs
        return " AND ".join(clauses), params

    def sql(self, columns: str) -> tuple[str, list[object]]:
        where, params = self._where()
        sql = f"SELECT {columns} FROM events WHERE {where} ORDER BY seq {'DESC' if self.newest_first else 'ASC'}"
        if self.limit is not None:
            sql += " LIMIT ?"
            params.append(self.limit)
        return sql, params

    def count_sql(self) -> tuple[str, list[object]]:
        where, params = self._where()
        return f"SELECT count(*) FROM events WHERE {where}", params
