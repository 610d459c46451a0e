"""The one error tree of holon.

Every error a user can cause, and every failure holon reports on purpose, is a ``HolonError``.
Foreign exceptions (sqlite3, pydantic, OS errors) are translated at the boundary with
``raise ... from e``; messages name the key, id or limit at fault. The CLI turns a ``HolonError``
into one line on stderr and the exit code below, never a traceback.

    HolonError                      exit 1
    ├── ConfigError                 exit 2   bad config file, unknown key, bad value
    ├── UsageError                  exit 2   bad command-line input
    ├── StorageUnavailable          exit 2   the storage server (PostgreSQL) cannot be reached
    ├── NotFoundError               exit 3   no such agent, event, blob, home
    │   └── HomeNotFoundError
    ├── ConflictError               exit 4   name taken, idempotency key reused differently
    │   ├── IdempotencyConflict
    │   └── NodeNameTaken           exit 2   another live node already runs under this name
    ├── LedgerError                 exit 5   the ledger refused or is damaged
    │   ├── EventValidationError             payload does not match its event type
    │   ├── FencedOut                        this node no longer holds the agent's lease
    │   ├── TurnAlreadySettled               a turn's second settle (recovery settled it first)
    │   ├── IntegrityError                   hash chain or sequence broken
    │   └── MigrationError                   schema cannot be brought forward
    │       └── SchemaMismatch      exit 2   the database's schema is newer than this holon, or
    │                                        older live nodes forbid migrating it (PostgreSQL)
    └── ModelError                  exit 6   a model call failed (``kind`` says how)
        ├── ModelNotConfigured               no model configured and no local model installed
        └── ModelKeyMissing                  the agent's API key variable is not set
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConfigError",
    "ConflictError",
    "EventValidationError",
    "FencedOut",
    "HolonError",
    "HomeNotFoundError",
    "IdempotencyConflict",
    "IntegrityError",
    "LedgerError",
    "MigrationError",
    "ModelError",
    "ModelErrorKind",
    "ModelKeyMissing",
    "ModelNotConfigured",
    "NodeNameTaken",
    "NotFoundError",
    "SchemaMismatch",
    "StorageUnavailable",
    "TurnAlreadySettled",
    "UsageError",
]


class HolonError(Exception):
    """Root of every error holon raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(HolonError):
    exit_code = 2


class UsageError(HolonError):
    exit_code = 2


class StorageUnavailable(HolonError):
    """The ledger's database server does not answer (refused, timed out, name not resolved).

    At start it is a configuration problem of the operator's (exit 2, one line naming host and
    port, never the password); while running it is retryable (RFC 0008, "Lost mid-run")."""

    exit_code = 2


class NotFoundError(HolonError):
    exit_code = 3


class HomeNotFoundError(NotFoundError):
    pass


class ConflictError(HolonError):
    exit_code = 4


class IdempotencyConflict(ConflictError):
    pass


class NodeNameTaken(ConflictError):
    """A second ``holon serve --node NAME`` while a node of that name lives (RFC 0008, "Two nodes
    with the same name"): a start-up refusal, so exit 2 like the other start-up errors."""

    exit_code = 2


class LedgerError(HolonError):
    exit_code = 5


class EventValidationError(LedgerError):
    pass


class IntegrityError(LedgerError):
    pass


class MigrationError(LedgerError):
    pass


class SchemaMismatch(MigrationError):
    """This holon's code and the shared database's schema do not go together (RFC 0008, "Schema
    versions"): the database is newer (upgrade holon), or a migration is due while a live node
    runs older code (stop or upgrade it first). An operator's decision, like a bad setting."""

    exit_code = 2


class FencedOut(LedgerError):
    """The agent's lease is not this node's (any more): expired, taken over, or never held.

    Raised by the node's own deadline check (self-fencing) or translated from the database's
    refusal (the fence trigger, SQLSTATE ``HLF01``; RFC 0008 "Leases with fencing tokens"). The turn
    stops at once: no model call, no tool, nothing retried on this node."""

    def __init__(self, message: str, *, agent_id: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id


class TurnAlreadySettled(LedgerError):
    """A turn tried to settle after something else settled it (recovery took it for a dead
    process's): nothing of that settle is appended, so its inputs, re-queued by the first settle,
    are answered once, by the next turn. A bug elsewhere when it happens; the ledger keeps one
    ``turn.settled`` per turn whatever the cause."""

    def __init__(self, message: str, *, agent_id: str, turn_id: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id
        self.turn_id = turn_id


ModelErrorKind = Literal[
    "rate_limit", "timeout", "server", "connection", "context_overflow", "auth", "bad_request", "unknown"
]

#: Kinds worth retrying with backoff; the rest fail at once.
RETRYABLE_KINDS: frozenset[str] = frozenset({"rate_limit", "timeout", "server", "connection"})


class ModelError(HolonError):
    """A model call failed. ``kind`` classifies it; ``retryable`` says whether backoff may help."""

    exit_code = 6

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind = "unknown",
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.status = status
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


class ModelNotConfigured(ModelError):
    def __init__(self, message: str) -> None:
        super().__init__(message, kind="bad_request")


class ModelKeyMissing(ModelError):
    """The API key variable an agent names is not set where the model is called. Like
    ``ModelNotConfigured`` the operator fixes it by configuring: a turn keeps its inputs queued."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="auth")
