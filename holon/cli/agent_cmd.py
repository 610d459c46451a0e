"""``holon agent ...``: create, configure, list, show, pause, resume and delete agents.

With a daemon running for the home each command goes through its HTTP API (``holon.cli.backend``),
else it runs in-process; both print the same output from the same data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli import backend
from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store
from holon.cli.schedules import warn_unless_daemon

if TYPE_CHECKING:
    from pydantic import JsonValue

    from holon.ledger import events as ev
    from holon.projections.state import AgentState, TimerProjection

app = typer.Typer(help="Create, list and inspect agents.", no_args_is_help=True)


ModelOpt = Annotated[str | None, typer.Option("--model", help="litellm model name, e.g. openai/gpt-4o-mini.")]
ApiBaseOpt = Annotated[str | None, typer.Option("--api-base", help="Base URL of an OpenAI-compatible server.")]
KeyEnvOpt = Annotated[
    str | None, typer.Option("--api-key-env", help="Name of the environment variable holding the API key.")
]
TempOpt = Annotated[float | None, typer.Option("--temperature", min=0, max=2)]
MaxOutOpt = Annotated[int | None, typer.Option("--max-output-tokens", min=1)]
CtxOpt = Annotated[int | None, typer.Option("--context-window", min=256, help="Override the model's context window.")]
RoundsOpt = Annotated[int | None, typer.Option("--max-rounds", min=1, max=200, help="Model rounds per turn.")]
TokensOpt = Annotated[int | None, typer.Option("--max-tokens-per-turn", min=1000)]
CostOpt = Annotated[float | None, typer.Option("--max-cost-per-turn-usd", min=0.0)]
BudgetTurnsOpt = Annotated[
    int | None, typer.Option("--budget-turns-per-day", min=0, help="Background agents: turns per day.")
]
BudgetTokensOpt = Annotated[int | None, typer.Option("--budget-tokens-per-day", min=0)]
BudgetCostOpt = Annotated[float | None, typer.Option("--budget-cost-per-day-usd", min=0.0)]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="Run in the background on a schedule: 'every 30s|5 minutes|2h|1 day', '@hourly|@daily|@weekly|@monthly', "
        "a crontab line ('0 9 * * *') or an ISO time; read in the runtime.timezone setting (default: the system's zone).",
    ),
]
PromptOpt = Annotated[str | None, typer.Option("--prompt", help="What the agent is told each time its schedule fires.")]


def _settings(**values: JsonValue) -> dict[str, JsonValue]:
    return {k: v for k, v in values.items() if v is not None}


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name: a-z, 0-9, '-' and '_'.")],
    template: Annotated[str, typer.Option(help="Agent template: assistant or monitor.")] = "assistant",
    workspace: Annotated[
        str | None, typer.Option(help="Directory where the agent's commands run (default: its home).")
    ] = None,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key_env: KeyEnvOpt = None,
    schedule: ScheduleOpt = None,
    prompt: PromptOpt = None,
    budget_turns_per_day: BudgetTurnsOpt = None,
    budget_tokens_per_day: BudgetTokensOpt = None,
    budget_cost_per_day_usd: BudgetCostOpt = None,
    exist_ok: Annotated[bool, typer.Option("--exist-ok", help="Succeed if the agent already exists.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Create an agent with its own home directory, initialised from the template.

    With --schedule it is a background agent: the daemon wakes it on that schedule with --prompt,
    within its per-day budgets."""
    from holon.errors import NotFoundError, UsageError
    from holon.runtime.agents import create_agent

    c = ctx_of(ctx, home, json_out)
    settings = _settings(
        model=model,
        api_base=api_base,
        api_key_env=api_key_env,
        budget_turns_per_day=budget_turns_per_day,
        budget_tokens_per_day=budget_tokens_per_day,
        budget_cost_per_day_usd=budget_cost_per_day_usd,
    )
    made: ev.TimerScheduled | TimerProjection | None = None
    if prompt is not None and schedule is None:
        raise UsageError("--prompt goes with --schedule (what the agent is told when the schedule fires)")
    if schedule is not None:  # checked here, before any daemon or store is asked
        from holon.clock import SystemClock
        from holon.config import load_settings
        from holon.runtime.schedule import timer_event

        zone = load_settings(c.paths).runtime.zone()
        now = SystemClock().now_us()
        made = timer_event(schedule, now_us=now, prompt=prompt, zone=zone)
    with backend.daemon(c) as api:
        existing: AgentState | None = None
        if api is not None:
            from holon.projections.state import AgentState

            if exist_ok:
                try:
                    existing = AgentState.model_validate(api.read(f"/agents/{name}")["agent"])
                except NotFoundError:
                    existing = None
                if existing is not None:
                    _already(c, existing)
                    return
            if workspace is not None:  # the daemon's working directory is not this shell's
                from pathlib import Path

                workspace = str(Path(workspace).expanduser().resolve())
            body = {"name": name, "template": template, "workspace": workspace, "schedule": schedule,
                    "prompt": prompt, "settings": settings or None}  # fmt: skip
            agent = AgentState.model_validate(api.change("POST", "/agents", body))
        else:
            with open_store(c) as store:
                if exist_ok:
                    try:
                        existing = store.agent(name)
                    except NotFoundError:
                        existing = None
                if existing is not None:
                    _already(c, existing)
                    return
                agent = create_agent(
                    store, name, template=template, settings=settings, workspace=workspace,
                    schedule=schedule, prompt=prompt, now_us=now if made is not None else None,
                )  # fmt: skip
                if made is not None:  # as stored
                    made = store.timers(agent_id=agent.agent_id)[0]
    human = f"created agent {agent.name} ({agent.agent_id})\n  home: {agent.home}"
    if made is not None:
        human += "\n" + _schedule_line(made, zone)
    emit(c, agent.model_dump(mode="json"), human)
    if made is not None:
        warn_unless_daemon(c)


