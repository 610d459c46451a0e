"""Capability tokens for external events: ``<home>/run/external_tokens.json`` (mode 0600).

Whoever holds an agent's token can post events to ``/v1/hooks/<token>``, so tokens are secrets:
they live in this file only, never in the ledger or the logs. The daemon reads the file on every
lookup (no cache), which lets ``holon agent hook NAME --rotate`` replace a leaked token from another
process: the old URL stops working at once. Writers take an exclusive ``flock`` on a lock file
beside it and replace the file atomically, so a rotation and the daemon minting a first token never
lose each other's write.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HookTokens"]


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
        found = None
        for agent_id, known in self._read().items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = agent_id
        return found

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
