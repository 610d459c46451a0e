"""Markdown views of durable memory and skills (RFC 0006). The ledger is the truth; these are views.

Under each agent's home::

    memory/durable/<scope>/MEMORY.md     the index: one line per active entry of the scope
    memory/durable/<scope>/<kind>.md     each entry in full, with provenance; superseded ones after
    evolve/skills/<skill id>/SKILL.md    a drafted skill, while its proposal waits
    skills/<skill id>/SKILL.md           an accepted skill (listed in the prompt's skills catalog)

The durable-memory views are rendered by ``holon.memory.durable_views`` (re-exported here): it
sits in the memory layer so that creating an agent can render the views its scopes already have.
A scope's files are rewritten only when their text changes. Because the files sit under
``memory/``, MemorySearch indexes them like any curated file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from holon.memory.durable_views import (
    KIND_ORDER,
    SCOPES,
    durable_dir,
    render_agent,
    render_all,
    render_for_sharers,
    render_owner,
    render_scope_text,
    render_scopes,
    sharers,
)
from holon.memory.files import atomic_write
from holon.projections import Store
from holon.projections.durable import ProposalState

__all__ = [
    "KIND_ORDER",
    "SCOPES",
    "durable_dir",
    "install_skill",
    "remove_skill_draft",
    "render_agent",
    "render_all",
    "render_for_sharers",
    "render_owner",
    "render_scope_text",
    "render_scopes",
    "sharers",
    "write_skill_draft",
]


# --- skills ------------------------------------------------------------------------------------


def _skill_proposal(store: Store, skill_id: str) -> ProposalState | None:
    for p in store.rows("proposal"):
        if p.skill is not None and p.skill.skill_id == skill_id:
            return p
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
