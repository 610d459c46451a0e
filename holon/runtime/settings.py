"""Agent settings: one pydantic model, checked on every path that writes them, read totally.

``AgentSettings`` types and bounds every key an agent may carry. Every write (``holon agent
create|configure``, ``POST``/``PATCH /v1/agents``, templates, ``spawn_agent`` children, ``holon
diagnose``) goes through ``validate_settings`` and then ``check_model_policy``:

- a bad value is a one-line ``UsageError`` (exit 2, HTTP 400) naming the field and what it must be,
  and never the value: a value in the wrong place may be a secret pasted by mistake;
- an unknown key is refused (e.g. ``api_key``), and so are the keys only holon itself sets
  (``diagnostic``, ``parent_task_id``) unless the caller is holon itself;
- ``api_key_env`` may name only a variable the operator allowed (``[model] allowed_key_envs`` or
  ``[model] api_key_env``), and a key may be sent only to loopback, the operator's own
  ``[model] api_base`` or a host in ``[model] allowed_api_bases`` (RFC 0002, "Secrets by name").

Every read (turn limits, the daemon's gate, budgets, model resolution) goes through
``read_settings``, which is total: a ledger written before these checks may hold
``{"max_rounds": "many"}`` or ``{"paused": "no"}``; each bad key falls back to its default and
``problem`` says which (field names only), so the agent runs on defaults with one visible error
instead of crash-looping.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator

from holon.config import ModelDefaults
from holon.errors import UsageError

__all__ = [
    "INTERNAL_KEYS",
    "OPERATOR_KEYS",
    "AgentSettings",
    "ReadSettings",
    "check_model_policy",
    "is_loopback_host",
    "key_label",
    "checked_for_write",
    "read_settings",
    "settings_problem",
    "validate_settings",
]

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
#: litellm model names: ``provider/name[:tag]``, ``org/repo``, ``name@version``. No URL: a model
#: name such as ``huggingface/https://host/...`` would point a key at that host.
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,199}$"
_ID = r"^[a-z]{2,8}_[0-9a-f]{32}$"

_Int = Annotated[int, Strict()]
_Float = Annotated[float, Strict(), Field(allow_inf_nan=False)]
_Bool = Annotated[bool, Strict()]


class AgentSettings(BaseModel):
    """Every setting an agent may have; ``None`` (or absent) means "the config's default"."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # the model (holon/runtime/models.py, MODEL_SETTING_KEYS)
    model: Annotated[str, Strict(), Field(pattern=MODEL_NAME)] | None = None
    api_base: Annotated[str, Strict(), Field(min_length=1, max_length=2048)] | None = None
    api_key_env: Annotated[str, Strict(), Field(pattern=ENV_NAME)] | None = None
    temperature: Annotated[_Float, Field(ge=0, le=2)] | None = None
    max_output_tokens: Annotated[_Int, Field(ge=1, le=10_000_000)] | None = None
    context_window: Annotated[_Int, Field(ge=256, le=100_000_000)] | None = None
    timeout_s: Annotated[_Float, Field(gt=0, le=3_600)] | None = None
    # the turn's limits
    max_rounds: Annotated[_Int, Field(ge=1, le=200)] | None = None
    max_tokens_per_turn: Annotated[_Int, Field(ge=1, le=1_000_000_000)] | None = None
    max_cost_per_turn_usd: Annotated[_Float, Field(ge=0, le=1_000_000)] | None = None
    # the daemon's
    paused: _Bool | None = None
    background: _Bool | None = None
    budget_turns_per_day: Annotated[_Int, Field(ge=0, le=1_000_000)] | None = None
    budget_tokens_per_day: Annotated[_Int, Field(ge=0, le=1_000_000_000_000)] | None = None
    budget_cost_per_day_usd: Annotated[_Float, Field(ge=0, le=1_000_000)] | None = None
    # set by holon itself, never by the operator
    diagnostic: _Bool | None = None
    """An agent of ``holon diagnose``: the daemon never runs it."""
    parent_task_id: Annotated[str, Strict(), Field(pattern=_ID)] | None = None
    """A ``spawn_agent`` child's task in its parent."""

    @field_validator("model")
    @classmethod
    def _model_is_not_a_url(cls, value: str | None) -> str | None:
        if value is not None and "//" in value:
            raise ValueError("a URL in a model name")
        return value

    @field_validator("api_base")
    @classmethod
    def _api_base_is_a_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = urlsplit(value)
            port_ok = url.port is None or url.port > 0
        except ValueError as e:
            raise ValueError("not a URL") from e
        if url.scheme not in ("http", "https") or not url.hostname or not port_ok:
            raise ValueError("not an http(s) URL with a host")
        if url.username is not None or url.password is not None:
            raise ValueError("credentials in the URL")
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("whitespace or control characters")
        return value

    def as_dict(self) -> dict[str, Any]:
        """The settings that are set, as stored in the ledger."""
        return self.model_dump(exclude_none=True)


