"""``holon diagnose "question"``: a diagnostic agent reads the traces and reports (RFC 0007)."""

from __future__ import annotations

from typing import Annotated

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store
from holon.cli.trace_cmd import AgentOpt, SinceOpt, UntilOpt, trace_filter


def diagnose(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help='What to find out, e.g. "why do alice\'s turns fail?"')],
    agent: AgentOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    model: Annotated[str | None, typer.Option("--model", help="Model for the diagnostic agent (litellm name).")] = None,
    api_base: Annotated[str | None, typer.Option("--api-base", help="Its API base URL.")] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Ask the built-in diagnostic agent about your agents' traces; it advises, it changes nothing."""
    from holon.runtime.models import ModelResolver
    from holon.trace.diagnose import diagnose as run
    from holon.trace.diagnose import model_failed

    c = ctx_of(ctx, home, json_out)
    settings = {k: v for k, v in (("model", model), ("api_base", api_base)) if v}
    with open_store(c) as store:
        resolver = ModelResolver(store.settings.model, store.paths.logs, home=store.paths.root)
        try:
            result, path = run(store, question, flt=trace_filter(store, agent, since, until), resolver=resolver,
                               model=settings)  # fmt: skip
            unreachable = model_failed(store, result)
        finally:
            resolver.close()
    report = result.reply or f"(no report: the turn {result.outcome})"
    emit(c, {"outcome": result.outcome, "reason": result.reason, "report": report, "saved": str(path),
             "turn_id": result.turn_id}, f"{report}\n\n(saved to {path})")  # fmt: skip
    # The README's exit codes: 6 when the model failed (unreachable, refused), 1 for any other failed run.
    if result.outcome in ("failed", "interrupted"):
        raise typer.Exit(6 if unreachable else 1)
