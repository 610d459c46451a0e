"""Who may search what: an agent's search scopes, and MemorySearch as an agent sees it.

Every index document has an owner. An agent's own ledger documents (messages, replies, tool
results, episodes, work items, tasks) and its own curated files are owned by ``agent:<id>``; the
operator's file by ``operator`` (shared by every agent of the home); the workspace file by
``workspace:<path>`` (shared by agents working in that directory). An agent searches exactly the
owners of the scopes ``holon.memory.files.permissions`` lets it read, nothing else; no caller can
widen that, because callers pass an agent, never a list of owners.
"""

from __future__ import annotations

from pathlib import Path

from holon.errors import NotFoundError, UsageError
from holon.ledger.events import MemoryScope
from holon.memory.files import locate, permissions, scope_dir
from holon.memory.index import FileSource, SearchIndex
from holon.memory.search import KINDS, SearchFilters, SearchResult, search
from holon.memory.vectors import Embedder
from holon.paths import HomePaths
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = ["file_sources", "owner_of", "owners_for", "search_memory", "sync_agent_files"]

#: Most curated files one agent's search looks at (notes and archives included).
MAX_FILES = 200


def owner_of(agent: AgentState, scope: MemoryScope) -> str:
    if scope == "agent":
        return f"agent:{agent.agent_id}"
    if scope == "operator":
        return "operator"
    return f"workspace:{Path(agent.workspace or '').resolve()}"


def owners_for(agent: AgentState) -> list[str]:
    """The index owners ``agent`` may search."""
    return [owner_of(agent, scope) for scope in permissions(agent).read]


def file_sources(paths: HomePaths, agent: AgentState) -> list[FileSource]:
    """The curated markdown files ``agent`` may read, as the index sees them."""
    out: list[FileSource] = []
    for scope in permissions(agent).read:
        try:
            root = scope_dir(paths, agent, scope)
        except NotFoundError:
            continue
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*.md")):
            rel = p.relative_to(root).as_posix()
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            try:
                file = locate(paths, agent, scope, rel)
            except UsageError:
                continue  # unsafe names and symlinks leading out are never indexed
            out.append(FileSource(owner_of(agent, scope), file.ref, file.location, f"{scope}/{rel}"))
            if len(out) >= MAX_FILES:
                return out
    return out


def sync_agent_files(store: Store, index: SearchIndex, agent: AgentState) -> int:
    """Bring the index in line with the curated files ``agent`` sees; returns how many changed."""
    files = file_sources(store.paths, agent)
    return index.sync_files(files, complete=_listed_in_full(agent, files))


def search_memory(
    store: Store,
    agent: AgentState,
    query: str,
    *,
    kinds: list[str] | tuple[str, ...] = (),
    since_us: int | None = None,
    until_us: int | None = None,
    work_item_id: str | None = None,
    scopes: list[MemoryScope] | tuple[MemoryScope, ...] = (),
    limit: int = 10,
    index: SearchIndex | None = None,
    embedder: Embedder | None = None,
) -> SearchResult:
    """MemorySearch for ``agent``: its own memory and the scopes shared with it, optionally narrowed."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UsageError(f"unknown kind {unknown[0]!r}; kinds: {', '.join(KINDS)}")
    readable = permissions(agent).read
    for scope in scopes:
        if scope not in readable:
            raise UsageError(f"agent {agent.name} cannot search the {scope} scope; it can search {', '.join(readable)}")
    if since_us is not None and until_us is not None and since_us > until_us:
        raise UsageError("'since' is after 'until'")
    owners = [owner_of(agent, s) for s in (scopes or readable)]
    index = index or SearchIndex(store)
    sync_agent_files(store, index, agent)
    return search(
        index,
        owners,
        query,
        filters=SearchFilters(tuple(kinds), since_us, until_us, work_item_id),
        limit=limit,
        embedder=embedder,
    )


def _listed_in_full(agent: AgentState, files: list[FileSource]) -> list[str]:
    """The owners whose every file ``files`` holds: all of the agent's, unless ``MAX_FILES`` cut it short.

    ``file_sources`` lists scope by scope, so only the scope it stopped in (and those after) may be
    missing files; a file missing from a complete listing was deleted.
    """
    owners = owners_for(agent)
    if len(files) < MAX_FILES:
        return owners
    return owners[: owners.index(files[-1].owner)]
