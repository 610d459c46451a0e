"""``holon memory ...``: search and read an agent's memory as that agent would (``search``, ``get``),
and review durable memory (``inspect``, ``export``, ``forget``; RFC 0006).

Each command opens the home, looks the agent up and calls the same function its tool calls, so
what the operator sees is exactly what the agent would get. With a daemon running for the home
they ask its HTTP API instead (``holon.cli.backend``), which calls those same functions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from holon.cli import backend
from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    pass

app = typer.Typer(
    help="Search and read an agent's memory (conversations, curated files, events, episodes, work items, tasks); "
    "inspect, export and forget durable memory.",
    no_args_is_help=True,
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
    from holon.memory.get import MemoryGetRequest, MemoryRead, memory_get

    c = ctx_of(ctx, home, json_out)
    request = MemoryGetRequest(
        ref=ref, mode=mode, heading=heading, start=start, end=end, lines=lines, expand=expand, max_chars=max_chars
    )
    with backend.daemon(c) as api:
        if api is not None:
            read = MemoryRead.from_json(api.read(f"/agents/{agent}/memory/get", **request.params()))
            emit(c, read.as_json(), read.render())
            return
    with open_store(c) as store:
        read = memory_get(store, store.agent(agent), request)
    emit(c, read.as_json(), read.render())


@app.command("search")
def search(
    ctx: typer.Context,
    agent: AgentArg,
    query: Annotated[str, typer.Argument(help="Plain words; any text is a valid query.")],
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", help="Only this kind (repeatable): message, reply, brief, tool_result, episode, ..."),
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO 8601 time: documents from then on.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601 time: documents until then.")] = None,
    work_item: Annotated[str | None, typer.Option("--work-item", help="Only documents of this work item.")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="Only one scope: agent, operator or workspace.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100, help="How many hits.")] = 10,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Search AGENT's memory exactly as its memory_search tool would (same scopes, same ranking)."""
    from holon.clock import parse_iso
    from holon.memory.access import search_memory
    from holon.memory.refs import parse_scope
    from holon.runtime.embedders import embedder_from_settings
    from holon.runtime.tools.memory import render_search_json

    scopes = parse_scope(scope)
    c = ctx_of(ctx, home, json_out)
    since_us, until_us = (
        parse_iso(since, field="--since"),
        parse_iso(until, field="--until"),
    )  # checked here, before any call
    with backend.daemon(c) as api:
        if api is not None:
            found = api.read(f"/agents/{agent}/memory/search", q=query, kind=list(kind or ()) or None, since=since,
                             until=until, work_item=work_item, scope=scope, limit=limit)  # fmt: skip
            emit(c, found, render_search_json(found))
            return
    with open_store(c) as store:
        result = search_memory(
            store,
            store.agent(agent),
            query,
            kinds=tuple(kind or ()),
            since_us=since_us,
            until_us=until_us,
            work_item_id=work_item,
            scopes=scopes,
            limit=limit,
            embedder=embedder_from_settings(store.settings),
        )
    found = result.as_dict()
    emit(c, found, render_search_json(found))


