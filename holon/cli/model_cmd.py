"""``holon model list|test|set``: which model each agent talks to, one real call to check one, and
the one command that switches an agent to another.

``set`` is ``holon agent configure`` for the three model settings (same validation, same ledger
event, ``holon.runtime.agents``); ``test`` calls the model through the provider a turn uses
(``holon.runtime.model_check.probe``). Heavy imports stay inside the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    from holon.config import ModelDefaults
    from holon.runtime.providers.base import ModelSettings

__all__ = ["app", "list_", "set_", "test"]

app = typer.Typer(help="See, test and set the model agents talk to.", no_args_is_help=True)

AgentOpt = Annotated[str | None, typer.Option("--agent", "-a", help="Agent name (default: assistant).")]
ModelArg = Annotated[str, typer.Argument(help="litellm model name, e.g. openai/gpt-4o-mini or ollama_chat/llama3.2.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="A model to test that no agent uses yet.")]
ApiBaseOpt = Annotated[
    str | None, typer.Option("--api-base", help="Server URL, e.g. http://127.0.0.1:11434 for Ollama.")
]
KeyEnvOpt = Annotated[
    str | None,
    typer.Option("--api-key-env", help="Name of the variable holding the API key (environment or holon secrets)."),
]


def _defaults(c: Ctx) -> ModelDefaults:
    from holon.config import load_settings

    return load_settings(c.paths).model


def _where(api_base: str | None, key_env: str | None, key: str) -> str:
    parts = [f"at {api_base}" if api_base else ""]
    if key_env:
        parts.append(f"key {key_env} ({key})")
    return "  ".join(p for p in parts if p)


@app.command("list")
def list_(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """The default model (the model section of holon.toml), each agent's model, the local model and examples.

    Key sources are as this command sees them: the daemon looks in its own environment, then in
    holon secrets."""
    from holon.runtime.model_check import EXAMPLES, agent_models, key_source, local_status
    from holon.runtime.providers.local import LOCAL_MODEL_NOTICE

    c = ctx_of(ctx, home, json_out)
    d = _defaults(c)
    agents = []
    from holon.runtime.home import home_exists

    if home_exists(c.paths):
        with open_store(c) as store:
            agents = agent_models(store.agents(), d, c.paths.root)
    default_key = key_source(c.paths.root, d.api_key_env)
    local = local_status()
    data: dict[str, Any] = {
        "default": {"model": d.model or None, "api_base": d.api_base, "api_key_env": d.api_key_env, "key": default_key},
        "agents": [a.as_dict() for a in agents],
        "local": local,
        "examples": [{"model": m, "api_base": b, "api_key_env": k, "what": w} for m, b, k, w in EXAMPLES],
    }
    default = (
        f"{d.model}  {_where(d.api_base, d.api_key_env, default_key)}".rstrip()
        if d.model
        else "(none: agents without a model of their own use the local model)"
    )
    lines = [f"default ([model] in {c.paths.config}): {default}", "agents:"]
    width = max((len(a.agent) for a in agents), default=0)
    lines += [
        f"  {a.agent:<{width}}  {a.model}  ({a.source})  {_where(a.api_base, a.api_key_env, a.key)}".rstrip()
        for a in agents
    ] or ["  (none yet; `holon chat` creates assistant)"]
    lines.append(f"local model: {local}")
    if any(a.source == "local" for a in agents):
        lines.append(f"note: {LOCAL_MODEL_NOTICE}")
    lines.append("examples (holon model set MODEL [--api-base URL] [--api-key-env VAR] [--agent NAME]):")
    for model, base, key, what in EXAMPLES:
        args = " ".join([model, *([f"--api-base {base}"] if base else []), *([f"--api-key-env {key}"] if key else [])])
        lines.append(f"  {args:<72}  # {what}")
    emit(c, data, "\n".join(lines))


def _adhoc(d: ModelDefaults, model: str, api_base: str | None, api_key_env: str | None) -> ModelSettings:
    """Settings for a model given on the command line, under the same rules as an agent's."""
    from holon.errors import UsageError
    from holon.runtime.providers.base import ModelSettings
    from holon.runtime.settings import AgentSettings, check_model_policy, validate_settings

    clean = validate_settings({"model": model, "api_base": api_base, "api_key_env": api_key_env})
    problem = check_model_policy(AgentSettings.model_validate(clean), d)
    if problem:
        raise UsageError(problem)
    return ModelSettings(model=model, api_base=api_base, api_key_env=api_key_env, timeout_s=d.timeout_s)


