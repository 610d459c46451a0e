"""``holon mcp``: serve one agent's MemorySearch and MemoryGet (and input) over MCP stdio (RFC 0007)."""

from __future__ import annotations

from typing import Annotated

import typer

from holon.cli.common import HomeOpt, ctx_of, open_store


def mcp(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="The agent (default: the home's only agent, leaving out holon diagnose's)."),
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Serve an agent's memory to MCP clients (IDEs, coding assistants) on stdin/stdout."""
    from holon.config import load_settings
    from holon.errors import UsageError
    from holon.logs import configure_logging
    from holon.mcp.server import build_server
    from holon.runtime.status import is_internal

    c = ctx_of(ctx, home, False)
    settings = load_settings(c.paths)
    # stdout is the protocol: log lines go to the log file only.
    configure_logging(level=settings.logging.level, log_file=c.paths.logs / "holon.log" if settings.logging.file else None,
                      console="off")  # fmt: skip
    with open_store(c) as store:
        if agent is None:
            # The diagnostic agent (``holon diagnose``) is holon's own, never the one meant.
            names = [a.name for a in store.agents() if not is_internal(a)]
            if len(names) != 1:
                raise UsageError(f"pass --agent: this home has {len(names)} agents ({', '.join(names[:10])})")
            agent = names[0]
        build_server(store, agent).run("stdio")
