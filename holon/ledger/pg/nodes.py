"""Node names: one live node per name, held by a session advisory lock on the node's connection.

RFC 0008, "Two nodes with the same name". ``holon serve --node NAME`` claims the name with
``pg_try_advisory_lock(hashtextextended('holon.node:' || NAME, 0))`` on the connection it keeps
for its lifetime (its lease connection): a second node of the same name gets ``false`` and is
refused with ``NodeNameTaken`` naming the holder (host, pid, last seen, from ``nodes``). A session
lock dies with its backend, so a node killed (or whose connection the server dropped) frees its
name at once, with no expiry to wait for; it needs a direct connection (not PgBouncer in
transaction mode). If the node's own connection is lost, so is its claim: it must ``claim``
again on the new connection before acting, and may find the name taken by then.

The ``nodes`` row (host, pid, url, schema version, started, last seen) is what ``holon daemon
status`` and the refusal show; ``holon.ledger.pg.leases.Leases.heartbeat`` keeps ``seen_at``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from holon.errors import NodeNameTaken
from holon.ledger.pg.append import Conn, translated

__all__ = ["NodeInfo", "claim", "list_nodes", "unclaim"]

_LOCK = "hashtextextended('holon.node:' || %s, 0)"

_UPSERT = """
INSERT INTO nodes (name, host, pid, url, schema_version, started_at, seen_at)
VALUES (%s, %s, %s, %s, %s, clock_timestamp(), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid, url = excluded.url,
    schema_version = excluded.schema_version, started_at = excluded.started_at, seen_at = excluded.seen_at
"""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A row of ``nodes``; ``seen_s_ago`` by the database's clock."""

    name: str
    host: str
    pid: int
    url: str | None
    schema_version: int
    started_at: datetime
    seen_at: datetime
    seen_s_ago: float


def claim(
    conn: Conn,
    name: str,
    *,
    schema_version: int,
    url: str | None = None,
    host: str | None = None,
    pid: int | None = None,
) -> NodeInfo:
    """Claim ``name`` for this process on ``conn`` (kept open for the node's lifetime) and record
    it in ``nodes``; ``NodeNameTaken`` if a live node holds it."""
    with translated(conn, "the claim of the node name"):
        row = conn.execute(f"SELECT pg_try_advisory_lock({_LOCK})", (name,)).fetchone()
    if not (row and row[0]):
        holder = _node(conn, name)
        who = (
            f" (host {holder.host}, pid {holder.pid}, seen {holder.seen_s_ago:.1f} s ago)" if holder is not None else ""
        )
        raise NodeNameTaken(f"node {name} is already running{who}; choose another --node name or stop that one")
    with translated(conn, "the claim of the node name"):
        conn.execute(
            _UPSERT, (name, host or socket.gethostname(), os.getpid() if pid is None else pid, url, schema_version)
        )
    info = _node(conn, name)
    assert info is not None  # just written
    return info


def unclaim(conn: Conn, name: str) -> bool:
    """Free ``name`` (a clean stop); returns whether this session held it."""
    with translated(conn, "the release of the node name"):
        row = conn.execute(f"SELECT pg_advisory_unlock({_LOCK})", (name,)).fetchone()
    return bool(row and row[0])


_SELECT = """
SELECT name, host, pid, url, schema_version, started_at, seen_at,
       extract(epoch FROM clock_timestamp() - seen_at)::float8
FROM nodes {where} ORDER BY name
"""


def _info(r: tuple[Any, ...]) -> NodeInfo:  # Any: a row of _SELECT, typed by its columns
    url = None if r[3] is None else str(r[3])
    return NodeInfo(str(r[0]), str(r[1]), int(r[2]), url, int(r[4]), r[5], r[6], float(r[7]))


def _node(conn: Conn, name: str) -> NodeInfo | None:
    with translated(conn, "the read of the nodes"):
        row = conn.execute(_SELECT.format(where="WHERE name = %s"), (name,)).fetchone()
    return None if row is None else _info(row)


def list_nodes(conn: Conn) -> list[NodeInfo]:
    """Every node that ever registered, by name (``seen_s_ago`` tells the live ones)."""
    with translated(conn, "the read of the nodes"):
        rows = conn.execute(_SELECT.format(where="")).fetchall()
    return [_info(r) for r in rows]
