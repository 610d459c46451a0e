"""Request and response bodies of the HTTP control API (they make the OpenAPI document).

Projection states (agents, work items, tasks, waits, timers) are served as the projection's own
pydantic models, so the API shows exactly what the CLI's ``--json`` shows; the models here are the
API's own envelopes. Request models forbid unknown fields: a typo is a 422, not a silent no-op.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from holon.ledger.envelope import EVENT_FIELDS, Event
from holon.projections.state import AgentState
from holon.runtime.settings import OPERATOR_KEYS

__all__ = [
    "BadRow",
    "AddTimer",
    "AgentDetail",
    "ConfigureAgent",
    "CreateAgent",
    "ErrorBody",
    "ErrorInfo",
    "EventOut",
    "EventsPage",
    "Health",
    "HookPath",
    "InputAccepted",
    "InputIn",
    "LedgerStats",
    "LedgerVerify",
]

ErrorCode = Literal[
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "conflict",
    "too_large",
    "unsupported_media_type",
    "invalid",
    "ledger",
    "model",
    "failed",
    "internal",
]


class ErrorInfo(BaseModel):
    code: ErrorCode
    """Stable, machine-readable; the message is for people and may change."""
    message: str


class ErrorBody(BaseModel):
    error: ErrorInfo


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


_SETTINGS_DOC = (
    "Agent settings, checked by holon.runtime.settings.AgentSettings: " + ", ".join(sorted(OPERATOR_KEYS)) + ". "
    "A bad value or an unknown key is a 400 naming the field (never echoing the value); api_key_env may name "
    "only a variable in [model] allowed_key_envs, and a key goes only to loopback or [model] allowed_api_bases."
)


class CreateAgent(_Request):
    name: str = Field(min_length=1, max_length=63)
    template: str = Field("assistant", max_length=64)
    workspace: str | None = Field(None, max_length=4096)
    schedule: str | None = Field(None, max_length=256, description="Schedule of a background agent (as for timers).")
    prompt: str | None = Field(None, max_length=100_000, description="What a background agent does on its schedule.")
    settings: dict[str, JsonValue] | None = Field(None, description=_SETTINGS_DOC)


class ConfigureAgent(_Request):
    settings: dict[str, JsonValue] = Field(default_factory=dict, description="Settings to change. " + _SETTINGS_DOC)
    unset: list[str] = Field(default_factory=list, description="Settings to reset to their defaults.")


class AddTimer(_Request):
    schedule: str = Field(
        min_length=1,
        max_length=256,
        description="'every 30s|5 minutes|2h|1 day', '@hourly|@daily|@weekly|@monthly', a crontab line "
        "('0 9 * * *') or an ISO time; crontab lines and times without an offset are read in [runtime] timezone.",
    )
    prompt: str | None = Field(None, max_length=100_000, description="What the agent is told each time it fires.")


class AgentDetail(BaseModel):
    """What ``holon agent show --json`` prints."""

    agent: AgentState
    status: dict[str, Any] = {}
    """Its state as ``GET /v1/agents/{a}/status`` gives it (``holon.runtime.status``)."""
    working_memory: dict[str, Any]
    counts: dict[str, int]


class InputIn(_Request):
    text: str = Field(min_length=1, max_length=200_000)
    idempotency_key: str | None = Field(
        None,
        description="Makes a retry safe: the same key (also as the Idempotency-Key header) gets the first "
        "acknowledgement back instead of a second input; 1-200 printable ASCII characters, no spaces.",
    )


class InputAccepted(BaseModel):
    """The input is a ledger event (durable) when this is returned."""

    agent_id: str
    seq: int
    event_id: str


def _event_fields() -> dict[str, Any]:
    """``EventOut``'s fields, derived from the ledger's ``Event`` (the one definition of the envelope).

    Each field has the ``Event`` field's type, except the payload (its JSON object) and the
    authority (documented as a string); optional fields default to ``None``."""
    hints = typing.get_type_hints(Event)
    api_types: dict[str, Any] = {"payload": dict[str, Any], "authority": str}
    out: dict[str, Any] = {}
    for name in EVENT_FIELDS:
        hint = api_types.get(name, hints[name])
        out[name] = (hint, None) if type(None) in typing.get_args(hint) else (hint, ...)
    return out


class EventOut(BaseModel):
    """One ledger event as ``holon ledger tail --json`` prints it.

    Written out so type checkers and readers see its fields; ``envelope_drift`` (checked at import
    and by ``tests/test_storage_seam.py``) keeps it equal to what ``Event`` derives."""

    seq: int
    id: str
    agent_id: str
    type: str
    version: int
    ts_us: int
    origin: str
    authority: str
    turn_id: str | None = None
    work_item_id: str | None = None
    task_id: str | None = None
    episode_id: str | None = None
    idempotency_key: str | None = None
    payload: dict[str, Any]
    hash: str


def envelope_drift() -> list[str]:
    """How ``EventOut`` differs from the fields derived from ``Event`` (empty when they agree)."""
    derived = _event_fields()
    have = {name: (f.annotation, f.is_required()) for name, f in EventOut.model_fields.items()}
    want = {name: (hint, default is ...) for name, (hint, default) in derived.items()}
    out = [f"field order {list(have)} != {list(want)}"] if list(have) != list(want) else []
    return out + [f"{n}: {have.get(n)} != {want[n]}" for n in want if have.get(n) != want[n]]


if envelope_drift():  # pragma: no cover - a new envelope field without its API field
    raise AssertionError(f"EventOut does not follow holon.ledger.Event: {envelope_drift()}")


class EventsPage(BaseModel):
    events: list[EventOut]
    next_after: int
    """Pass as ``after`` to read on; equal to the request's cursor when there was nothing new."""
    head: int
    """The ledger head when the page was read."""


class BadRow(BaseModel):
    seq: int
    reason: str


class LedgerVerify(BaseModel):
    ok: bool
    events: int
    first_bad_seq: int | None = None
    problem: str | None = None
    bad_rows: list[BadRow] = []
    """Up to 100 damaged rows, in order."""
    bad_row_count: int = 0
    lost: int = 0
    """Events the anchor outside the database says were committed but the database lacks."""
    damaged: bool = False
    """The database file itself is damaged (``holon ledger verify`` exits 5)."""


class LedgerStats(BaseModel):
    events: int
    head_seq: int
    by_type: dict[str, dict[str, int]]
    blobs: int
    blob_bytes: int
    blobs_pruned: int
    db_bytes: int


class HookPath(BaseModel):
    path: str
    """The capability URL path (``/v1/hooks/<token>``): whoever holds it can send this agent events."""
