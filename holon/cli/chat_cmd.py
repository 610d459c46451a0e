"""``holon chat [AGENT]``: the operator REPL, with a daemon started for the home when none runs.

The REPL (``holon.repl``) only speaks HTTP; this command finds the daemon's URL in its state file
(``<home>/run/daemon.json``), or starts one in the background (``holon.daemon.process``) and
waits until it is healthy, so one command gives a working chat on a fresh machine.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from holon.cli.common import HomeOpt, ctx_of
from holon.paths import HomePaths

__all__ = ["chat"]

UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Daemon URL (default: the home's running daemon, started if needed).")
]


def _daemon_url(paths: HomePaths, timeout_s: float) -> str:
    from holon.daemon.process import read_state, start_background
    from holon.errors import HolonError

    info = read_state(paths)
    if not info["running"]:
        if not paths.db.exists():
            from holon.runtime.home import init_home

            init_home(paths)
        sys.stderr.write(f"holon: starting a daemon for {paths.root} ...\n")
        info = start_background(paths, timeout_s=timeout_s)
    url = info.get("api")
    if not url:
        raise HolonError(f"the daemon for {paths.root} serves no HTTP API (started with --no-http?)")
    return str(url)


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
        names = [a.name for a in client.agents()]
        if agent is None:
            agent = names[0] if names else client.create_agent("assistant").name
        elif agent not in names:
            raise NotFoundError(f"no agent named {agent!r} (create it with 'holon agent create {agent}' or /new)")
        console = Console(force_terminal=sys.stdout.isatty() or None, highlight=False)
        code = Chat(client, console, agent, history=c.paths.root / "run" / "chat_history").run()
    raise typer.Exit(code)
