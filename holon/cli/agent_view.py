"""How ``holon agent list|show`` and ``holon daemon status`` show agents: one status, one layout.

The state itself is decided by ``holon.runtime.status.decide`` (the same function the daemon and
the API use). When a daemon runs, its published status (``<home>/run/daemon.json``, rewritten
within a second of any change) is the truth: only it knows whether a turn runs now or when a
failed agent is retried. Without one, the state is decided here from the projections, the same
way. Rendering is kept in this module (pure functions of rows) so that a command that reads its
rows over the HTTP API shows them exactly the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from holon.cli.common import Ctx
from holon.cli.toml_out import to_toml

if TYPE_CHECKING:
    from holon.projections import Store
    from holon.projections.state import AgentState

__all__ = [
    "agent_rows",
    "daemon_agent_lines",
    "live_entries",
    "render_agent_rows",
    "render_agent_show",
    "settings_block",
]


def live_entries(c: Ctx, store: Store, agents: Sequence[AgentState]) -> dict[str, dict[str, Any]]:
    """Each agent's status entry by id: the running daemon's when it has one for the agent, else
    decided here from the projections (no daemon, or an agent newer than its last status)."""
    from holon.daemon.process import read_state

    info = read_state(c.paths)
    published: dict[str, dict[str, Any]] = {}
    if info.get("running"):
        for entry in (info.get("status") or {}).get("agents", []):
            published[entry.get("agent_id", "")] = entry
    missing = [a for a in agents if a.agent_id not in published]
    return {**published, **_decided_here(store, missing, daemon=bool(info.get("running")))}


def _decided_here(store: Store, agents: Sequence[AgentState], *, daemon: bool) -> dict[str, dict[str, Any]]:
    if not agents:
        return {}
    from holon.clock import SystemClock
    from holon.daemon.budget import Budgets
    from holon.runtime.status import Live, status_entries

    clock = SystemClock()
    budgets = Budgets(store, clock, store.settings.daemon)
    # A daemon runs but has not published these agents yet: it is not running a turn of them.
    live = Live() if daemon else None
    entries = status_entries(
        agents, now_us=clock.now_us(), waits=store.waits(status="pending"), timers=store.timers(status="scheduled"),
        live=lambda _agent: live, budget=budgets.exhausted, defaults=store.settings.model,
    )  # fmt: skip
    return {e["agent_id"]: e for e in entries}


def agent_rows(agents: Sequence[AgentState], entries: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``agent list --json``: each agent's projection row with its status (``state``, ``detail``,
    ``next_wake_us``, ``next_wake``, ``model``, ``internal``) beside it."""
    rows = []
    for a in agents:
        entry = entries.get(a.agent_id, {})
        row = a.model_dump(mode="json")
        for key in ("state", "detail", "next_wake_us", "next_wake", "model", "internal"):
            row[key] = entry.get(key)
        rows.append(row)
    return rows


def render_agent_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """``agent list``: a table of name, state, model, turns and what the state is about."""
    from holon.runtime.status import describe

    if not rows:
        return "no agents yet (create one with 'holon agent create NAME')"
    table = [("NAME", "STATE", "MODEL", "TURNS", "DETAIL")]
    table += [
        (str(r["name"]), str(r.get("state") or "?"), str(r.get("model") or ""), str(r.get("turns", 0)), describe(r))
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, [*widths, 0], strict=True)) for line in table]
    return "\n".join(line.rstrip() for line in lines)


def settings_block(settings: Mapping[str, Any], indent: str = "    ") -> str:
    """An agent's settings as TOML lines (what ``holon.toml`` would hold), ``(defaults)`` when none."""
    if not settings:
        return f"{indent}(none: the [model] and [runtime] defaults apply)"
    return "\n".join(indent + line for line in to_toml(dict(settings)).splitlines())


def render_agent_show(
    agent: Mapping[str, Any],
    entry: Mapping[str, Any],
    working_memory: Mapping[str, Any],
    counts: Mapping[str, int],
    problem: str | None = None,
) -> str:
    """``agent show``: status, model and settings (as TOML), working memory and open work."""
    from holon.runtime.status import describe

    detail = describe(entry)
    wm = working_memory
    lines = [
        f"{agent['name']} ({agent['agent_id']})",
        f"  state:     {entry.get('state', '?')}" + (f" ({detail})" if detail else ""),
        f"  model:     {entry.get('model') or '?'}",
        f"  template:  {agent['template']}",
        f"  home:      {agent['home']}",
        f"  turns:     {agent['turns']}",
        "  settings:",
        settings_block(agent.get("settings") or {}),
        *([f"  problem:   {problem}"] if problem else []),
        f"  work:      {wm.get('work_item_title') or '(no active work item)'}",
    ]
    if wm.get("objective"):
        lines.append(f"  objective: {wm['objective']}")
    lines += [f"  plan:      {step}" for step in wm.get("plan", [])]
    lines += [f"  todo:      [{t['status']}] {t['text']}" for t in wm.get("todos", [])]
    lines += [f"  waiting:   {w['on']} {w.get('target') or ''}".rstrip() for w in wm.get("waiting_on", [])]
    lines.append("  " + ", ".join(f"{k}s: {v}" for k, v in counts.items()))
    return "\n".join(lines)


def daemon_agent_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """``daemon status``: one line per agent, its state and what the state is about."""
    from holon.runtime.status import describe

    width = max((len(str(e.get("name", "?"))) for e in entries), default=0)
    width = max(width, 20)
    return [f"  {e.get('name', '?'):<{width}} {e.get('state', '?'):<8}  {describe(e)}".rstrip() for e in entries]
