"""``holon scenario run`` and ``holon context show``: check continuity, explain what a model saw."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from holon.cli import backend
from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

scenario_app = typer.Typer(help="Continuity scenarios (see rfcs/0003).", no_args_is_help=True)
context_app = typer.Typer(help="What the model saw in a turn, and why.", no_args_is_help=True)


@scenario_app.command("run")
def scenario_run(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Scenario JSON file.")],
    budget: Annotated[
        list[int] | None, typer.Option("--budget", min=512, help="Budget(s) to check instead of the file's.")
    ] = None,
    variant: Annotated[
        str,
        typer.Option("--variant", help="plain, paraphrase, zh, long_filler or prefix30 (see holon bench continuity)."),
    ] = "plain",
    json_out: JsonOpt = False,
) -> None:
    """Replay a scenario through the real ledger, projector and assembler; check every assertion
    against what the rendered prompt shows."""
    from holon.errors import UsageError
    from holon.logs import configure_logging
    from holon.runtime.scenario_variants import VARIANTS
    from holon.runtime.scenarios import load_scenario, run_scenario

    configure_logging(console="off")
    c = ctx_of(ctx, None, json_out)
    chosen = next((v for v in VARIANTS if v == variant), None)
    if chosen is None:
        raise UsageError(f"--variant takes one of {', '.join(VARIANTS)}, not {variant!r}")
    result = run_scenario(load_scenario(file), variant=chosen, budgets=budget)
    lines = [f"scenario {result['id']} ({result['variant']}): {'passed' if result['passed'] else 'FAILED'}"]
    if result["unknown_refs"]:
        lines.append(f"  refs no event carries: {', '.join(result['unknown_refs'])}")
    for b in result["budgets"]:
        failed = [k for k, v in b["assertions"].items() if not v]
        status = "passed" if b["passed"] else "FAILED: " + ", ".join(failed)
        lines.append(f"  budget {b['budget']:>6}: {status} ({b.get('used_tokens', '-')} tokens)")
        if b.get("error"):
            lines.append(f"    {b['error']}")
        observed = b.get("observed", {})
        shown = [
            label + (f" (summary in {o['section']})" if (o := observed.get(label, {})).get("how") == "summary" else "")
            for label in b["included_refs"]
        ]
        lines.append(f"    shown:    {', '.join(shown) or '-'}")
        lines.append(f"    not shown: {', '.join(b['omitted_refs']) or '-'}")
        for label, where in sorted(b.get("duplicates", {}).items()):
            lines.append(f"    shown twice: {label} in {', '.join(where)}")
    emit(c, result, "\n".join(lines))
    if not result["passed"]:
        raise typer.Exit(1)


@context_app.command("show")
def context_show(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="Agent name or id.")],
    turn: Annotated[str | None, typer.Option("--turn", help="Turn id (default: the last turn).")] = None,
    render: Annotated[bool, typer.Option("--render", help="Print the exact prompt that was sent.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Explain the context of a turn: per section what was included, compacted or left out, and why."""
    from holon.context.manifests import turn_contexts

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            items = list(api.read(f"/agents/{agent}/context", turn=turn, render=True))
        else:
            with open_store(c) as store:
                items = turn_contexts(store, store.agent(agent), turn)
    if c.json:
        if not render:
            for item in items:
                item.pop("prompt")
        emit(c, items if len(items) > 1 else items[0])
        return
    out = []
    for item in items:
        if render:
            prompt = item["prompt"]
            if prompt is None:
                out.append(
                    f"round {item['round']}: the prompt was not recorded ([context] record_prompts = false, or pruned)"
                )
                continue
            out.append(f"=== turn {item['turn_id']} round {item['round']}: {item['used_tokens']} tokens ===")
            for m in prompt["messages"]:
                content = m.get("content")
                if isinstance(content, list):
                    content = "".join(part.get("text", "") for part in content)
                out.append(f"--- {m['role']}" + (f" ({m['tool_call_id']})" if m.get("tool_call_id") else ""))
                if content:
                    out.append(str(content))
                for call in m.get("tool_calls") or ():
                    out.append(f"[tool call {call['id']}] {call['function']['name']} {call['function']['arguments']}")
            out.append(f"--- tools: {', '.join(t['function']['name'] for t in prompt['tools'])}")
            continue
        out.append(
            f"turn {item['turn_id']} round {item['round']}: {item['used_tokens']} of {item['budget_tokens']} tokens, "
            f"digest {item['digest'][:12]}"
        )
        for s in (item["manifest"] or {}).get("sections", []):
            if s.get("excluded"):
                continue
            refs = len(s["refs_included"])
            omitted = f", {len(s['refs_omitted'])} refs left out" if s["refs_omitted"] else ""
            out.append(
                f"  {s['key'][:34]:<34} {s['representation']:<8} {s['allocated_tokens']:>6}/{s['requested_tokens']:<6} "
                f"{refs} refs{omitted}  {s['reason']}"
            )
        excluded = [s for s in (item["manifest"] or {}).get("sections", []) if s.get("excluded")]
        if excluded:
            out.append(
                f"  not candidates ({len(excluded)}): " + "; ".join(f"{s['key']}: {s['reason']}" for s in excluded[:8])
            )
    sys.stdout.write("\n".join(out) + "\n")
