"""``holon proposals``: what evolve proposes and waits for the operator's consent (RFC 0006).

Through the daemon's HTTP API when one runs for the home (``holon.cli.backend``), else in-process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli import backend
from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    from holon.projections.durable import ProposalState

app = typer.Typer(help="Review proposals: durable preferences, identity facts and skills wait for your consent.")


def _body(p: Any) -> str:
    """What the operator reviews and may edit: the entry's text, the skill's body or the memory edit."""
    if p.write is not None:
        return str(p.write.text)
    return str(p.entry.text if p.entry is not None else (p.skill.body if p.skill is not None else ""))


def _line(p: Any) -> str:
    text = p.entry.text if p.entry is not None else (p.skill.name if p.skill is not None else "")
    kind = p.entry.kind if p.entry is not None else "skill"
    if p.write is not None:
        kind, text = f"{p.write.op} {p.write.scope}/{p.write.path}", p.write.text.splitlines()[0][:120]
    return f"{p.proposal_id}  [{kind}] {p.status}: {text}"


def _proposal(data: Any) -> ProposalState:
    from holon.projections.durable import ProposalState

    return ProposalState.model_validate(data)


def _seg(ref: str) -> str:
    from urllib.parse import quote

    return quote(ref, safe="")


def _find(c: Ctx, proposal_id: str) -> ProposalState:
    from holon.evolve.review import find_proposal

    with backend.daemon(c) as api:
        if api is not None:
            return _proposal(api.read(f"/proposals/{_seg(proposal_id)}"))
    with open_store(c) as store:
        return find_proposal(store, proposal_id)


StatusOpt = Annotated[str, typer.Option("--status", help="pending, accepted, dismissed or all.")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="Only this agent's proposals.")]


def _list(c: Ctx, status: str, agent: str | None) -> None:
    from holon.errors import UsageError
    from holon.evolve.review import list_proposals

    if status not in ("pending", "accepted", "dismissed", "all"):
        raise UsageError(f"--status must be pending, accepted, dismissed or all, not {status!r}")
    with backend.daemon(c) as api:
        if api is not None:
            found = [_proposal(p) for p in api.read("/proposals", status=status, agent=agent)]
        else:
            with open_store(c) as store:
                agent_id = store.agent(agent).agent_id if agent else None
                found = list_proposals(store, status=None if status == "all" else status, agent_id=agent_id)
    emit(c, [p.model_dump(mode="json") for p in found], "\n".join(_line(p) for p in found) or "no proposals")


@app.callback(invoke_without_command=True)
def default(
    ctx: typer.Context, status: StatusOpt = "pending", agent: AgentOpt = None, home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:  # fmt: skip
    """``holon proposals`` alone lists the pending ones."""
    if ctx.invoked_subcommand is None:
        _list(ctx_of(ctx, home, json_out), status, agent)


@app.command("list")
def list_(
    ctx: typer.Context, status: StatusOpt = "pending", agent: AgentOpt = None, home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:  # fmt: skip
    """List proposals (pending by default)."""
    _list(ctx_of(ctx, home, json_out), status, agent)


@app.command("show")
def show(
    ctx: typer.Context,
    proposal_id: Annotated[str, typer.Argument(help="Proposal id (or a unique prefix).")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    c = ctx_of(ctx, home, json_out)
    p = _find(c, proposal_id)
    body = p.skill.body if p.skill is not None else (p.write.text if p.write is not None else "")
    emit(c, p.model_dump(mode="json"), _line(p) + (f"\n{body}" if body else "") + f"\nwhy: {p.reason}")


def _edit(p: ProposalState) -> str | None:
    """The proposal's text as edited in $VISUAL/$EDITOR (as ``git commit`` does).

    ``None`` when the editor quits without saving: the text is accepted as shown. An emptied text
    cancels the acceptance.
    """
    import click  # typer's own dependency; typer does not re-export its editor helper

    from holon.errors import UsageError

    current = _body(p)
    edited = click.edit(current + "\n", extension=".md")
    if edited is None:
        return None
    if not edited.strip():
        raise UsageError(f"not accepted: the edited text of {p.proposal_id} is empty")
    return edited.strip()


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
    from holon.errors import UsageError
    from holon.evolve.review import accept as accept_

    if edit and text is not None:
        raise UsageError("give --text or --edit, not both")
    c = ctx_of(ctx, home, json_out)
    if edit:
        text = _edit(_find(c, proposal_id))  # the home is not held open while the editor runs
    with backend.daemon(c) as api:
        if api is not None:
            body = {"text": text} if text is not None else {}
            out = api.change("POST", f"/proposals/{_seg(proposal_id)}/accept", body)
            proposal, entry_id, skill_path = _proposal(out["proposal"]), out.get("entry_id"), out.get("skill_path")
        else:
            with open_store(c) as store:
                d = accept_(store, proposal_id, text=text, origin="operator:cli")
            proposal, entry_id, skill_path = d.proposal, d.entry_id, d.skill_path
    where = entry_id or skill_path or ""
    emit(c, {"proposal": proposal.model_dump(mode="json"), "entry_id": entry_id, "skill_path": skill_path},
         f"accepted {proposal.proposal_id} -> {where}")  # fmt: skip


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
    with backend.daemon(c) as api:
        if api is not None:
            proposal = _proposal(
                api.change("POST", f"/proposals/{_seg(proposal_id)}/dismiss", {"reason": reason})["proposal"]
            )
        else:
            with open_store(c) as store:
                proposal = dismiss_(store, proposal_id, reason=reason, origin="operator:cli").proposal
    emit(c, {"proposal": proposal.model_dump(mode="json")}, f"dismissed {proposal.proposal_id}")
