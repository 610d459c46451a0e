"""One status: what an agent is doing now, decided in one place for every view of it.

``holon agent list``, ``holon agent show``, ``holon daemon status``, the REPL's ``/agents`` and the
API (``GET /v1/status``, ``GET /v1/agents/{a}/status``) all show the result of ``decide``. Before,
each read something different (the projection's last turn outcome here, the daemon's live view
there), so one agent could be ``idle`` in one place and ``asleep`` in another, or ``failed`` while
it was paused or had merely been aborted by the operator.

``decide`` is pure: the caller hands it the agent's projection row, its pending waits and
scheduled timers, the time, and what only a running daemon knows (``Live``: is a turn running,
is the agent held back until a retry time). Without a daemon ``live`` is ``None`` and the
projection's own record of a running turn stands in. Rendering (``status_entry`` for JSON,
``describe`` for one line of text) lives here too, so the words are the same everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from holon.clock import format_us
from holon.config import ModelDefaults
from holon.projections.state import AgentState, TimerProjection, WaitProjection
from holon.runtime.settings import read_settings, settings_problem

__all__ = [
    "ABORTED_REASON",
    "DAY_US",
    "AgentStatus",
    "Live",
    "StateName",
    "decide",
    "describe",
    "is_internal",
    "model_label",
    "status_entries",
    "status_entry",
    "without_internal",
]

StateName = Literal["idle", "running", "waiting", "asleep", "paused", "aborted", "failed"]

#: The reason an operator's abort settles a turn with (``Daemon.abort``): such an agent is
#: ``aborted``, not ``failed`` - nothing is wrong with it.
ABORTED_REASON = "aborted by the operator"
DAY_US = 86_400 * 1_000_000

#: How ``describe`` names ``next_wake`` in each state.
_WAKE_WORDS = {"asleep": "until", "waiting": "recheck at", "paused": "next timer", "aborted": "next timer",
               "failed": "retry at"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class AgentStatus:
    agent_id: str
    name: str
    state: StateName
    detail: str = ""
    """What it waits on, why it sleeps, its last error, or how many inputs are queued."""
    next_wake_us: int | None = None
    """When it next acts by itself: the end of its sleep, a wait's recheck, its next timer, the
    next day (budget), or its retry time after a transient failure."""


@dataclass(frozen=True, slots=True)
class Live:
    """What only the daemon that hosts the agent knows."""

    running: bool = False
    """A turn of the agent runs now."""
    retry_at_us: int | None = None
    """The agent is held back after a transient failure (its inputs re-queued) until then."""
    retrying: bool = False
    """Its retry time came and the retry is about to start: still failed until a turn settles well
    (without this, a failing agent would show ``idle`` for the moment between two attempts)."""


def is_internal(agent: AgentState) -> bool:
    """An agent holon made for itself (``holon diagnose``'s): hidden from lists unless ``--all``.

    Child agents an agent spawned are not internal: they do the operator's work, and spend."""
    return bool(read_settings(agent.settings).settings.diagnostic)


def model_label(agent: AgentState, default_model: str) -> str:
    """The model the agent talks to: its own setting, else the config's ``[model] model``, else the
    embedded local model."""
    own = read_settings(agent.settings).settings.model
    return own or default_model or "local"


def decide(
    agent: AgentState,
    *,
    now_us: int,
    waits: Sequence[WaitProjection],
    timers: Sequence[TimerProjection],
    live: Live | None,
    budget: Callable[[], str | None] | None = None,
    problem: str | None = None,
) -> AgentStatus:
    """The agent's one state. ``waits``: its pending waits; ``timers``: its scheduled timers;
    ``live``: the hosting daemon's view (``None``: no daemon runs); ``budget``: asked only for an
    agent neither paused nor running, why its per-day budget is used up (``None``: it is not; a
    read of the day's spending, so not done for agents whose state does not depend on it);
    ``problem``: a stored setting that is bad (it runs on defaults and the detail says so)."""
    status = _decide(agent, now_us, waits, timers, live, budget)
    if problem:
        detail = "; ".join(filter(None, (status.detail, problem)))
        return AgentStatus(status.agent_id, status.name, status.state, detail, status.next_wake_us)
    return status


def _decide(
    agent: AgentState,
    now: int,
    waits: Sequence[WaitProjection],
    timers: Sequence[TimerProjection],
    live: Live | None,
    budget_of: Callable[[], str | None] | None,
) -> AgentStatus:
    def out(state: StateName, detail: str = "", wake: int | None = None) -> AgentStatus:
        return AgentStatus(agent.agent_id, agent.name, state, detail, wake)

    next_timer = min((t.next_fire_us for t in timers if t.next_fire_us is not None), default=None)
    queued = f"{len(agent.pending_inputs)} inputs queued" if agent.pending_inputs else ""
    if read_settings(agent.settings).settings.paused:
        return out("paused", "; ".join(filter(None, ("paused by the operator", queued))), next_timer)
    running = live.running if live is not None else agent.status == "running"
    if running:
        return out("running", agent.current_turn_id or "")
    budget = budget_of() if budget_of is not None else None
    if budget is not None:
        return out("asleep", f"daily budget used: {budget}", (now // DAY_US + 1) * DAY_US)
    if live is not None and (live.retry_at_us is not None or live.retrying):
        return out("failed", agent.last_error or "", live.retry_at_us)
    if agent.status == "failed":
        if agent.last_error == ABORTED_REASON:
            return out("aborted", "; ".join(filter(None, (ABORTED_REASON, queued))), next_timer)
        return out("failed", agent.last_error or "")
    if waits:
        first = min(waits, key=lambda w: w.recheck_at_us)
        other = [w for w in waits if w.on != "until"]
        if not other:
            reason = f": {first.reason}" if first.reason else ""
            return out("asleep", f"sleeping{reason}", first.recheck_at_us)
        return out("waiting", ", ".join(f"{w.on} {w.target}" if w.target else w.on for w in other), first.recheck_at_us)
    if agent.status == "waiting" and not agent.pending_inputs:
        if next_timer is None:
            return out("failed", "error: asleep with no wake source (no wait, no timer)")
        return out("asleep", "for its next timer", next_timer)
    if next_timer is not None and not agent.pending_inputs:
        return out("asleep", "for its next timer", next_timer)
    return out("idle", queued)


def status_entry(
    status: AgentStatus, waits: Sequence[WaitProjection] = (), *, model: str | None = None
) -> dict[str, Any]:
    """``status`` as JSON: ``next_wake`` (ISO) beside ``next_wake_us`` and, when it waits or
    sleeps, each of its waits; ``model`` when given."""
    wake = status.next_wake_us
    entry: dict[str, Any] = {  # not ``asdict``: its deep copy was a fifth of a 1,000-agent status
        "agent_id": status.agent_id, "name": status.name, "state": status.state, "detail": status.detail,
        "next_wake_us": wake, "next_wake": None if wake is None else format_us(wake),
    }  # fmt: skip
    if status.state in ("waiting", "asleep"):
        entry["waits"] = [
            {"wait_id": w.wait_id, "on": w.on, "target": w.target, "reason": w.reason,
             "recheck_at_us": w.recheck_at_us, "recheck_at": format_us(w.recheck_at_us)}
            for w in waits
        ]  # fmt: skip
    if model is not None:
        entry["model"] = model
    return entry


def status_entries(
    agents: Iterable[AgentState],
    *,
    now_us: int,
    waits: Iterable[WaitProjection],
    timers: Iterable[TimerProjection],
    live: Callable[[AgentState], Live | None],
    budget: Callable[[AgentState], str | None] | None,
    defaults: ModelDefaults,
) -> list[dict[str, Any]]:
    """Every agent's status entry at once: ``decide`` and ``status_entry`` per agent, with its
    ``model`` and ``internal`` (holon's own: views hide it unless asked for all). The batched form
    behind the daemon's status (``GET /v1/status``, the dashboard's agents page) and ``holon agent
    list`` without a daemon: ``waits`` and ``timers`` are all pending waits and scheduled timers,
    grouped here by agent (two queries for any number of agents); ``live(agent)`` is what the hosting
    daemon knows (``None``: none runs); ``budget(agent)`` why its day's budget is used up."""
    by_agent: dict[str, tuple[list[WaitProjection], list[TimerProjection]]] = {}
    for w in waits:
        by_agent.setdefault(w.agent_id, ([], []))[0].append(w)
    for t in timers:
        by_agent.setdefault(t.agent_id, ([], []))[1].append(t)
    out = []
    for agent in agents:
        own_waits, own_timers = by_agent.get(agent.agent_id, ((), ()))
        status = decide(
            agent, now_us=now_us, waits=own_waits, timers=own_timers, live=live(agent),
            budget=None if budget is None else functools.partial(budget, agent),
            problem=settings_problem(agent.settings, defaults),
        )  # fmt: skip
        entry = status_entry(status, own_waits, model=model_label(agent, defaults.model))
        entry["internal"] = is_internal(agent)
        out.append(entry)
    return out


def describe(entry: Mapping[str, Any]) -> str:
    """The detail of one status entry as a person reads it: what it waits on, why it failed, and
    when it next acts (UTC), e.g. ``on operator; recheck at 2026-01-01 09:00:00Z``."""
    state, detail = entry.get("state", "?"), str(entry.get("detail") or "")
    if state == "waiting":
        detail = f"on {detail}"
    elif state == "failed":
        detail = f"last error: {detail}" if detail and not detail.startswith("error:") else (detail or "failed")
    wake = entry.get("next_wake")
    if wake is None and isinstance(entry.get("next_wake_us"), int):
        wake = format_us(entry["next_wake_us"])
    if wake and state in _WAKE_WORDS:
        when = f"{_WAKE_WORDS[state]} {str(wake)[:19]}Z"
        detail = f"{detail}; {when}" if detail else when
    return detail


def without_internal(status: Mapping[str, Any], *, everything: bool = False) -> dict[str, Any]:
    """A daemon status (``Daemon.status``) whose ``agents`` lack holon's internal ones, unless
    ``everything``: what ``daemon status`` and ``GET /v1/status`` show without ``--all``."""
    out = dict(status)
    if not everything and "agents" in out:
        out["agents"] = [a for a in out["agents"] if not a.get("internal")]
    return out
