"""Markdown views of durable memory (RFC 0006). The ledger is the truth; these files are views.

Under each agent's home::

    memory/durable/<scope>/MEMORY.md     the index: one line per active entry of the scope
    memory/durable/<scope>/<kind>.md     each entry in full, with provenance; superseded ones after

A scope's view is a pure function of the ``durable`` projection rows of its owner
(``render_scope_text``), so it can always be rebuilt: files are rewritten only when their bytes
differ, and a home that shows a scope (``sharers``) shows the same bytes as any other. Views are
rendered after every change (evolve jobs, accepts, forgets: ``render_owner``), for a new agent
when it is created, and for every agent at daemon start-up (``render_all``), which repairs a view
deleted or edited by hand, or left behind by a crash between an append and its render.

This module sits in the memory layer (not with the evolve jobs) so that creating an agent, in
the runtime, can render the views its scopes already have.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from holon.clock import format_us
from holon.ledger.events import MemoryScope
from holon.logs import get_logger
from holon.memory.access import owner_of
from holon.memory.files import atomic_write
from holon.projections import Store
from holon.projections.durable import DurableState, stale_at_us
from holon.projections.state import AgentState

__all__ = [
    "KIND_ORDER",
    "SCOPES",
    "durable_dir",
    "render_agent",
    "render_all",
    "render_for_sharers",
    "render_owner",
    "render_scope_text",
    "render_scopes",
    "sharers",
]

log = get_logger("holon.memory.views")

SCOPES: tuple[MemoryScope, ...] = ("operator", "workspace", "agent")
KIND_ORDER = ("preference", "identity", "fact", "procedure", "blocker", "reference")

#: Owner -> its durable entries in seq order (every status), as read once for many homes.
Entries = Mapping[str, list[DurableState]]


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
    if s.verified_by:
        lines.append(f"- seen again in: {', '.join(f'event:{q}' for q in s.verified_by)}")
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
    return store.durable_entries((owner,))


def _all_entries(store: Store) -> dict[str, list[DurableState]]:
    """Every owner's entries, read in one query (for ``render_all``)."""
    return store.durable_by_owner()


def _write_view(root: Path, files: dict[str, str]) -> list[Path]:
    """Make ``root`` hold exactly ``files`` (other ``*.md`` files go); only changed bytes are written."""
    written = []
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


def render_scopes(
    store: Store, agent: AgentState, scopes: Iterable[str], *, entries: Entries | None = None
) -> list[Path]:
    """Rewrite the views of ``scopes`` in ``agent``'s home where their text changed; returns the
    files written. ``entries`` (owner -> entries) saves the reads when many homes are rendered.

    A scope that never had an entry and has no view yet is left alone: an empty view is written
    only where there was something before (the last entry forgotten), so a home of many agents
    does not fill with empty ``MEMORY.md`` files."""
    wanted = set(scopes)
    written = []
    for scope in SCOPES:
        if scope not in wanted or (scope == "workspace" and not agent.workspace):
            continue
        owner = owner_of(agent, scope)
        mine = entries.get(owner, []) if entries is not None else _entries(store, owner)
        root = durable_dir(agent, scope)
        if not mine and not root.is_dir():
            continue
        written += _write_view(root, render_scope_text(mine, scope))
    return written


def sharers(store: Store, scope: str, owner: str) -> list[AgentState]:
    """The agents whose homes show the entries of ``owner`` in ``scope``: every agent for the
    operator scope, every agent working in that workspace for a workspace, the agent itself for
    its own scope."""
    if scope not in SCOPES:
        return []
    return [
        a for a in store.agents()
        if (scope != "workspace" or a.workspace) and owner_of(a, scope) == owner
    ]  # fmt: skip


def render_owner(store: Store, scope: str, owner: str) -> list[Path]:
    """Refresh ``owner``'s ``scope`` views in the home of every agent that shows them (``sharers``):
    a workspace entry recorded or forgotten through one agent reads the same in the homes of all
    the agents sharing that workspace."""
    written = []
    entries = {owner: _entries(store, owner)}
    for agent in sharers(store, scope, owner):
        written += render_scopes(store, agent, {scope}, entries=entries)
    return written


def render_for_sharers(store: Store, agent: AgentState, scopes: Iterable[str]) -> list[Path]:
    """``render_owner`` for each of ``agent``'s ``scopes``."""
    written = []
    for scope in SCOPES:
        if scope in scopes and (scope != "workspace" or agent.workspace):
            written += render_owner(store, scope, owner_of(agent, scope))
    return written


def render_agent(store: Store, agent: AgentState, *, entries: Entries | None = None) -> list[Path]:
    """Every scope ``agent``'s home shows, brought up to date (a new agent on a workspace that
    already has durable memory gets that workspace's view at once)."""
    return render_scopes(store, agent, SCOPES, entries=entries)


def render_all(store: Store) -> list[Path]:
    """``render_agent`` for every agent: the start-up reconciliation. Cheap when nothing changed
    (one query, then a read and a compare per file). A home that cannot be written is logged and
    skipped: a view is never worth failing a start for."""
    entries = _all_entries(store)
    written: list[Path] = []
    for agent in store.agents():
        if not Path(agent.home).is_dir():
            continue  # a home removed by hand: not ours to recreate
        try:
            written += render_agent(store, agent, entries=entries)
        except OSError as e:
            log.warning("memory.views_not_rendered", agent=agent.name, error=str(e))
    return written
