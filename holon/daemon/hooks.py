"""Capability tokens for external events: ``<home>/run/external_tokens.json`` (mode 0600) on a
SQLite home, the ``hook_tokens`` table when the home's storage is PostgreSQL (RFC 0008, step 6).

Whoever holds an agent's token can post events to ``/v1/hooks/<token>``, so tokens are secrets:
they live in this file only, never in the ledger or the logs. The daemon reads the file on every
lookup (no cache), which lets ``holon agent hook NAME --rotate`` replace a leaked token from another
process: the old URL stops working at once. Writers take an exclusive ``flock`` on a lock file
beside it and replace the file atomically, so a rotation and the daemon minting a first token never
lose each other's write.

On PostgreSQL several nodes answer ``/v1/hooks/<token>``, so the map is a table in the shared
database (``DbHookTokens``): read on every lookup as well, so a rotation on one node is effective on
all of them at once; still never in the ledger. ``hook_tokens(store)`` picks the one for the home.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import secrets
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from holon.ledger.migrations import Migration
from holon.projections.framework import migrate_projection

if TYPE_CHECKING:
    from holon.ledger import Ledger
    from holon.projections import Store

__all__ = ["DbHookTokens", "HookTokens", "TokenMap", "hook_tokens"]


class TokenMap(Protocol):
    """What the daemon, the API and the CLI need of an agent-id -> token map."""

    def token(self, agent_id: str) -> str: ...
    def rotate(self, agent_id: str) -> str: ...
    def forget(self, agent_id: str) -> None: ...
    def agent_for(self, token: str) -> str | None: ...
    def all(self) -> dict[str, str]: ...
    def load(self, tokens: dict[str, str]) -> None: ...


def hook_tokens(store: Store) -> TokenMap:
    """The home's token map: the file beside a SQLite ledger, the table beside a PostgreSQL one."""
    if store.ledger.engine.dialect == "postgresql":
        return DbHookTokens(store)
    return HookTokens(store.paths.root)


def _matching(tokens: dict[str, str], token: str) -> str | None:
    """The agent whose token is ``token``; every known token is compared in constant time."""
    found = None
    for agent_id, known in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            found = agent_id
    return found


class HookTokens:
    """The agent-id -> token map of one home."""

    def __init__(self, home: Path) -> None:
        self.path = home / "run" / "external_tokens.json"

    def token(self, agent_id: str) -> str:
        """The agent's token, minted on first use."""
        with self._locked() as tokens:
            if agent_id not in tokens:
                tokens[agent_id] = secrets.token_urlsafe(32)
            return tokens[agent_id]

    def rotate(self, agent_id: str) -> str:
        """A new token for the agent; the old one is refused from now on."""
        with self._locked() as tokens:
            tokens[agent_id] = secrets.token_urlsafe(32)
            return tokens[agent_id]

    def forget(self, agent_id: str) -> None:
        with self._locked() as tokens:
            tokens.pop(agent_id, None)

    def agent_for(self, token: str) -> str | None:
        """The agent id the token belongs to; every known token is compared in constant time."""
        return _matching(self._read(), token)

    def all(self) -> dict[str, str]:
        """Every agent's token (``holon storage migrate`` moves them with a home)."""
        return self._read()

    def load(self, tokens: dict[str, str]) -> None:
        """Store ``tokens`` over what the file holds (``holon storage migrate``)."""
        with self._locked() as held:
            held.update(tokens)

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, str]]:
        """Read-modify-write under the lock; the map is written back only if it changed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            tokens = self._read()
            before = dict(tokens)
            yield tokens
            if tokens != before:
                self._write(tokens)
        finally:
            os.close(lock_fd)

    def _write(self, tokens: dict[str, str]) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(tokens, fh)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)


#: The table's one migration, in the framework's ``hook_tokens`` namespace (PostgreSQL only).
MIGRATIONS = (
    Migration(
        1,
        "hook_tokens",
        (
            'CREATE TABLE IF NOT EXISTS hook_tokens (agent_id TEXT COLLATE "C" PRIMARY KEY,'
            " token TEXT NOT NULL, rotated_us BIGINT NOT NULL)",
        ),
    ),
)
#: Ledgers whose ``hook_tokens`` table is known to be there (weak: a closed store drops out).
_MIGRATED: weakref.WeakSet[Ledger] = weakref.WeakSet()
_DB_NOW_US = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"


class DbHookTokens:
    """The agent-id -> token map in the shared PostgreSQL database (``hook_tokens``).

    Writes run in a ledger transaction (under the ledger lock, so a rotation and a first mint on
    two nodes never lose each other's write); lookups read the table every time (no cache)."""

    def __init__(self, store: Store) -> None:
        self.ledger = store.ledger
        if self.ledger not in _MIGRATED:  # once per open ledger: the API builds one map per request
            migrate_projection(self.ledger, "hook_tokens", MIGRATIONS, now_us=self.ledger.clock.now_us())
            _MIGRATED.add(self.ledger)

    def token(self, agent_id: str) -> str:
        """The agent's token, minted on first use."""
        with self.ledger.transaction() as tx:
            tx.conn.execute(
                f"INSERT INTO hook_tokens(agent_id, token, rotated_us) VALUES (?, ?, {_DB_NOW_US}) "
                "ON CONFLICT (agent_id) DO NOTHING",
                (agent_id, secrets.token_urlsafe(32)),
            )
            row = tx.conn.fetchone("SELECT token FROM hook_tokens WHERE agent_id = ?", (agent_id,))
        assert row is not None  # inserted or already there, in this transaction
        return str(row[0])

    def rotate(self, agent_id: str) -> str:
        """A new token for the agent; the old one is refused from now on, on every node."""
        new = secrets.token_urlsafe(32)
        with self.ledger.transaction() as tx:
            tx.conn.execute(
                f"INSERT INTO hook_tokens(agent_id, token, rotated_us) VALUES (?, ?, {_DB_NOW_US}) "
                "ON CONFLICT (agent_id) DO UPDATE SET token = excluded.token, rotated_us = excluded.rotated_us",
                (agent_id, new),
            )
        return new

    def forget(self, agent_id: str) -> None:
        with self.ledger.transaction() as tx:
            tx.conn.execute("DELETE FROM hook_tokens WHERE agent_id = ?", (agent_id,))

    def agent_for(self, token: str) -> str | None:
        """The agent id the token belongs to; every known token is compared in constant time."""
        return _matching(self.all(), token)

    def all(self) -> dict[str, str]:
        """Every agent's token (``holon storage migrate`` moves them with a home)."""
        rows = self.ledger.query("SELECT agent_id, token FROM hook_tokens", ())
        return {str(a): str(t) for a, t in rows}

    def load(self, tokens: dict[str, str]) -> None:
        """Store ``tokens`` as they are (``holon storage migrate``: a home's URLs keep working)."""
        with self.ledger.transaction() as tx:
            tx.conn.executemany(
                f"INSERT INTO hook_tokens(agent_id, token, rotated_us) VALUES (?, ?, {_DB_NOW_US}) "
                "ON CONFLICT (agent_id) DO UPDATE SET token = excluded.token, rotated_us = excluded.rotated_us",
                sorted(tokens.items()),
            )
