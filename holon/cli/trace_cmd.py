"""``holon trace export|stats``: the ledger as OpenTelemetry/OpenInference traces (RFC 0007)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:  # imported where used: the CLI starts without the trace modules
    from holon.projections import Store
    from holon.trace.export import Format
    from holon.trace.spans import TraceFilter

app = typer.Typer(help="Export the ledger as traces (HALO JSONL, OTLP JSON) and summarize it.", no_args_is_help=True)

AgentOpt = Annotated[str | None, typer.Option("--agent", help="Only this agent (name or id).")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Turns started at or after this ISO time.")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Turns started before this ISO time.")]


def trace_filter(store: Store, agent: str | None, since: str | None, until: str | None) -> TraceFilter:
    from holon.clock import parse_iso
    from holon.trace.spans import TraceFilter

    agent_id = store.agent(agent).agent_id if agent else None
    return TraceFilter(agent_id, parse_iso(since, field="--since"), parse_iso(until, field="--until"))


@app.command("export")
def export(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option("--out", help="The file to write (replaced atomically), or - for standard output.")
    ],
    fmt: Annotated[str, typer.Option("--format", help="halo-jsonl or otlp-json.")] = "halo-jsonl",
    agent: AgentOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    by: Annotated[str, typer.Option("--by", help="A trace per turn or per sealed episode.")] = "turn",
    project: Annotated[str, typer.Option("--project", help="inference.project_id of every span.")] = "holon",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the ledger's turns as spans: AGENT root, LLM, TOOL and CHAIN children, deterministic ids."""
    from holon.errors import UsageError
    from holon.trace.export import export_traces

    trace_format = _trace_format(fmt)
    if by not in ("turn", "episode"):
        raise UsageError(f"--by must be turn or episode, not {by!r}")
    c = ctx_of(ctx, home, json_out)
    if str(out) == "-":
        _export_to_stdout(c, trace_format, agent, since, until, by, project)
        return
    _check_out(out)
    from holon.cli.progress import progress

    with open_store(c) as store, progress("exporting traces", quiet=c.json) as bar:
        counts = export_traces(store, out, fmt=trace_format, flt=trace_filter(store, agent, since, until), by=by,
                               project=project, progress=bar.update)  # fmt: skip
    emit(
        c,
        {**counts, "out": str(out), "format": fmt},
        f"wrote {counts['traces']} traces ({counts['spans']} spans) to {out}",
    )


def _trace_format(fmt: str) -> Format:
    """``--format`` as the exporter's type; anything else is a usage error."""
    from holon.errors import UsageError

    match fmt:
        case "halo-jsonl" | "otlp-json":
            return fmt
    raise UsageError(f"--format must be halo-jsonl or otlp-json, not {fmt!r}")


def _export_to_stdout(
    c: Ctx, fmt: Format, agent: str | None, since: str | None, until: str | None, by: str, project: str
) -> None:
    """``--out -``: the traces on stdout (nothing else there, so it pipes), the summary on stderr.

    A reader that stops early (``| head``) ends the export quietly with exit code 1, no traceback."""
    import json
    import sys

    from holon.cli.progress import progress
    from holon.trace.export import write_traces

    with open_store(c) as store, progress("exporting traces", quiet=c.json) as bar:
        try:
            counts = write_traces(store, sys.stdout, fmt=fmt, flt=trace_filter(store, agent, since, until), by=by,
                                  project=project, progress=bar.update)  # fmt: skip
            sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
            raise typer.Exit(1) from None
    summary = {**counts, "out": "-", "format": fmt}
    line = (
        json.dumps(summary, sort_keys=True)
        if c.json
        else f"wrote {counts['traces']} traces ({counts['spans']} spans) to stdout"
    )
    sys.stderr.write(line + "\n")


def _check_out(out: Path) -> None:
    """``--out`` must name a file in an existing, writable directory: one line, exit 2, else."""
    from holon.errors import UsageError

    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UsageError(f"--out {out} is a directory; name a file in it")
    if not parent.is_dir():
        raise UsageError(f"--out {out}: the directory {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: the directory {parent} is not writable")


@app.command("stats")
def stats(
    ctx: typer.Context,
    agent: AgentOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per agent: turns, outcomes, model latency and token percentiles, cost; model cold starts; slowest tools; errors."""
    from holon.trace.export import trace_stats

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        result = trace_stats(store, trace_filter(store, agent, since, until))
    emit(c, result, _human(result))


def _human(r: dict[str, Any]) -> str:
    lines = [f"{r['turns']} turns"]
    for name, a in r["agents"].items():
        outcomes = ", ".join(f"{k} {v}" for k, v in a["outcomes"].items())
        lines.append(
            f"  {name}: {a['turns']} turns ({outcomes}); model p50 {a['model_latency_ms']['p50']} ms, "
            f"p95 {a['model_latency_ms']['p95']} ms; tokens/turn p50 {a['tokens_per_turn']['p50']}, "
            f"p95 {a['tokens_per_turn']['p95']}; cost ${a['cost_usd']:.4f}; tool errors {a['tool_errors']}/{a['tool_calls']}"
        )
    if (start := r.get("model_start")) and start["n"]:
        lines.append(
            f"model start: {start['n']} (cold starts, not in model latency); "
            f"p50 {start['p50_ms']} ms, p95 {start['p95_ms']} ms"
        )
    if r["slowest_tools"]:
        lines.append("slowest tools:")
        lines += [f"  {t['duration_ms']:>9.1f} ms  {t['tool']}  (turn {t['turn_id']})" for t in r["slowest_tools"]]
    if r["errors"]:
        lines.append("errors:")
        lines += [f"  {e['count']:>4} x {e['source']}: {e['error']}" for e in r["errors"]]
    return "\n".join(lines)