@app.command("test")
def test(
    ctx: typer.Context,
    agent: AgentOpt = None,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key_env: KeyEnvOpt = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", min=0.1, max=3600, help="Seconds to wait (default: timeout_s of the config's model section)."
        ),
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Make one real call: report the latency and whether the model calls a tool when asked.

    Tests --agent's model (default: assistant's, else the config's), or --model with --api-base and
    --api-key-env. The key comes from this shell's environment, else holon secrets."""
    import asyncio
    import contextlib
    import dataclasses
    import sys

    from holon.errors import UsageError
    from holon.runtime.agents import DEFAULT_AGENT
    from holon.runtime.model_check import key_source, probe
    from holon.runtime.models import LOCAL_TURN_CONTEXT_WINDOW, local_settings, model_settings_of
    from holon.runtime.providers.litellm_provider import LiteLLMProvider
    from holon.runtime.providers.local import LocalModelServer, require_local_model
    from holon.runtime.secrets import KeyLookup

    c = ctx_of(ctx, home, json_out)
    d = _defaults(c)
    if model is not None and agent is not None:
        raise UsageError("give --agent or --model, not both")
    if model is None and (api_base is not None or api_key_env is not None):
        raise UsageError("--api-base and --api-key-env go with --model")
    raw: dict[str, Any] = {}
    from holon.runtime.home import home_exists

    if model is None and (agent is not None or home_exists(c.paths)):
        from holon.errors import NotFoundError

        with open_store(c) as store:
            try:
                raw = dict(store.agent(agent or DEFAULT_AGENT).settings)
            except NotFoundError:
                if agent is not None:
                    raise
    settings = _adhoc(d, model, api_base, api_key_env) if model is not None else model_settings_of(raw, d)
    with contextlib.ExitStack() as stack:
        if settings is None:  # the embedded local model
            require_local_model()
            sys.stderr.write("starting the local model ...\n")
            server = stack.enter_context(LocalModelServer(c.paths.logs, n_ctx=LOCAL_TURN_CONTEXT_WINDOW))
            settings = local_settings(server.settings, raw, d)
        if timeout is not None:
            settings = dataclasses.replace(settings, timeout_s=timeout)
        provider = LiteLLMProvider(env=KeyLookup(c.paths.root, who="this command"))
        result = asyncio.run(probe(provider, settings))
    key = key_source(c.paths.root, settings.api_key_env)
    data = {**result.as_dict(), "api_base": settings.api_base, "api_key_env": settings.api_key_env, "key": key}
    tools = (
        f"yes (it called {result.tool_called})"
        if result.tools_work
        else "NO: asked to call a tool, it answered in text; it cannot do agent work (plans, commands, memory)"
    )
    lines = [
        f"model:      {settings.model}  {_where(settings.api_base, settings.api_key_env, key)}".rstrip(),
        f"answered:   in {result.latency_ms:.0f} ms",
        f"tool calls: {tools}",
    ]
    if result.reply:
        lines.append(f"reply:      {result.reply[:100]}")
    emit(c, data, "\n".join(lines))


@app.command("set")
def set_(
    ctx: typer.Context,
    model: ModelArg,
    agent: AgentOpt = None,
    api_base: ApiBaseOpt = None,
    api_key_env: KeyEnvOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Switch an agent (default: assistant, created if missing) to MODEL.

    The three model settings are set together: --api-base or --api-key-env left out fall back to
    the values of the config's model section. Recorded in the ledger like `holon agent configure` (a running
    daemon uses it from the next turn); the key itself stays in the environment or holon secrets."""
    from holon.runtime.agents import DEFAULT_AGENT, configure_or_create_default
    from holon.runtime.model_check import key_source

    c = ctx_of(ctx, home, json_out)
    from holon.runtime.home import home_exists

    if not home_exists(c.paths):
        from holon.runtime.home import init_home

        init_home(c.paths)
    name = agent or DEFAULT_AGENT
    changes = {"model": model, "api_base": api_base, "api_key_env": api_key_env}
    unset = [k for k, v in changes.items() if v is None]
    with open_store(c) as store:
        state, created = configure_or_create_default(
            store, name, {k: v for k, v in changes.items() if v is not None}, unset=unset
        )
        key_env = api_key_env or store.settings.model.api_key_env
    key = key_source(c.paths.root, key_env)
    data = {"agent": state.model_dump(mode="json"), "created": created, "key": key}
    lines = [
        f"{'created' if created else 'set'} {state.name}: {model}  {_where(api_base, key_env, key)}".rstrip(),
    ]
    if key_env and key == "missing":
        lines.append(f"{key_env} is not set here nor in holon secrets: run `holon secrets set {key_env}`")
    lines.append(f"check it: holon model test --agent {state.name}")
    emit(c, data, "\n".join(lines))