@app.command("reindex")
def reindex(
    ctx: typer.Context,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only this agent's documents (name or id); default: all.")
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rebuild the memory search index from the ledger and the curated files (same results as before
    if it was sound; the remedy when it was not). Shows progress on stderr."""
    from holon.cli.progress import progress
    from holon.memory.reindex import reindex as reindex_

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        target = store.agent(agent) if agent else None
        with progress(f"reindexing {target.name if target else 'memory'}", quiet=c.json) as bar:
            done = reindex_(store, agent=target, progress=bar.update)
    what = f"agent {done['agent']}" if done["agent"] else "all agents"
    emit(c, done, f"reindexed {what}: {done['events']} events, {done['files']} files, "
                  f"{done['documents']} documents ({done['seconds']} s)")  # fmt: skip


# --- durable memory (RFC 0006) ------------------------------------------------------------------


def _entry_json(s: object, now_us: int) -> dict[str, object]:
    from holon.evolve.export import entry_json
    from holon.projections.durable import DurableState

    assert isinstance(s, DurableState)
    return entry_json(s, now_us)


def _entries_table(found: list[object], now_us: int) -> object:
    """A rich table, one row per entry. Short fields are stacked (scope over kind; the freshness
    state, on the system clock, over the observed and last-verified dates) so the text keeps the
    width even in 80 columns."""
    from rich.table import Table

    from holon.clock import format_us
    from holon.projections.durable import DurableState, is_stale, stale_at_us

    table = Table(show_edge=False, header_style="bold", show_lines=True)
    table.add_column("id", no_wrap=True)
    table.add_column("scope\nkind", no_wrap=True)
    table.add_column("text", min_width=16, ratio=1, overflow="fold")
    table.add_column("freshness", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for s in found:
        assert isinstance(s, DurableState)
        e, at = s.entry, stale_at_us(s)
        state = "STALE" if is_stale(s, now_us) else ("fresh" if at is None else f"fresh to {format_us(at)[:10]}")
        fresh = f"{state}\nobserved {format_us(e.observed_us)[:10]}\nverified {format_us(s.verified_us)[:10]}"
        table.add_row(s.entry_id, f"{e.scope}\n{e.kind}", e.text, fresh, s.status)
    return table


@app.command("inspect")
def inspect_(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Argument(help="Only what this agent can recall (default: every entry).")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="operator, workspace or agent.")] = None,
    status: Annotated[
        str,
        typer.Option(
            "--status",
            help="active, superseded, forgotten, stale (active entries past their stale-after time) or all.",
        ),
    ] = "active",
    stale: Annotated[bool, typer.Option("--stale", help="Only stale entries (the same as --status stale).")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Durable memory entries with their freshness and provenance (who shares which scope: RFC 0006)."""
    from holon.clock import SystemClock
    from holon.errors import UsageError
    from holon.evolve.review import list_entries
    from holon.memory.access import owners_for

    if scope not in (None, "operator", "workspace", "agent"):
        raise UsageError(f"--scope must be operator, workspace or agent, not {scope!r}")
    if status not in ("active", "superseded", "forgotten", "stale", "all"):
        raise UsageError(f"--status must be active, superseded, forgotten, stale or all, not {status!r}")
    if stale and status not in ("active", "stale"):
        raise UsageError(f"--stale and --status {status} ask for different entries; give one of them")
    status = "stale" if stale else status
    c = ctx_of(ctx, home, json_out)
    now = SystemClock().now_us()
    with backend.daemon(c) as api:
        if api is not None:
            from holon.projections.durable import DurableState

            rows = api.read("/memory/durable", agent=agent, scope=scope, status=status)
            found = [DurableState.model_validate({k: v for k, v in r.items() if k not in ("stale", "stale_at_us")})
                     for r in rows]  # fmt: skip
        else:
            with open_store(c) as store:
                owners = owners_for(store.agent(agent)) if agent else None
                found = list_entries(
                    store, scope=scope, status=None if status == "all" else status, owners=owners, now_us=now
                )
    if c.json or not found:
        emit(c, [_entry_json(s, now) for s in found], "no durable memory entries")
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)  # piped: no terminal to fit, so don't squeeze the text to 80
    console.print(_entries_table(list(found), now))


@app.command("export")
def export(
    ctx: typer.Context,
    out: Annotated[str | None, typer.Option("--out", help="Write to this file (default: standard output).")] = None,
    home: HomeOpt = None,
) -> None:
    """Every durable entry (any status) and every proposal, with provenance, as one JSON document."""
    import json
    from pathlib import Path

    from holon.clock import SystemClock
    from holon.evolve.export import export_doc

    c = ctx_of(ctx, home, True)
    with backend.daemon(c) as api:
        if api is not None:
            doc = api.read("/memory/export")
        else:
            with open_store(c) as store:
                doc = export_doc(store, SystemClock().now_us())
    text = json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        typer.echo(text, nl=False)


@app.command("forget")
def forget(
    ctx: typer.Context,
    entry_id: Annotated[str, typer.Argument(help="Entry id (or a unique prefix).")],
    reason: Annotated[str, typer.Option("--reason", help="Kept in the ledger.")] = "",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop recalling an entry. A ledger event: the entry and its history stay auditable."""
    from urllib.parse import quote

    from holon.clock import SystemClock
    from holon.evolve.review import forget as forget_
    from holon.projections.durable import DurableState

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            out = api.change("POST", f"/memory/durable/{quote(entry_id, safe='')}/forget", {"reason": reason})
            s = DurableState.model_validate(out["entry"])
        else:
            with open_store(c) as store:
                s = forget_(store, entry_id, reason=reason, origin="operator:cli")
    emit(c, _entry_json(s, SystemClock().now_us()), f"forgot {s.entry_id}: {s.entry.text.splitlines()[0]}")


@app.command("retry-jobs")
def retry_jobs(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Re-arm dead evolve jobs (``holon daemon status`` lists them): each gets a fresh set of attempts.

    A job that already recorded its output decides nothing twice, so retrying is always safe."""
    from holon.clock import SystemClock
    from holon.evolve.jobs import JobQueue

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            retried = int(api.change("POST", "/evolve/retry-dead")["retried"])
        else:
            with open_store(c) as store:
                retried = JobQueue(store).retry_dead(SystemClock().now_us())
    emit(c, {"retried": retried}, f"re-armed {retried} dead evolve job(s)" if retried else "no dead evolve jobs")