def _schedule_line(made: ev.TimerScheduled | TimerProjection, zone: str) -> str:
    """``  schedule: cron '0 9 * * *' (Europe/Paris), next 2026-03-30 09:00:00 CEST (Europe/Paris)``."""
    from holon.runtime.schedule import describe, format_local, split_cron

    kind, spec, due = made.kind, made.spec, made.next_fire_us
    where = split_cron(spec)[0] if kind == "cron" else zone
    return f"  schedule: {describe(kind, spec)}, next {format_local(due, where) if due is not None else '-'}"


def _already(c: Ctx, existing: AgentState) -> None:
    emit(c, existing.model_dump(mode="json"), f"agent {existing.name} already exists ({existing.agent_id})")


@app.command("configure")
def configure(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name or id.")],
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key_env: KeyEnvOpt = None,
    temperature: TempOpt = None,
    max_output_tokens: MaxOutOpt = None,
    context_window: CtxOpt = None,
    max_rounds: RoundsOpt = None,
    max_tokens_per_turn: TokensOpt = None,
    max_cost_per_turn_usd: CostOpt = None,
    budget_turns_per_day: BudgetTurnsOpt = None,
    budget_tokens_per_day: BudgetTokensOpt = None,
    budget_cost_per_day_usd: BudgetCostOpt = None,
    unset: Annotated[list[str] | None, typer.Option("--unset", help="Reset a setting to its default.")] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Change an agent's model and limits (recorded in the ledger; keys never are, only env var names).

    Configuring the default agent 'assistant' before `holon chat` made it creates it."""
    from holon.runtime.agents import configure_or_create_default

    c = ctx_of(ctx, home, json_out)
    changes = _settings(
        model=model,
        api_base=api_base,
        api_key_env=api_key_env,
        temperature=temperature,
        max_output_tokens=max_output_tokens,
        context_window=context_window,
        max_rounds=max_rounds,
        max_tokens_per_turn=max_tokens_per_turn,
        max_cost_per_turn_usd=max_cost_per_turn_usd,
        budget_turns_per_day=budget_turns_per_day,
        budget_tokens_per_day=budget_tokens_per_day,
        budget_cost_per_day_usd=budget_cost_per_day_usd,
    )
    with backend.daemon(c) as api:
        if api is not None:  # the daemon creates the default agent too (RFC 0002)
            agent = _agent(api.change("PATCH", f"/agents/{name}", {"settings": changes, "unset": unset or []}))
            created = False
        else:
            with open_store(c) as store:
                agent, created = configure_or_create_default(store, name, changes, unset=unset or [])
    from holon.cli.agent_view import settings_block

    verb = f"created {agent.name} ({agent.agent_id}); its settings:" if created else f"configured {agent.name}:"
    emit(c, agent.model_dump(mode="json"), f"{verb}\n{settings_block(agent.settings)}")


AllOpt = Annotated[bool, typer.Option("--all", help="Also list holon's internal agents (holon diagnose's).")]


def _agent(data: Any) -> AgentState:
    """An agent as the API returned it, as the projection's own model (the same ``--json``)."""
    from holon.projections.state import AgentState

    return AgentState.model_validate(data)


@app.command("list")
def list_(ctx: typer.Context, all_: AllOpt = False, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """List agents: state (as daemon status shows it), model, turns, and what the state is about."""
    from holon.cli.agent_view import agent_rows, live_entries, render_agent_rows
    from holon.runtime.status import is_internal

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            agents = [_agent(a) for a in api.read("/agents", all="true")]
            published = api.read("/status", all="true").get("agents", [])
            entries = {str(e.get("agent_id")): e for e in published}
        else:
            with open_store(c) as store:
                agents = store.agents()
                entries = live_entries(c, store, agents)
    rows = agent_rows([a for a in agents if all_ or not is_internal(a)], entries)
    emit(c, rows, render_agent_rows(rows))


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name or id.")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show an agent: state, model, settings, working memory and open work."""
    from holon.cli.agent_view import live_entries, render_agent_show
    from holon.runtime.settings import settings_problem

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            from holon.config import load_settings

            detail = api.read(f"/agents/{name}")
            shown, entry = detail["agent"], detail.get("status") or {}
            wm, counts = detail["working_memory"], detail["counts"]
            problem = settings_problem(shown.get("settings") or {}, load_settings(c.paths).model)
        else:
            with open_store(c) as store:
                agent = store.agent(name)
                problem = settings_problem(agent.settings, store.settings.model)
                entry = live_entries(c, store, [agent]).get(agent.agent_id, {})
                wm = store.working_memory(agent.agent_id)
                counts = store.counts(agent.agent_id)
            shown = agent.model_dump(mode="json")
    data = {"agent": shown, "status": entry, "working_memory": wm, "counts": counts}
    emit(c, data, render_agent_show(shown, entry, wm, counts, problem))


@app.command("hook")
def hook(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name or id.")],
    rotate: Annotated[
        bool, typer.Option("--rotate", help="Replace the token: the old URL stops working at once.")
    ] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the agent's capability URL for external events (POST a JSON object to it); keep it secret."""
    from holon.daemon.hooks import hook_tokens
    from holon.daemon.process import read_state

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            agent = _agent(api.read(f"/agents/{name}")["agent"])
            answer = api.change("POST", f"/agents/{name}/hook/rotate") if rotate else api.read(f"/agents/{name}/hook")
            path = str(answer["path"])
        else:
            with open_store(c) as store:
                agent = store.agent(name)
                tokens = hook_tokens(store)
                path = f"/v1/hooks/{tokens.rotate(agent.agent_id) if rotate else tokens.token(agent.agent_id)}"
    info = read_state(c.paths)
    base = info.get("api") if info.get("running") else None
    url = f"{base}{path}" if base else None
    data = {"agent": agent.name, "path": path, "url": url, "rotated": rotate}
    text = url or f"{path}  (no daemon with HTTP is running; prefix the daemon's address)"
    emit(c, data, ("rotated; new URL: " if rotate else "") + text)


def _timer_line(timer: dict[str, object]) -> str:
    """One timer for ``holon agent schedule``: id, schedule, next fire time (in its zone), firings, prompt."""
    from holon.runtime.schedule import describe

    what = describe(timer["kind"], str(timer["spec"]))  # type: ignore[arg-type]  # a TimerProjection dumped to JSON: kind is a TimerKind
    nxt = timer.get("next_fire_local") or "-"
    prompt = timer.get("prompt")
    line = f"{timer['timer_id']}  {what}  next: {nxt}  fired: {timer['fired']}"
    line += f"  missed: {timer['missed']}" if timer.get("missed") else ""
    return line + (f"\n    prompt: {prompt}" if prompt else "")


@app.command("schedule")
def schedule(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name or id.")],
    add: Annotated[
        str | None,
        typer.Option(
            "--add",
            help="A new schedule: 'every 30s|5 minutes|2h|1 day', '@hourly|@daily|@weekly|@monthly', a crontab "
            "line ('0 9 * * *') or an ISO time; read in the runtime.timezone setting (default: the system's zone).",
        ),
    ] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="What the agent is told when --add fires.")] = None,
    cancel: Annotated[str | None, typer.Option("--cancel", help="Cancel the timer with this id.")] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the agent's schedules with their next fire times; --add one, or --cancel one.

    Each change is a ledger event: a running daemon picks it up at once, no restart needed. An
    agent given a schedule becomes a background agent (per-day budgets apply)."""
    from holon.clock import SystemClock, format_us
    from holon.errors import UsageError
    from holon.projections.state import TimerProjection
    from holon.runtime.agents import add_timer, cancel_timer
    from holon.runtime.schedule import format_local, timer_zone

    c = ctx_of(ctx, home, json_out)
    if add is not None and cancel is not None:
        raise UsageError("give --add or --cancel, not both")
    if prompt is not None and add is None:
        raise UsageError("--prompt goes with --add (what the agent is told when the new schedule fires)")

    from holon.config import load_settings

    zone = load_settings(c.paths).runtime.zone()

    def shown(timer: TimerProjection | dict[str, Any]) -> dict[str, object]:
        if isinstance(timer, dict):  # as the daemon's API returned it
            timer = TimerProjection.model_validate(timer)
        data: dict[str, object] = timer.model_dump(mode="json")
        due = data.get("next_fire_us")
        data["next_fire"] = format_us(due) if isinstance(due, int) else None
        data["zone"] = where = timer_zone(timer, zone)
        data["next_fire_local"] = format_local(due, where) if isinstance(due, int) else None
        return data

    with backend.daemon(c) as api:
        if api is not None:
            agent = _agent(api.read(f"/agents/{name}")["agent"])
            if add is not None:
                added = shown(api.change("POST", f"/agents/{name}/timers", {"schedule": add, "prompt": prompt}))
                emit(c, added, f"scheduled for {agent.name}:\n  {_timer_line(added)}")
                return
            if cancel is not None:
                from urllib.parse import quote

                gone = shown(api.change("DELETE", f"/agents/{name}/timers/{quote(cancel, safe='')}"))
                emit(c, gone, f"cancelled timer {gone['timer_id']} of {agent.name}")
                return
            timers = [shown(t) for t in api.read(f"/agents/{name}/timers", status="scheduled")]
            text = "\n".join(_timer_line(t) for t in timers) or f"{agent.name} has no schedules (add one with --add)"
            emit(c, timers, text)
            return
    with open_store(c) as store:
        agent = store.agent(name)
        if add is not None:
            now = SystemClock().now_us()
            timer = add_timer(store, agent.agent_id, add, now_us=now, prompt=prompt, origin="operator:cli")
            emit(c, shown(timer), f"scheduled for {agent.name}:\n  {_timer_line(shown(timer))}")
            warn_unless_daemon(c)
            return
        if cancel is not None:
            timer = cancel_timer(store, agent.agent_id, cancel, origin="operator:cli")
            emit(c, shown(timer), f"cancelled timer {timer.timer_id} of {agent.name}")
            return
        timers = [shown(t) for t in store.timers(agent_id=agent.agent_id, status="scheduled")]
    text = "\n".join(_timer_line(t) for t in timers) or f"{agent.name} has no schedules (add one with --add)"
    emit(c, timers, text)


AgentArg = Annotated[str, typer.Argument(help="Agent name or id.")]


def _pause_or_resume(c: Ctx, name: str, pause: bool) -> None:
    from holon.runtime.agents import configure_agent

    verb = "pause" if pause else "resume"
    with backend.daemon(c) as api:
        if api is not None:
            agent = _agent(api.change("POST", f"/agents/{name}/{verb}"))
        else:
            with open_store(c) as store:
                agent = configure_agent(
                    store, name, {"paused": True} if pause else {}, unset=[] if pause else ["paused"]
                )
    emit(
        c,
        agent.model_dump(mode="json"),
        f"{verb}d {agent.name}" + (" (its inputs queue until resumed)" if pause else ""),
    )


@app.command("pause")
def pause(ctx: typer.Context, name: AgentArg, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Pause an agent: it takes no turns (inputs and timers queue) until resumed."""
    _pause_or_resume(ctx_of(ctx, home, json_out), name, True)


@app.command("resume")
def resume(ctx: typer.Context, name: AgentArg, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Resume a paused agent: what queued meanwhile is answered."""
    _pause_or_resume(ctx_of(ctx, home, json_out), name, False)


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: AgentArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete an agent and the child agents it started: its turn is aborted, its tasks, waits and
    timers end, its home directory is removed. Its history stays in the ledger."""
    import sys

    c = ctx_of(ctx, home, json_out)
    if not yes:
        if not sys.stdin.isatty():
            from holon.errors import UsageError

            raise UsageError(f"deleting {name} removes its home directory; pass --yes to confirm")
        typer.confirm(f"Delete agent {name} and its home directory?", abort=True)
    with backend.daemon(c) as api:
        if api is not None:
            agent = _agent(api.read(f"/agents/{name}")["agent"])
            api.change("DELETE", f"/agents/{agent.agent_id}")
        else:
            from holon.daemon.deletion import delete_offline

            with open_store(c) as store:
                agent, _ = delete_offline(store, name)
    emit(c, {"deleted": agent.name, "agent_id": agent.agent_id}, f"deleted agent {agent.name} ({agent.agent_id})")
