"""``holon agent ...``: create, configure, list, show, pause, resume and delete agents.

With a daemon running for the home each command goes through its HTTP API (``holon.cli.backend``),
else it runs in-process; both print the same output from the same data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli import backend
from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    from holon.projections.state import AgentState

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
        help="Run in the background on a schedule: a crontab line ('0 9 * * *', UTC), 'every 30s|5m|2h|1d', or an ISO time.",
    ),
]
PromptOpt = Annotated[str | None, typer.Option("--prompt", help="What the agent is told each time its schedule fires.")]


def _settings(**values: object) -> dict[str, object]:
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
    timers = []
    if prompt is not None and schedule is None:
        raise UsageError("--prompt goes with --schedule (what the agent is told when the schedule fires)")
    if schedule is not None:
        from holon.clock import SystemClock
        from holon.daemon.timers import timer_event

        timers.append(timer_event(schedule, now_us=SystemClock().now_us(), prompt=prompt))
        settings["background"] = True
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
            settings.pop("background", None)  # the daemon sets it with the schedule
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
                agent = create_agent(store, name, template=template, settings=settings, workspace=workspace, timers=timers)  # type: ignore[arg-type]  # fmt: skip
    emit(c, agent.model_dump(mode="json"), f"created agent {agent.name} ({agent.agent_id})\n  home: {agent.home}")


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
    """Change an agent's model and limits (recorded in the ledger; keys never are, only env var names)."""
    from holon.runtime.agents import configure_agent

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
        if api is not None:
            agent = _agent(api.change("PATCH", f"/agents/{name}", {"settings": changes, "unset": unset or []}))
        else:
            with open_store(c) as store:
                agent = configure_agent(store, name, changes, unset=unset or [])  # type: ignore[arg-type]
    emit(c, agent.model_dump(mode="json"), f"configured {agent.name}: {agent.settings or '{}'}")


def _agent(data: Any) -> AgentState:
    """An agent as the API returned it, as the projection's own model (the same ``--json``)."""
    from holon.projections.state import AgentState

    return AgentState.model_validate(data)


@app.command("list")
def list_(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """List agents with their status."""
    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            agents = [_agent(a) for a in api.read("/agents")]
        else:
            with open_store(c) as store:
                agents = store.agents()
    _render_list(c, agents)


def _render_list(c: Ctx, agents: list[AgentState]) -> None:
    """``agent list``'s output, whichever way the agents were read."""
    if c.json:
        emit(c, [a.model_dump(mode="json") for a in agents])
        return
    if not agents:
        emit(c, None, "no agents yet (create one with 'holon agent create NAME')")
        return
    width = max(len(a.name) for a in agents)
    lines = [f"{a.name:<{width}}  {a.status:<11}  turns={a.turns:<5}  {a.agent_id}" for a in agents]
    emit(c, None, "\n".join(lines))


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Agent name or id.")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show an agent: settings, status, working memory and open work."""
    from holon.runtime.settings import settings_problem

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            from holon.config import load_settings

            detail = api.read(f"/agents/{name}")
            agent, wm, counts = _agent(detail["agent"]), detail["working_memory"], detail["counts"]
            problem = settings_problem(agent.settings, load_settings(c.paths).model)
        else:
            with open_store(c) as store:
                agent = store.agent(name)
                problem = settings_problem(agent.settings, store.settings.model)
                wm = store.working_memory(agent.agent_id)
                counts = {
                    kind: len(store.rows(kind, agent_id=agent.agent_id))
                    for kind in ("work_item", "task", "wait", "timer")
                }
    _render_show(c, agent, wm, counts, problem)


def _render_show(c: Ctx, agent: AgentState, wm: dict[str, Any], counts: dict[str, int], problem: str | None) -> None:
    """``agent show``'s output, whichever way the agent was read."""
    data = {"agent": agent.model_dump(mode="json"), "working_memory": wm, "counts": counts}
    lines = [
        f"{agent.name} ({agent.agent_id})",
        f"  status:    {agent.status}" + (f" (last error: {agent.last_error})" if agent.last_error else ""),
        f"  template:  {agent.template}",
        f"  home:      {agent.home}",
        f"  turns:     {agent.turns}",
        f"  settings:  {agent.settings or '{}'}",
        *([f"  problem:   {problem}"] if problem else []),
        f"  work:      {wm.get('work_item_title') or '(no active work item)'}",
    ]
    if wm.get("objective"):
        lines.append(f"  objective: {wm['objective']}")
    lines += [f"  plan:      {step}" for step in wm.get("plan", [])]
    lines += [f"  todo:      [{t['status']}] {t['text']}" for t in wm.get("todos", [])]
    lines += [f"  waiting:   {w['on']} {w.get('target') or ''}".rstrip() for w in wm.get("waiting_on", [])]
    lines.append("  " + ", ".join(f"{k}s: {v}" for k, v in counts.items()))
    emit(c, data, "\n".join(lines))


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
    from holon.daemon.hooks import HookTokens
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
            tokens = HookTokens(c.paths.root)
            path = f"/v1/hooks/{tokens.rotate(agent.agent_id) if rotate else tokens.token(agent.agent_id)}"
    info = read_state(c.paths)
    base = info.get("api") if info.get("running") else None
    url = f"{base}{path}" if base else None
    data = {"agent": agent.name, "path": path, "url": url, "rotated": rotate}
    text = url or f"{path}  (no daemon with HTTP is running; prefix the daemon's address)"
    emit(c, data, ("rotated; new URL: " if rotate else "") + text)


def _timer_line(timer: dict[str, object]) -> str:
    """One timer for ``holon agent schedule``: id, schedule, next fire time, firings, prompt."""
    kind, spec = timer["kind"], str(timer["spec"])
    what = f"every {spec}s" if kind == "interval" else (f"cron '{spec}' (UTC)" if kind == "cron" else f"once at {spec}")
    nxt = timer.get("next_fire") or "-"
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
            help="A new schedule: a crontab line ('0 9 * * *', UTC), 'every 30s|5m|2h|1d', or an ISO time.",
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
    from holon.daemon.timers import add_timer, cancel_timer
    from holon.errors import UsageError
    from holon.projections.state import TimerProjection

    c = ctx_of(ctx, home, json_out)
    if add is not None and cancel is not None:
        raise UsageError("give --add or --cancel, not both")
    if prompt is not None and add is None:
        raise UsageError("--prompt goes with --add (what the agent is told when the new schedule fires)")

    def shown(timer: TimerProjection | dict[str, Any]) -> dict[str, object]:
        data: dict[str, object] = dict(timer) if isinstance(timer, dict) else timer.model_dump(mode="json")
        due = data.get("next_fire_us")
        data["next_fire"] = format_us(due) if isinstance(due, int) else None
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
            return
        if cancel is not None:
            timer = cancel_timer(store, agent.agent_id, cancel, origin="operator:cli")
            emit(c, shown(timer), f"cancelled timer {timer.timer_id} of {agent.name}")
            return
        timers = [shown(t) for t in store.rows("timer", agent_id=agent.agent_id, status="scheduled")]
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
