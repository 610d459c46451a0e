"""``holon mcp``: one agent's memory over MCP stdio (mcp 2.x ``MCPServer``), RFC 0007.

Three tools, bound to one agent, with the agent's own scope rules (its documents, the operator's
file and its workspace's; another agent's reference is refused like a missing one):

* ``memory_search`` — the same ``search_memory`` call as the agent's tool and ``holon memory
  search`` (with the same options), returning the same JSON as ``holon memory search --json``;
* ``memory_get`` — the same ``memory_get`` as the agent's tool and ``holon memory get`` (same
  options), returning the same JSON as ``holon memory get --json``;
* ``send_input`` — appends a durable input for the agent (origin ``mcp``, ``external``
  authority: information, never an order); a running daemon picks it up from the ledger. It
  writes the ledger directly (no HTTP, so no API token); an ``idempotency_key`` makes a retry
  return the first acknowledgement (``holon.runtime.ingress``).

The only module that imports ``mcp``. stdout is the protocol channel: holon logs go to the log
file only (``holon.cli.mcp_cmd`` configures that before the server starts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from holon import __version__
from holon.clock import parse_iso
from holon.errors import HolonError
from holon.memory.access import search_memory
from holon.memory.get import DEFAULT_MAX_CHARS, MAX_MAX_CHARS, MIN_MAX_CHARS, MemoryGetRequest, memory_get
from holon.memory.refs import parse_scope
from holon.projections import Store
from holon.runtime.embedders import embedder_from_settings
from holon.runtime.ingress import MAX_KEY_CHARS, deliver_input

__all__ = ["build_server"]

#: Longest query or input accepted (the agent's tools have the same order of limits).
MAX_QUERY = 2_000
MAX_INPUT = 50_000


@contextlib.contextmanager
def _clear_errors() -> Iterator[None]:
    """holon's errors reach the client as tool errors with their message (a crash would hide it)."""
    try:
        yield
    except HolonError as e:
        raise ToolError(str(e)) from e


def build_server(store: Store, agent_ref: str) -> MCPServer:
    """An MCP server over ``agent_ref``'s memory in ``store``."""
    agent_id = store.agent(agent_ref).agent_id
    name = store.agent(agent_id).name
    embedder = embedder_from_settings(store.settings)
    server = MCPServer(
        name=f"holon-{name}",
        version=__version__,
        instructions=f"Search and read the memory of holon agent {name!r}, and send it inputs.",
    )

    def agent() -> Any:
        return store.agent(agent_id)  # re-read: a deleted agent stops answering

    @server.tool(description="Search the agent's memory: conversations, tool results, episodes, work items, files.")
    def memory_search(
        query: Annotated[str, Field(max_length=MAX_QUERY, description="Plain words; any text is a valid query.")],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        kinds: Annotated[list[str] | None, Field(max_length=20, description="Only these kinds.")] = None,
        scope: Annotated[str | None, Field(description="agent, operator or workspace.")] = None,
        since: Annotated[str | None, Field(max_length=64, description="ISO 8601 time: documents from then on.")] = None,
        until: Annotated[str | None, Field(max_length=64, description="ISO 8601 time: documents until then.")] = None,
        work_item: Annotated[str | None, Field(max_length=200, description="Only documents of this work item.")] = None,
    ) -> dict[str, Any]:
        with _clear_errors():
            scopes = parse_scope(scope)
            result = search_memory(
                store, agent(), query, kinds=tuple(kinds or ()), scopes=scopes,
                since_us=parse_iso(since, field="since"), until_us=parse_iso(until, field="until"), work_item_id=work_item,
                limit=limit, embedder=embedder,
            )  # fmt: skip
            return result.as_dict()

    @server.tool(
        name="memory_get",
        description="Read what a memory reference points at (event:, episode:, work_item:, task:, durable:, file:).",
    )
    def memory_get_(
        ref: Annotated[str, Field(max_length=1_000)],
        mode: Annotated[str | None, Field(description="full, headers, section, tail or lines.")] = None,
        heading: Annotated[str | None, Field(max_length=500, description="The section to read (mode section).")] = None,
        start: Annotated[int | None, Field(ge=1, description="First line (mode lines).")] = None,
        end: Annotated[int | None, Field(ge=1, description="Last line, inclusive (mode lines).")] = None,
        lines: Annotated[int | None, Field(ge=1, description="How many last lines (mode tail).")] = None,
        expand: Annotated[bool, Field(description="An episode with the exact events it covers.")] = False,
        max_chars: Annotated[int, Field(ge=MIN_MAX_CHARS, le=MAX_MAX_CHARS)] = DEFAULT_MAX_CHARS,
    ) -> dict[str, Any]:
        with _clear_errors():
            reader = agent()
            request = MemoryGetRequest(
                ref=ref,
                mode=mode,
                heading=heading,
                start=start,
                end=end,
                lines=lines,
                expand=expand,
                max_chars=max_chars,
            )
            return memory_get(store, reader, request).as_json()

    @server.tool(
        description="Send the agent an input (it arrives as external information, not an order). With an "
        "idempotency_key, sending the same input again (after a lost answer) returns the first acknowledgement."
    )
    def send_input(
        text: Annotated[str, Field(min_length=1, max_length=MAX_INPUT)],
        idempotency_key: Annotated[
            str | None, Field(max_length=MAX_KEY_CHARS, description="1-200 printable ASCII characters, no spaces.")
        ] = None,
    ) -> dict[str, Any]:
        with _clear_errors():
            stored, _ = deliver_input(
                store, agent_id, text, origin="mcp", authority="external", sender="mcp", channel="mcp",
                wakes=("external", None), idempotency_key=idempotency_key,
            )  # fmt: skip
            return {"agent_id": agent_id, "seq": stored.seq, "event_id": stored.id}

    return server