#: Keys only holon itself sets (a diagnostic agent, a spawned child's task).
INTERNAL_KEYS = frozenset({"diagnostic", "parent_task_id"})
#: Keys the operator may set (CLI, HTTP API).
OPERATOR_KEYS = frozenset(AgentSettings.model_fields) - INTERNAL_KEYS

#: What each field must be: the refusal says this, never the value given.
_MUST_BE: dict[str, str] = {
    "model": "a litellm model name such as openai/gpt-4o-mini (letters, digits and ._:@+/-, at most 200, "
    "no URL: put that in api_base)",
    "api_base": "an http:// or https:// URL with a host, no credentials, at most 2048 characters",
    "api_key_env": "the name of an environment variable (letters, digits and '_', e.g. OPENAI_API_KEY), "
    "not the secret itself",
    "temperature": "a number from 0 to 2",
    "max_output_tokens": "an integer from 1 to 10000000",
    "context_window": "an integer from 256 to 100000000",
    "timeout_s": "a number of seconds above 0, at most 3600",
    "max_rounds": "an integer from 1 to 200",
    "max_tokens_per_turn": "an integer from 1 to 1000000000",
    "max_cost_per_turn_usd": "a number of dollars from 0 to 1000000",
    "paused": "true or false",
    "background": "true or false",
    "budget_turns_per_day": "an integer from 0 to 1000000",
    "budget_tokens_per_day": "an integer from 0 to 1000000000000",
    "budget_cost_per_day_usd": "a number of dollars from 0 to 1000000",
    "diagnostic": "true or false",
    "parent_task_id": "a task id",
}
_PRINTABLE_KEY = re.compile(r"^[a-z]{1,12}(?:_[a-z]{1,12}){0,5}$")  # words, no digits: not a token


def key_label(key: object) -> str:
    """An unknown key as a message may show it: short identifiers only (a key may be a secret too)."""
    return repr(key) if isinstance(key, str) and _PRINTABLE_KEY.match(key) else "(a name not shown)"


def validate_settings(data: Mapping[str, Any], *, internal: bool = False, nullable: bool = False) -> dict[str, Any]:
    """``data`` checked against ``AgentSettings``: the same mapping back (``None`` values kept when
    ``nullable``, i.e. "reset to default" in a configure; dropped otherwise).

    Raises ``UsageError`` naming the first bad field and what it must be, never its value."""
    if not isinstance(data, Mapping):
        raise UsageError("settings must be an object of setting names to values")
    allowed = AgentSettings.model_fields.keys() if internal else OPERATOR_KEYS
    for key in data:
        if key not in allowed:
            known = ", ".join(sorted(OPERATOR_KEYS))
            raise UsageError(f"unknown setting {key_label(key)}; known: {known}")
    try:
        checked = AgentSettings.model_validate(dict(data))
    except ValidationError as e:
        field = str(e.errors()[0]["loc"][0])
        raise UsageError(
            f"setting {field!r} must be {_MUST_BE.get(field, 'valid')}; the value given was not recorded"
        ) from None  # ``from e`` would carry the value in the exception chain
    set_ = checked.model_dump(include=set(data))
    return set_ if nullable else {k: v for k, v in set_.items() if v is not None}


@dataclass(frozen=True, slots=True)
class ReadSettings:
    settings: AgentSettings
    """The valid settings; every bad or unknown key left out (so its default applies)."""
    problem: str | None = None
    """One line naming the fields left out (never their values), or ``None``."""


_READ_CACHE_SIZE = 256
"""Distinct settings mappings remembered (a home's agents share few: most have none or a template's)."""
_read_cache: dict[tuple[tuple[str, type, Any], ...], ReadSettings] = {}


def _cache_key(raw: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...] | None:
    """``raw`` as a hashable key, the type beside each value (``True`` and ``1`` must not meet: the
    strict fields tell them apart); ``None`` when a value is not a plain scalar (read uncached)."""
    try:
        items = sorted(raw.items())
    except (TypeError, AttributeError):
        return None
    key = []
    for k, v in items:
        if not isinstance(k, str) or not (v is None or type(v) in (str, int, float, bool)):
            return None
        key.append((k, type(v), v))
    return tuple(key)


