"""``holon proposals``: what evolve proposes and waits for the operator's consent (RFC 0006)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

app = typer.Typer(help="Review proposals: durable preferences, identity facts and skills wait for your consent.")


def _line(p: Any) -> str:
    text = p.entry.text if p.entry is not None else (p.skill.name if p.skill is not None else "")
    kind = p.entry.kind if p.entry is not None else "skill"
    return f"{p.proposal_id}  [{kind}] {p.status}: {text}"


@app.callback(invoke_without_command=True)
def list_(
    ctx: typer.Context,
    status: Annotated[str, typer.Option("--status", help="pending, accepted, dismissed or all.")] = "pending",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List proposals (pending by default)."""
    if ctx.invoked_subcommand is not None:
        return
    from holon.errors import UsageError
    from holon.evolve.review import list_proposals

    if status not in ("pending", "accepted", "dismissed", "all"):
        raise UsageError(f"--status must be pending, accepted, dismissed or all, not {status!r}")
    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        found = list_proposals(store, status=None if status == "all" else status)
    emit(c, [p.model_dump(mode="json") for p in found], "\n".join(_line(p) for p in found) or "no proposals")


@app.command("show")
def show(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="Proposal id (or a unique prefix).")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    from holon.evolve.review import find_proposal

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        p = find_proposal(store, proposal_id)
    body = p.skill.body if p.skill is not None else ""
    emit(c, p.model_dump(mode="json"), _line(p) + (f"\n{body}" if body else "") + f"\nwhy: {p.reason}")


@app.command("accept")
def accept(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="Proposal id (or a unique prefix).")],
    text: Annotated[str | None, typer.Option("--text", help="Accept with this text instead.")] = None,
    edit: Annotated[bool, typer.Option("--edit", help="Edit the text in $EDITOR first.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Accept a proposal: a memory entry becomes durable, a skill moves into the agent's skills/."""
    from holon.evolve.review import accept as accept_
    from holon.evolve.review import find_proposal

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        if edit and text is None:
            p = find_proposal(store, proposal_id)
            current = p.entry.text if p.entry is not None else (p.skill.body if p.skill is not None else "")
            edited = typer.edit(current)
            text = edited.strip() if edited is not None else None
        d = accept_(store, proposal_id, text=text, origin="operator:cli")
    where = d.entry_id or d.skill_path or ""
    emit(c, {"proposal": d.proposal.model_dump(mode="json"), "entry_id": d.entry_id, "skill_path": d.skill_path},
         f"accepted {d.proposal.proposal_id} -> {where}")  # fmt: skip


@app.command("dismiss")
def dismiss(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="Proposal id (or a unique prefix).")],
    reason: Annotated[str, typer.Option("--reason", help="Kept in the ledger.")] = "",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    from holon.evolve.review import dismiss as dismiss_

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        d = dismiss_(store, proposal_id, reason=reason, origin="operator:cli")
    emit(c, {"proposal": d.proposal.model_dump(mode="json")}, f"dismissed {d.proposal.proposal_id}")
