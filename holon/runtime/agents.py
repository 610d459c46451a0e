"""Agent lifecycle operations: create one (with its own home directory, and its schedule), give it
timers or cancel them, configure it, look agents up. Used alike by the CLI without a daemon and by
the daemon's port (``holon.daemon.ports``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from holon.clock import SystemClock
from holon.errors import ConflictError, NotFoundError, UsageError
from holon.ids import is_valid_name, new_id
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.memory.durable_views import render_agent
from holon.memory.files import atomic_write
from holon.memory.writes import replay_files
from holon.paths import tighten_tree
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection
from holon.resources import agent_home_template
from holon.runtime.schedule import timer_event
from holon.runtime.settings import OPERATOR_KEYS, checked_for_write, key_label, read_settings

__all__ = [
    "BUDGET_KEYS",
    "DEFAULT_AGENT",
    "SETTING_KEYS",
    "TEMPLATES",
    "Template",
    "add_timer",
    "cancel_timer",
    "configure_agent",
    "configure_or_create_default",
    "create_agent",
    "ensure_home",
    "missing_agent",
]


@dataclass(frozen=True, slots=True)
class Template:
    description: str
    agents_md: str | None
    """A role contract replacing ``agent_home/AGENTS.md`` (a file in ``templates/``), or ``None``."""
    settings: dict[str, JsonValue]
    """Default settings; ``holon agent configure`` overrides them."""


#: Agent templates. Each starts from ``agent_home/``; a template may replace AGENTS.md and set defaults.
TEMPLATES: dict[str, Template] = {
    "assistant": Template("a general assistant that works with the operator", None, {}),
    "monitor": Template(
        "a background monitor that checks something on a schedule and briefs the operator on changes",
        "monitor.md",
        {"max_rounds": 6},
    ),
}
_TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def _not_per_agent(directory: str, names: list[str]) -> set[str]:
    """Template files that live once per home, not in each agent's home: the operator's file."""
    return {"operator.md"} if Path(directory).name == "memory" else set()


def _install_home(target: Path, template: Template) -> bool:
    """Copy the agent home template to ``target`` atomically. False when it already exists."""
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copytree(agent_home_template(), staging, dirs_exist_ok=True, ignore=_not_per_agent)
        if template.agents_md:
            shutil.copyfile(_TEMPLATE_DIR / template.agents_md, staging / "AGENTS.md")
        tighten_tree(staging)  # copytree copies the package's modes (0644): an agent's home is private
        staging.replace(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def create_agent(
    store: Store,
    name: str,
    *,
    template: str = "assistant",
    origin: str = "operator:cli",
    settings: dict[str, JsonValue] | None = None,
    workspace: str | None = None,
    parent_id: str | None = None,
    timers: Sequence[ev.TimerScheduled] = (),
    schedule: str | None = None,
    prompt: str | None = None,
    now_us: int | None = None,
    internal: bool = False,
) -> AgentState:
    """Create agent ``name``: its home directory from the template, then its ``agent.created`` event
    (with ``timers`` in the same transaction).

    ``schedule`` (as typed, read in ``[runtime] timezone``; ``prompt`` is what it is told when it
    fires, ``now_us`` when it is made) makes it a background agent with that timer: the one way
    ``holon agent create --schedule`` and ``POST /v1/agents`` both make one.

    ``settings`` are checked against ``AgentSettings`` and the operator's allow-lists (a bad one is
    a ``UsageError`` naming the field, never its value); ``internal`` admits the keys only holon
    itself sets (``diagnostic``, ``parent_task_id``)."""
    if schedule is not None:  # checked first: a bad schedule is named whatever else is wrong
        now = SystemClock().now_us() if now_us is None else now_us
        timers = [*timers, timer_event(schedule, now_us=now, prompt=prompt, zone=store.settings.runtime.zone())]
    if not is_valid_name(name):
        raise UsageError(f"bad agent name {name!r}: use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit")
    if template not in TEMPLATES:
        raise UsageError(f"unknown template {template!r}; known: {', '.join(sorted(TEMPLATES))}")
    try:
        store.agent(name)
    except NotFoundError:
        pass
    else:
        raise ConflictError(f"agent name {name!r} is already taken")
    if workspace is not None and not Path(workspace).is_dir():
        raise UsageError(f"workspace {workspace!r} is not a directory")
    if settings is not None and not isinstance(settings, dict):
        raise UsageError("settings must be an object of setting names to values")
    if schedule is not None:
        settings = {**(settings or {}), "background": True}
    merged = checked_for_write(
        {**TEMPLATES[template].settings, **(settings or {})}, {}, store.settings.model, internal=internal
    )
    home = store.paths.agent_home(name)
    installed = _install_home(home, TEMPLATES[template])
    agent_id = new_id("agt")
    try:
        store.append(
            NewEvent(
                agent_id,
                ev.AgentCreated(
                    name=name,
                    template=template,
                    home=str(home),
                    settings=merged,
                    workspace=str(Path(workspace).resolve()) if workspace else None,
                    parent_id=parent_id,
                ),
                origin=origin,
                authority="agent" if parent_id else "operator",
            ),
            *[NewEvent(agent_id, t, origin=origin, authority="agent" if parent_id else "operator") for t in timers],
        )
    except BaseException:
        if installed:
            shutil.rmtree(home, ignore_errors=True)
        raise
    agent = store.agent(agent_id)
    get_logger("holon.agents").info("agent.created", agent=agent.name, agent_id=agent.agent_id, home=str(home))
    try:  # the durable memory its scopes already hold (a workspace's, the operator's) shows at once
        render_agent(store, agent)
    except OSError as e:  # a view is rebuilt at the next daemon start; never worth failing a create
        get_logger("holon.agents").warning("agent.views_not_rendered", agent=agent.name, error=str(e))
    return agent


def ensure_home(store: Store, agent: AgentState) -> bool:
    """Install ``agent``'s home directory on this machine when it is missing, as it was made and
    as the ledger says its files became: the template it was created from, then every curated file
    its ``memory.written`` events hold (``replay_files``), each written atomically. A node taking
    over an agent created on another machine calls it (RFC 0008, "Agent workspaces"); what only
    the other machine's disk held (a task's output, a hand edit never recorded) is not there.
    False when the home exists."""
    home = Path(agent.home)
    if home.exists() or not _install_home(home, TEMPLATES.get(agent.template, TEMPLATES["assistant"])):
        return False
    replayed = replay_files(store)
    for path, text in replayed.files.items():
        if path.is_relative_to(home):
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text.encode("utf-8"))
    get_logger("holon.agents").info(
        "agent.home_installed", agent=agent.name, home=str(home), problems=replayed.problems[:5]
    )
    return True


#: Per-day budgets of background agents (defaults in the ``[daemon]`` config section).
BUDGET_KEYS = ("budget_turns_per_day", "budget_tokens_per_day", "budget_cost_per_day_usd")

#: Settings ``configure_agent`` accepts: the model's, the turn limits, the daemon's (``paused``,
#: ``background``) and the per-day budgets (``AgentSettings`` types and bounds each).
SETTING_KEYS = OPERATOR_KEYS


def configure_agent(
    store: Store,
    ref: str,
    changes: dict[str, JsonValue],
    *,
    unset: list[str] | tuple[str, ...] = (),
    origin: str = "operator:cli",
) -> AgentState:
    """Record new settings for an agent. Unknown keys and bad values are refused (``UsageError``
    naming the field, never the value); ``unset`` resets keys to defaults."""
    agent = store.agent(ref)
    if not isinstance(changes, dict) or isinstance(unset, str | bytes):
        raise UsageError("settings must be an object of setting names to values, unset a list of names")
    unknown = [k for k in unset if k not in SETTING_KEYS]
    if unknown:
        raise UsageError(f"unknown setting {key_label(unknown[0])}; known: {', '.join(sorted(SETTING_KEYS))}")
    if not changes and not unset:
        raise UsageError("nothing to configure: give at least one option")
    clean = checked_for_write(changes, agent.settings, store.settings.model, nullable=True, unset=unset)
    merged: dict[str, JsonValue] = {**clean, **dict.fromkeys(unset)}
    try:
        payload = ev.AgentConfigured(changes=merged)
    except ValueError:
        raise UsageError("these settings cannot be recorded") from None  # the error would carry the values
    store.append(NewEvent(agent.agent_id, payload, origin=origin, authority="operator"))
    return store.agent(agent.agent_id)


#: The agent ``holon chat`` creates on a fresh home (and ``configure_or_create_default`` creates).
DEFAULT_AGENT = "assistant"


def missing_agent(ref: str) -> NotFoundError:
    """The error for configuring an agent that does not exist (and is not the default agent)."""
    return NotFoundError(f"no agent named {ref!r} (create it with 'holon agent create {ref}')")


def configure_or_create_default(
    store: Store,
    ref: str,
    changes: dict[str, JsonValue],
    *,
    unset: list[str] | tuple[str, ...] = (),
    origin: str = "operator:cli",
) -> tuple[AgentState, bool]:
    """``configure_agent``, except that configuring the default agent before ``holon chat`` made
    it creates it with those settings (the README's first step is to configure ``assistant``).
    Returns the agent and whether it was created. Any other missing agent is ``NotFoundError``."""
    try:
        store.agent(ref)
    except NotFoundError:
        if ref != DEFAULT_AGENT:
            raise missing_agent(ref) from None
        unknown = [k for k in unset if k not in SETTING_KEYS]
        if unknown:
            raise UsageError(
                f"unknown setting {key_label(unknown[0])}; known: {', '.join(sorted(SETTING_KEYS))}"
            ) from None
        if not changes and not unset:
            raise UsageError("nothing to configure: give at least one option") from None
        settings: dict[str, JsonValue] = {k: v for k, v in changes.items() if v is not None}
        return create_agent(store, ref, settings=settings, origin=origin), True
    return configure_agent(store, ref, changes, unset=unset, origin=origin), False


def add_timer(
    store: Store, agent: str, schedule: str, *, now_us: int, prompt: str | None = None, origin: str
) -> TimerProjection:
    """Give an agent one more schedule: ``timer.scheduled``, and ``agent.configured(background)``
    in the same transaction when it was not a background agent yet (a timer wakes it with no
    operator present, so its per-day budgets must apply, as for ``agent create --schedule``)."""
    state = store.agent(agent)
    made = timer_event(schedule, now_us=now_us, prompt=prompt, zone=store.settings.runtime.zone())
    events = []
    if read_settings(state.settings).settings.background is not True:  # total: "no" is not background
        events.append(NewEvent(state.agent_id, ev.AgentConfigured(changes={"background": True}), origin=origin, authority="operator"))  # fmt: skip
    events.append(NewEvent(state.agent_id, made, origin=origin, authority="operator"))
    store.append(*events)
    timer = store.timer(made.timer_id)
    assert isinstance(timer, TimerProjection)
    return timer


def cancel_timer(store: Store, agent: str, timer_id: str, *, origin: str) -> TimerProjection:
    """Cancel one of an agent's timers (``timer.cancelled``): ``NotFoundError`` for a timer id the
    agent does not have, ``ConflictError`` for one that is already over (fired once, cancelled)."""
    state = store.agent(agent)
    timer = store.timer(timer_id)
    if not isinstance(timer, TimerProjection) or timer.agent_id != state.agent_id:
        raise NotFoundError(f"agent {state.name} has no timer {timer_id!r} (see 'holon agent schedule {state.name}')")
    if timer.status != "scheduled":
        raise ConflictError(f"timer {timer_id} of {state.name} is already {timer.status}")
    store.append(NewEvent(state.agent_id, ev.TimerCancelled(timer_id=timer_id), origin=origin, authority="operator"))
    cancelled = store.timer(timer_id)
    assert isinstance(cancelled, TimerProjection)
    return cancelled
