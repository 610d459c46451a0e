"""``holon chat [AGENT]``: the operator REPL, with a daemon started for the home when none runs.

The REPL (``holon.repl``) only speaks HTTP; this command finds the daemon's URL in its state file
(``<home>/run/daemon.json``), or starts one in the background (``holon.daemon.process``) and
waits until it is healthy, so one command gives a working chat on a fresh machine.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import HomeOpt, ctx_of
from holon.paths import HomePaths

if TYPE_CHECKING:
    from holon.config import ModelDefaults

__all__ = ["chat", "model_notice"]

UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Daemon URL (default: the home's running daemon, started if needed).")
]


def _daemon_url(paths: HomePaths, timeout_s: float) -> str:
    from holon.daemon.process import read_state, start_background
    from holon.errors import HolonError

    info = read_state(paths)
    if not info["running"]:
        from holon.runtime.home import home_exists

        if not home_exists(paths):
            from holon.runtime.home import init_home

            init_home(paths)
        sys.stderr.write(f"holon: starting a daemon for {paths.root} ...\n")
        info = start_background(paths, timeout_s=timeout_s)
    url = info.get("api")
    if not url:
        raise HolonError(f"the daemon for {paths.root} serves no HTTP API (started with --no-http?)")
    return str(url)


def model_notice(raw: Mapping[str, Any], defaults: ModelDefaults) -> str | None:
    """What the operator must know before talking to an agent on the embedded local model (what
    it cannot do, and how to switch), or with no model at all; ``None`` for any other model."""
    from holon.runtime.models import model_settings_of
    from holon.runtime.providers.local import LOCAL_MODEL_NOTICE, MODEL_NOT_CONFIGURED_MESSAGE, local_model_available

    if model_settings_of(raw, defaults) is not None:
        return None
    if not local_model_available():
        return MODEL_NOT_CONFIGURED_MESSAGE
    return f"{LOCAL_MODEL_NOTICE}; in this chat: `/model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY`"


def chat(
    ctx: typer.Context,
    agent: Annotated[
        str | None, typer.Argument(help="Agent to talk to (default: the first; 'assistant' is created if none).")
    ] = None,
    url: UrlOpt = None,
    home: HomeOpt = None,
) -> None:
    """Talk to your agents: stream replies, watch tools run, inspect state with slash commands."""
    from rich.console import Console
    from rich.text import Text

    from holon.config import load_settings
    from holon.errors import NotFoundError
    from holon.logs import configure_logging
    from holon.repl.app import Chat
    from holon.repl.client import ApiClient, home_token

    c = ctx_of(ctx, home, False)
    settings = load_settings(c.paths) if c.paths.config.exists() else None
    timeout_s = settings.daemon.start_timeout_s if settings else 30.0
    base = url or _daemon_url(c.paths, timeout_s)
    settings = settings or load_settings(c.paths)
    # The chat owns the terminal: log lines go to the log file only.
    configure_logging(
        level=settings.logging.level,
        log_file=c.paths.logs / "holon.log" if settings.logging.file else None,
        console="off",
    )
    with ApiClient(base, token=home_token(c.paths.root, settings.api.token_env)) as client:
        client.health()
        found = {a.name: a for a in client.agents()}
        if agent is None:
            agent = next(iter(found)) if found else client.create_agent("assistant").name
            found = found or {a.name: a for a in client.agents()}
        elif agent not in found:
            raise NotFoundError(f"no agent named {agent!r} (create it with 'holon agent create {agent}' or /new)")
        console = Console(force_terminal=sys.stdout.isatty() or None, highlight=False)
        notice = model_notice(found[agent].settings, settings.model)
        if notice:
            console.print(Text(f"{agent}: {notice}", "yellow"))
        code = Chat(client, console, agent, history=c.paths.root / "run" / "chat_history").run()
    raise typer.Exit(code)
