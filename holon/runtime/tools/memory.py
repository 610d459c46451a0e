"""Memory tools: read memory by reference (``memory_get``) and keep curated files (``memory_write``).

Both go through ``ctx.memory`` (an ``AgentMemory`` bound to the calling agent), which checks
every permission again; the schemas only steer the model. ``memory_write``'s schema is per agent:
``write_tool(scopes, background)`` builds the variant whose ``scope`` enum lists the scopes that
agent may write, and ``Tool.specialize`` picks it (``ToolRegistry.for_agent``). Variants are
cached by what they depend on, so every agent with the same rights shares one schema object.

``memory_search`` ranks the agent's own index documents and the files shared with it (see
``holon.memory.search``) and returns hits whose ``source_ref`` ``memory_get`` opens.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field, create_model

from holon.clock import parse_iso
from holon.errors import HolonError, UsageError
from holon.ledger.events import MemoryScope
from holon.memory.files import SCOPES, is_background, permissions
from holon.memory.get import DEFAULT_MAX_CHARS, LARGE_READ_CHARS, MemoryGetRequest
from holon.memory.markdown import Mode
from holon.memory.refs import MAX_REF_CHARS
from holon.memory.search import KINDS, SearchResult
from holon.memory.writes import MAX_WRITE_CHARS
from holon.projections.state import AgentState
from holon.runtime.tools.base import Tool, ToolContext, ToolParams, ToolRetry
from holon.runtime.views import AgentMemory

__all__ = ["MEMORY_TOOLS", "render_search", "render_search_json", "write_tool"]

#: Longest query the tool accepts (search itself takes any string; the first 2,000 characters count).
MAX_QUERY_PARAM = 10_000
MAX_LIMIT = 30
SearchKind = Literal["message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file"]


class GetParams(ToolParams):
    ref: str = Field(
        min_length=1,
        max_length=MAX_REF_CHARS,
        description="A reference: file:agent/self.md, file:operator/operator.md, file:workspace/memory.md, "
        "event:<seq>, episode:<id>, work_item:<id>, task:<id>, durable:<id> (a recalled durable memory entry), skill:<id> (a skill from your skills catalog), or a source_ref from a search hit.",
    )
    mode: Mode | None = Field(
        None, description="full (default), headers, section (needs heading), tail (last lines), lines (start..end)."
    )
    heading: str | None = Field(None, max_length=500, description="For mode section: the heading's text.")
    start: int | None = Field(None, ge=1, description="For mode lines: first line (1-based).")
    end: int | None = Field(None, ge=1, description="For mode lines: last line (inclusive).")
    lines: int | None = Field(None, ge=1, le=5_000, description="For mode tail: how many lines.")
    expand: bool = Field(False, description="For an episode: include the exact events it covers.")
    max_chars: int = Field(DEFAULT_MAX_CHARS, ge=500, le=LARGE_READ_CHARS, description="Largest read to return.")


class WriteParams(ToolParams):
    scope: Literal["agent", "operator", "workspace"] = Field(
        "agent", description="Which file: agent (yours), operator, workspace."
    )
    path: str | None = Field(
        None,
        max_length=300,
        description="Defaults to the scope's file (self.md, operator.md, memory.md); in the agent scope "
        "also notes/<name>.md.",
    )
    op: Literal["append", "replace"] = Field(
        description="replace: the whole file, or with heading only that section; append: a stamped entry at the end."
    )
    text: str = Field(min_length=1, max_length=MAX_WRITE_CHARS, description="Markdown.")
    heading: str | None = Field(
        None, max_length=200, description="With replace: the section to replace (added if missing)."
    )


class SearchParams(ToolParams):
    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_PARAM,
        description="What you are looking for, in plain words (names, topics, phrases); no special syntax.",
    )
    kinds: list[SearchKind] | None = Field(None, max_length=len(KINDS), description="Only these kinds of documents.")
    since: str | None = Field(None, max_length=40, description="ISO 8601 time: only documents from then on.")
    until: str | None = Field(None, max_length=40, description="ISO 8601 time: only documents until then.")
    work_item_id: str | None = Field(None, max_length=100, description="Only documents of this work item.")
    scope: MemoryScope | None = Field(None, description="Only one scope: agent (your own), operator or workspace.")
    limit: int = Field(8, ge=1, le=MAX_LIMIT, description="How many hits to return.")


def _memory(ctx: ToolContext) -> AgentMemory:
    if ctx.memory is None:
        raise ToolRetry("memory is not available to tools here")
    return ctx.memory


async def memory_get(ctx: ToolContext, p: GetParams) -> str:
    try:
        read = _memory(ctx).get(MemoryGetRequest(**p.model_dump()))
    except HolonError as e:
        raise ToolRetry(str(e)) from e
    return read.render()


def _time(value: str | None, name: str) -> int | None:
    try:
        return parse_iso(value, field=f"'{name}'", shown=40)
    except UsageError as e:
        raise ToolRetry(str(e)) from e


async def memory_search(ctx: ToolContext, p: SearchParams) -> str:
    try:
        result = _memory(ctx).search(
            p.query,
            kinds=tuple(p.kinds or ()),
            since_us=_time(p.since, "since"),
            until_us=_time(p.until, "until"),
            work_item_id=p.work_item_id,
            scopes=(p.scope,) if p.scope else (),
            limit=p.limit,
        )
    except HolonError as e:
        raise ToolRetry(str(e)) from e
    return render_search(result)


def render_search(result: SearchResult) -> str:
    """Hits as the model reads them: one compact block each, then what to do next."""
    return render_search_json(result.as_dict())


def render_search_json(result: dict[str, Any]) -> str:
    """``render_search`` of a result as ``SearchResult.as_dict`` (or the API) gives it: the CLI
    prints the same text whether it searched in-process or through the daemon."""
    count = f"{result['total']}" if result["total_exact"] else f"more than {result['total']}"
    head = f'{count} matches for "{result["query"][:120]}"'
    hits = result["hits"]
    if hits:
        head += f"; showing {len(hits)}"
    lag = result["freshness"]["lag_events"]
    if lag:
        head += f" (index {lag} events behind the ledger)"
    lines = [head]
    for i, h in enumerate(hits, 1):
        who = f" · {h['sender']}" if h["sender"] else ""
        title, kind, ref = h["title"], h["kind"], h["source_ref"]
        section = title.split(" > ", 1)[1] if kind == "file" and " > " in title else None
        where = f'{ref} (section "{section}")' if section else ref
        lines.append(f"{i}. [{kind} · {h['time']}{who}] {title} — ref {where}")
        lines.append(f"   {h['snippet']}")
    if not hits:
        lines.append("Nothing found. Try other words (names, distinctive terms), fewer filters, or another scope.")
    else:
        lines.append('Open a hit with memory_get {"ref": "<ref>"}; an episode with "expand": true lists its events.')
        if result["more"]:
            lines.append(
                "More matches exist: add distinctive words, or narrow with kinds, since/until or work_item_id."
            )
    return "\n".join(lines)


SEARCH_DESCRIPTION = (
    "Search your memory: past conversations (yours and the operator's messages), briefs, tool results, "
    "sealed episodes, decisions, work items, tasks and your curated files (plus the operator and workspace "
    "files shared with you). Use it before asking the operator something they may have told you, and when "
    "the prompt says earlier evidence was left out. Plain words work best: names, topics, distinctive terms; "
    "dates like '8 May 2023' favour that day. Each hit has a ref for memory_get. "
    'Example: {"query": "staging deploy credentials decision", "kinds": ["decision", "message"], "limit": 5}'
)


async def memory_write(ctx: ToolContext, p: WriteParams) -> str:
    try:
        if p.scope == "operator":  # it enters every agent's prompt: the operator decides (issue 14)
            proposal = _memory(ctx).propose_operator_write(p.path, p.op, p.text, heading=p.heading)
        else:
            return (await _memory(ctx).write(p.scope, p.path, p.op, p.text, heading=p.heading)).describe()
    except HolonError as e:
        raise ToolRetry(str(e)) from e
    ctx.emit(proposal)
    return (
        f"proposed as {proposal.proposal_id}: operator memory changes only when the operator accepts it "
        "(holon proposals); until then operator.md is unchanged."
    )


GET_DESCRIPTION = (
    "Read your memory by reference: your curated files (file:agent/self.md, file:operator/operator.md, "
    "file:workspace/memory.md, notes and archives), past events, episodes, work items and tasks; references "
    "come from search hits and from your prompt. Read large files by parts: mode headers lists headings with "
    "line numbers and sizes, then mode section reads one (with its subsections), tail the last lines, lines a "
    "range. A read larger than max_chars returns no content, only sizes and the calls that get what you need. "
    "An episode with expand=true lists the exact events it covers. "
    'Example: {"ref": "file:agent/self.md", "mode": "section", "heading": "Stable facts"}'
)

_SCOPE_HELP: dict[MemoryScope, str] = {
    "agent": "agent: your own file (self.md; notes/<name>.md for longer topics)",
    "operator": "operator: what you know about the operator (operator.md), shared by all their agents; "
    "record only what they said or confirmed; a write there is a proposal the operator accepts or dismisses",
    "workspace": "workspace: memory.md, shared by the agents working in this workspace",
}


def _write_description(scopes: tuple[MemoryScope, ...], background: bool) -> str:
    help_ = "; ".join(
        _SCOPE_HELP[s] + (" (append only: you run in the background)" if s == "workspace" and background else "")
        for s in scopes
    )
    return (
        "Keep your curated memory files. Each is a state document with headings (current facts, "
        "preferences, decisions, open questions), not a log: when something changes, replace its section "
        "(op replace with heading and the section's new text) instead of appending a duplicate or a "
        "contradiction. Append only short dated notes worth keeping as they are; entries are stamped with "
        "the time and you as the source. Read the current text (memory_get) before replacing. "
        f"Scopes: {help_}. "
        'Example: {"scope": "operator", "op": "replace", "heading": "Preferences", '
        '"text": "- Answers in English, short.\\n- Deploys only on weekdays."}'
    )


@functools.cache
def write_tool(scopes: tuple[MemoryScope, ...] = SCOPES, background: bool = False) -> Tool:
    """``memory_write`` offering only ``scopes`` in its schema (one object per distinct argument set)."""
    params = WriteParams
    if scopes != SCOPES:
        # A Literal built from data is no static type: mypy cannot check it.
        params = create_model(
            "WriteParams",
            __base__=WriteParams,
            scope=(
                Literal[scopes],  # type: ignore[arg-type]  # a Literal built from data (see above)
                Field("agent", description="Which file: " + ", ".join(scopes) + "."),
            ),
        )
    return Tool(
        "memory_write",
        _write_description(scopes, background),
        params,
        memory_write,
        specialize=_for_agent,
    )


def _for_agent(agent: AgentState) -> Tool:
    background = is_background(agent) and bool(agent.workspace)
    return write_tool(permissions(agent).writable, background)


MEMORY_TOOLS = [
    Tool("memory_search", SEARCH_DESCRIPTION, SearchParams, memory_search),
    Tool("memory_get", GET_DESCRIPTION, GetParams, memory_get),
    write_tool(),
]
