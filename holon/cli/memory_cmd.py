"""``holon memory ...``: read an agent's memory as that agent would (``get``).

Each command opens the home, looks the agent up and calls the same function its tool calls, so
what the operator sees is exactly what the agent would get. More commands (``search``) join
``app`` here with their own ``@app.command``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

app = typer.Typer(
    help="Read an agent's memory: curated files, events, episodes, work items, tasks.", no_args_is_help=True
)

AgentArg = Annotated[str, typer.Argument(help="Agent name or id.")]


@app.command("get")
def get(
    ctx: typer.Context,
    agent: AgentArg,
    ref: Annotated[
        str,
        typer.Argument(help="file:agent/self.md, file:operator/operator.md, event:<seq>, episode:<id>, ..."),
    ],
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="full, headers, section, tail or lines (default: implied by the options given, else full).",
        ),
    ] = None,
    heading: Annotated[str | None, typer.Option("--heading", help="The section to read (mode section).")] = None,
    start: Annotated[int | None, typer.Option("--start", min=1, help="First line (mode lines).")] = None,
    end: Annotated[int | None, typer.Option("--end", min=1, help="Last line, inclusive (mode lines).")] = None,
    lines: Annotated[int | None, typer.Option("--lines", min=1, help="How many last lines (mode tail).")] = None,
    expand: Annotated[bool, typer.Option("--expand", help="An episode with the exact events it covers.")] = False,
    max_chars: Annotated[
        int, typer.Option("--max-chars", min=200, max=1_000_000, help="Largest read to print.")
    ] = 12_000,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Read what a memory reference points at, as AGENT would; too large a read prints sizes and next calls."""
    from holon.memory.get import memory_get

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        read = memory_get(
            store,
            store.agent(agent),
            ref,
            mode=mode,
            heading=heading,
            start=start,
            end=end,
            lines=lines,
            expand=expand,
            max_chars=max_chars,
        )
    emit(c, read.as_json(), read.render())