def read_settings(raw: Mapping[str, Any]) -> ReadSettings:
    """The settings stored for an agent, read totally: whatever the ledger holds, never raises.

    Remembered by value: every view of every agent reads them (the status of 1,000 agents read
    them ~7,000 times per page, each a pydantic validation); the result is frozen, so sharing it
    is safe."""
    key = _cache_key(raw)
    if key is None:
        return _read_settings(raw)
    found = _read_cache.get(key)
    if found is None:
        if len(_read_cache) >= _READ_CACHE_SIZE:
            _read_cache.clear()  # a home with this many distinct settings is rare: start over
        found = _read_cache[key] = _read_settings(raw)
    return found


def _read_settings(raw: Mapping[str, Any]) -> ReadSettings:
    try:
        return ReadSettings(AgentSettings.model_validate(dict(raw)))
    except (ValidationError, TypeError, ValueError):
        pass
    good: dict[str, Any] = {}
    bad: list[str] = []
    unknown = 0
    for key, value in dict(raw).items():
        if key not in AgentSettings.model_fields:
            unknown += 1
            continue
        try:
            AgentSettings.model_validate({key: value})
        except ValidationError:
            bad.append(key)
        else:
            good[key] = value
    parts = [f"{k} (must be {_MUST_BE[k]})" for k in sorted(bad)]
    if unknown:
        parts.append(f"{unknown} unknown setting{'s' if unknown > 1 else ''}")
    problem = f"settings ignored, defaults used instead: {'; '.join(parts)}" if parts else None
    return ReadSettings(AgentSettings.model_validate(good), problem)


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return (urlsplit(url).hostname or "").lower() or None
    except ValueError:
        return None


def check_model_policy(settings: AgentSettings, defaults: ModelDefaults) -> str | None:
    """Why the agent's model settings may not be used with the operator's allow-lists, or ``None``.

    The key in effect is the agent's ``api_key_env``, else the config's; the URL in effect the
    agent's ``api_base``, else the config's. Never names a value (messages reach HTTP clients)."""
    own_env = settings.api_key_env
    if own_env is not None and own_env != defaults.api_key_env and own_env not in defaults.allowed_key_envs:
        return (
            "setting 'api_key_env' names a variable the operator did not allow; add it to [model] "
            "allowed_key_envs in holon.toml to allow it"
        )
    key_env = own_env if own_env is not None else defaults.api_key_env
    if key_env is None or settings.api_base is None:
        return None  # no key in play, or the operator's own URL
    host = _host(settings.api_base)
    allowed = {h.lower().strip("[]") for h in defaults.allowed_api_bases} | {_host(defaults.api_base)}
    if host is not None and (is_loopback_host(host) or host.strip("[]") in allowed):
        return None
    return (
        "setting 'api_base' points at a host the operator did not allow while an API key variable is "
        "in effect; add the host to [model] allowed_api_bases in holon.toml to allow it"
    )


def settings_problem(raw: Mapping[str, Any], defaults: ModelDefaults) -> str | None:
    """Every reason an agent's stored settings are not (all) used, as one line, or ``None``."""
    read = read_settings(raw)
    found = [p for p in (read.problem, check_model_policy(read.settings, defaults)) if p]
    return "; ".join(found) or None


def checked_for_write(
    changes: Mapping[str, Any],
    current: Mapping[str, Any],
    defaults: ModelDefaults,
    *,
    internal: bool = False,
    nullable: bool = False,
    unset: Iterable[str] = (),
) -> dict[str, Any]:
    """``changes`` validated, then the policy checked on the settings they would give the agent
    when they touch where a key goes (``api_key_env``, ``api_base``): a change of anything else
    (``paused`` above all) always goes through; an agent already outside the allow-lists runs on
    the config's model meanwhile (``model_settings``)."""
    clean = validate_settings(changes, internal=internal, nullable=nullable)
    if not {"api_key_env", "api_base"} & {*clean, *unset}:
        return clean
    after = {**read_settings(current).settings.as_dict(), **clean}
    for key in unset:
        after.pop(key, None)
    problem = check_model_policy(
        AgentSettings.model_validate({k: v for k, v in after.items() if v is not None}), defaults
    )
    if problem:
        raise UsageError(problem)
    return clean
