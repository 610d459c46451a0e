"""Reading a shared PostgreSQL ledger in the cluster tests: its events, and the ledger's own proof
that no turn ran on two nodes at once (RFC 0008 steps 9-11, 14)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["events", "no_turn_on_two_nodes"]

EventRow = tuple[int, str, str, str | None, str, dict[str, Any]]


def events(url: str, types: tuple[str, ...] = ()) -> list[EventRow]:
    """(seq, type, agent_id, turn_id, origin, payload) of the shared ledger, in order."""
    from holon.ledger.pg.connect import connect

    where = "WHERE type = ANY(%s)" if types else ""
    with connect(url) as conn:
        rows = conn.execute(
            f"SELECT seq, type, agent_id, turn_id, origin, payload FROM events {where} ORDER BY seq",
            (list(types),) if types else (),
        ).fetchall()
    return [(int(s), str(t), str(a), tu, str(o), json.loads(p)) for s, t, a, tu, o, p in rows]


def no_turn_on_two_nodes(url: str) -> int:
    """The ledger's own proof; returns how many turns were checked.

    Per agent, the fencing tokens of its ``lease.acquired`` events only grow; every
    ``turn.started`` names the node of the agent's latest ``lease.acquired``; and once the owner
    changed, no event of a turn started before follows but the new owner's recovery settlement (and
    what the projector derives in it)."""
    owner: dict[str, str] = {}  # agent -> node of its latest lease.acquired
    token: dict[str, int] = {}  # agent -> token of its latest lease.acquired
    turn_node: dict[str, str] = {}  # turn -> node that started it
    turn_owner_changed: set[str] = set()
    open_turns: dict[str, set[str]] = {}  # agent -> turns started and not settled
    for seq, type_, agent, turn, origin, payload in events(url):
        if type_ == "lease.acquired":
            assert payload["token"] >= token.get(agent, 0), (seq, agent, payload, token.get(agent))
            if owner.get(agent) not in (None, payload["node"]):
                turn_owner_changed |= open_turns.get(agent, set())
            owner[agent], token[agent] = payload["node"], payload["token"]
        elif type_ == "turn.started":
            assert payload["node"] == owner.get(agent), (turn, payload, owner.get(agent))
            turn_node[turn] = payload["node"]
            open_turns.setdefault(agent, set()).add(turn)
        elif turn is not None and turn in turn_owner_changed:
            # after the owner changed, only the new owner's recovery writes to the old turn (and what
            # the projector derives from that settlement in the same transaction)
            recovery = origin == "runtime:recovery" and type_ in ("turn.settled", "tool.resulted")
            assert recovery or origin == "runtime:projector", (type_, origin, turn)
        if type_ == "turn.settled" and turn is not None:
            open_turns.get(agent, set()).discard(turn)
    return len(turn_node)
