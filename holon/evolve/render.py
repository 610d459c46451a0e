"""Markdown views of durable memory and skills (RFC 0006). The ledger is the truth; these are views.

Under each agent's home::

    memory/durable/<scope>/MEMORY.md     the index: one line per active entry of the scope
    memory/durable/<scope>/<kind>.md     each entry in full, with provenance; superseded ones after
    evolve/skills/<skill id>/SKILL.md    a drafted skill, while its proposal waits
    skills/<skill id>/SKILL.md           an accepted skill (listed in the prompt's skills catalog)

A scope's files are rewritten only when their text changes, and only for the scopes a change
touched. Because the files sit under ``memory/``, MemorySearch indexes them like any curated file.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from holon.clock import format_us
from holon.memory.access import owner_of
from holon.memory.files import atomic_write
from holon.projections import Store
from holon.projections.durable import DurableState, ProposalState, stale_at_us
from holon.projections.state import AgentState

__all__ = [
    "durable_dir",
    "install_skill",
    "render_for_sharers",
    "render_owner",
    "render_scopes",
    "render_scope_text",
    "write_skill_draft",
]

SCOPES = ("operator", "workspace", "agent")
KIND_ORDER = ("preference", "identity", "fact", "procedure", "blocker", "reference")


def durable_dir(agent: AgentState, scope: str) -> Path:
    return Path(agent.home) / "memory" / "durable" / scope


def _date(us: int) -> str:
    return format_us(us)[:10]


def _entry_block(s: DurableState) -> str:
    e = s.entry
    lines = [f"## {e.text.splitlines()[0][:120]}", "", e.text, ""]
    lines.append(f"- subject: `{e.subject}`")
    lines.append(
        f"- id: `{s.entry_id}` ({s.status}{', superseded by `' + s.superseded_by + '`' if s.superseded_by else ''})"
    )
    lines.append(f"- observed: {_date(e.observed_us)}; last verified: {_date(s.verified_us)}")
    stale = stale_at_us(s)
    lines.append(f"- stale after: {_date(stale) if stale is not None else 'never'}; verification: {e.verification}")
    lines.append(
        f"- confidence: {e.confidence:.2f}; source: {s.source}"
        + (f" (proposal `{s.proposal_id}`)" if s.proposal_id else "")
    )
    lines.append(f"- evidence: {', '.join(f'event:{q}' for q in e.evidence) or 'none'}")
    return "\n".join(lines)


def render_scope_text(entries: Iterable[DurableState], scope: str) -> dict[str, str]:
    """File name -> text for one scope (pure: the same entries give the same bytes)."""
    live = [s for s in entries if s.status != "forgotten"]
    active = sorted(
        (s for s in live if s.status == "active"), key=lambda s: (KIND_ORDER.index(s.entry.kind), s.entry.subject)
    )
    files: dict[str, str] = {}
    index = [f"# Durable memory: {scope} scope", "", "Generated from the ledger; edits here are overwritten.", ""]
    if not active:
        index.append("(nothing yet)")
    for s in active:
        index.append(
            f"- [{s.entry.kind}] **{s.entry.subject}**: {s.entry.text.splitlines()[0]} ({s.entry.kind}.md, `{s.entry_id}`)"
        )
    files["MEMORY.md"] = "\n".join(index) + "\n"
    for kind in KIND_ORDER:
        mine = [s for s in live if s.entry.kind == kind]
        if not mine:
            continue
        current = [s for s in mine if s.status == "active"]
        old = [s for s in mine if s.status != "active"]
        parts = [f"# {kind.capitalize()} entries ({scope} scope)"]
        parts += [_entry_block(s) for s in sorted(current, key=lambda s: s.entry.subject)]
        if old:
            parts.append("# Superseded")
            parts += [_entry_block(s) for s in sorted(old, key=lambda s: s.seq)]
        files[f"{kind}.md"] = "\n\n".join(parts) + "\n"
    return files


def _entries(store: Store, owner: str) -> list[DurableState]:
    rows = store.ledger.query(
        "SELECT state FROM projection_rows WHERE kind = 'durable' AND label = ? ORDER BY seq", (owner,)
    )
    return [DurableState.model_validate_json(r[0]) for r in rows]


def render_scopes(store: Store, agent: AgentState, scopes: Iterable[str]) -> list[Path]:
    """Rewrite the views of ``scopes`` for ``agent`` where their text changed; returns the files written."""
    written = []
    for scope in SCOPES:
        if scope not in scopes or (scope == "workspace" and not agent.workspace):
            continue
        root = durable_dir(agent, scope)
        files = render_scope_text(_entries(store, owner_of(agent, scope)), scope)  # type: ignore[arg-type]
        root.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            target = root / name
            data = text.encode()
            try:
                if target.read_bytes() == data:
                    continue
            except OSError:
                pass
            atomic_write(target, data)
            written.append(target)
        for stray in root.glob("*.md"):
            if stray.name not in files:
                stray.unlink(missing_ok=True)
    return written


def sharers(store: Store, scope: str, owner: str) -> list[AgentState]:
    """The agents whose homes show the entries of ``owner`` in ``scope``: every agent for the
    operator scope, every agent working in that workspace for a workspace, the agent itself for
    its own scope."""
    if scope not in SCOPES:
        return []
    return [
        a for a in store.agents()
        if (scope != "workspace" or a.workspace) and owner_of(a, scope) == owner  # type: ignore[arg-type]
    ]  # fmt: skip


def render_owner(store: Store, scope: str, owner: str) -> list[Path]:
    """Refresh ``owner``'s ``scope`` views in the home of every agent that shows them (``sharers``):
    a workspace entry recorded or forgotten through one agent reads the same in the homes of all
    the agents sharing that workspace."""
    written = []
    for agent in sharers(store, scope, owner):
        written += render_scopes(store, agent, {scope})
    return written


def render_for_sharers(store: Store, agent: AgentState, scopes: Iterable[str]) -> list[Path]:
    """``render_owner`` for each of ``agent``'s ``scopes``."""
    written = []
    for scope in SCOPES:
        if scope in scopes and (scope != "workspace" or agent.workspace):
            written += render_owner(store, scope, owner_of(agent, scope))
    return written


# --- skills ------------------------------------------------------------------------------------


def _skill_proposal(store: Store, skill_id: str) -> ProposalState | None:
    for p in store.rows("proposal"):
        if p.skill is not None and p.skill.skill_id == skill_id:
            return p  # type: ignore[no-any-return]
    return None


def write_skill_draft(store: Store, home: str, skill_id: str) -> Path | None:
    p = _skill_proposal(store, skill_id)
    if p is None or p.skill is None:
        return None
    target = Path(home) / "evolve" / "skills" / skill_id / "SKILL.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, p.skill.body.encode())
    return target


def install_skill(home: str, skill_id: str, body: str) -> Path:
    """Move an accepted skill from ``evolve/skills/`` to ``skills/`` (with the accepted text)."""
    draft = Path(home) / "evolve" / "skills" / skill_id
    target = Path(home) / "skills" / skill_id
    target.mkdir(parents=True, exist_ok=True)
    atomic_write(target / "SKILL.md", body.encode())
    if draft.is_dir():
        for extra in draft.iterdir():
            if extra.name != "SKILL.md" and not (target / extra.name).exists():
                shutil.move(str(extra), target / extra.name)
        shutil.rmtree(draft, ignore_errors=True)
    return target / "SKILL.md"


def remove_skill_draft(home: str, skill_id: str) -> None:
    shutil.rmtree(Path(home) / "evolve" / "skills" / skill_id, ignore_errors=True)
