"""Page 4, memory: MemorySearch (with the tool's kind and scope filters), MemoryGet views, the files
the agent may read (curated files and notes: read, edit, a new note), and durable memory with
provenance and staleness (active, stale, superseded, forgotten), with forget.

Search and reads are the agent's own tools' functions (``search_memory`` with the same scopes,
ranking and embedder; ``memory_get``), as ``GET /v1/agents/{a}/memory/search|get`` call them, so the
operator sees what the agent would. Durable entries are ``holon.evolve.review``'s, as ``holon memory
inspect`` lists them (the ones this agent can recall); forget is ``review.forget``. A curated file
read whole can be edited: the new text replaces it through ``write_memory``, the function behind
the ``memory_write`` tool (scope and path checks, the file lock, the atomic write, the
``memory.written`` event, and the archive of a file the write took past ``ARCHIVE_AT_BYTES``, with
the deterministic summary: no model is called on the operator's behalf), with the operator's
authority.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from holon.api.dashboard.pages import page
from holon.api.dashboard.security import PageSession, WriteSession
from holon.api.port import DaemonPort
from holon.clock import SystemClock, format_us, parse_iso
from holon.errors import HolonError, NotFoundError, UsageError
from holon.evolve import review
from holon.memory.access import owners_for, search_memory
from holon.memory.files import MemoryScope, list_files
from holon.memory.get import DEFAULT_MAX_CHARS, MemoryGetRequest, memory_get
from holon.memory.refs import FileRef, parse_ref
from holon.memory.search import KINDS
from holon.memory.writes import write_memory
from holon.projections.durable import is_stale
from holon.runtime.embedders import embedder_from_settings

__all__ = ["CURATED", "memory_router"]

SCOPES = ("agent", "operator", "workspace")
"""The scopes a search may be narrowed to (the tool's ``scope``)."""
CURATED = ("file:agent/self.md", "file:operator/operator.md")
"""The curated files every agent has: its own notebook and what it knows about the operator."""
ORIGIN = "operator:dashboard"
LIMIT = 20
_GET_FIELDS = ("ref", "mode", "heading", "start", "end", "lines")
"""What a suggested next read may carry into a link (the page's own query parameters)."""


class ForgetIn(BaseModel):
    reason: str = Field("", max_length=500)


class FileIn(BaseModel):
    ref: str = Field(min_length=1, max_length=2_000)
    text: str = Field(max_length=1_000_000)


def _now(port: DaemonPort) -> int:
    clock = getattr(port, "clock", None) or SystemClock()  # the daemon's (injected in tests), as the API reads it
    return int(clock.now_us())


def _bad_filter(scope: str, status: str) -> str:
    """Why the page's ``scope`` or ``status`` is not one it knows, or ``""``."""
    if scope and scope not in SCOPES:
        return f"unknown scope {scope[:20]!r}; scopes: {', '.join(SCOPES)}"
    if status != "all" and status not in review.ENTRY_STATUSES:
        return f"unknown status {status[:20]!r}; statuses: all, {', '.join(review.ENTRY_STATUSES)}"
    return ""


def memory_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(include_in_schema=False)
    store = port.store

    @r.get("/agents/{agent}/memory")
    async def memory_page(
        request: Request,
        agent: str,
        session: PageSession,
        q: Annotated[str, Query(max_length=2_000)] = "",
        kind: Annotated[list[str] | None, Query(max_length=len(KINDS))] = None,
        scope: Annotated[str, Query(max_length=16)] = "",
        since: Annotated[str, Query(max_length=64)] = "",
        until: Annotated[str, Query(max_length=64)] = "",
        work_item: Annotated[str, Query(max_length=128)] = "",
        status: Annotated[str, Query(max_length=16)] = "active",
    ) -> Response:
        """Search (when ``q``; narrowed as the tool can be: ``kind``s, a ``scope``, a time window
        ``since``/``until`` (ISO 8601), a ``work_item``), the files
        the agent may read (curated files and notes), and its durable entries (``status``: active,
        stale, superseded, forgotten or all)."""
        try:
            a = store.agent(agent)
        except NotFoundError as e:
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        kinds = [k for k in kind or [] if k]
        result, error = None, _bad_filter(scope, status)
        if error:  # a hand-edited link: the page says what is wrong, with the defaults
            scope, status = "", "active"
        elif q.strip():
            try:
                found = search_memory(
                    store, a, q, kinds=kinds, scopes=[cast(MemoryScope, scope)] if scope else [], limit=LIMIT,
                    since_us=parse_iso(since or None, field="since", shown=40),
                    until_us=parse_iso(until or None, field="until", shown=40), work_item_id=work_item or None,
                    embedder=embedder_from_settings(store.settings),
                )  # fmt: skip
                result = found.as_dict()
            except UsageError as e:  # an unknown kind, a time that is not one
                error = e.message
        now = _now(port)
        entries = review.list_entries(
            store, status=None if status == "all" else status, owners=owners_for(a), now_us=now
        )
        stale = {s.entry_id: s.status == "active" and is_stale(s, now) for s in entries}
        when = {s.entry_id: f"{format_us(s.verified_us)[:19]}Z" for s in entries}
        files = await asyncio.to_thread(list_files, store.paths, a)
        return page(
            request, session, "memory.html", page="memory", agent=a, q=q, result=result, curated=CURATED,
            entries=entries, stale=stale, when=when, files=files, kinds=KINDS, chosen_kinds=kinds, scopes=SCOPES,
            scope=scope, since=since, until=until, work_item=work_item, status=status, statuses=("all", *review.ENTRY_STATUSES), error=error,
            status_code=400 if error else 200,
        )  # fmt: skip

    @r.get("/agents/{agent}/memory/get")
    async def memory_get_page(
        request: Request,
        agent: str,
        session: PageSession,
        ref: Annotated[str, Query(max_length=2_000)],
        mode: Annotated[str | None, Query(max_length=16)] = None,
        heading: Annotated[str | None, Query(max_length=500)] = None,
        start: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        end: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        lines: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
    ) -> Response:
        """One MemoryGet read, as the agent's ``memory_get`` tool returns it (sizes and next reads included)."""
        try:
            a = store.agent(agent)
            request_ = MemoryGetRequest(
                ref=ref, mode=mode, heading=heading, start=start, end=end, lines=lines, max_chars=DEFAULT_MAX_CHARS
            )
            got = memory_get(store, a, request_).as_json()
        except HolonError as e:  # an unknown agent or ref, a bad mode: the tool's own words
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        got["next_calls"] = [
            {k: v for k, v in call.items() if k in _GET_FIELDS and v is not None}
            for call in got.get("next_calls") or []
        ]
        editable = (
            ref.startswith("file:") and mode in (None, "full") and len(got.get("content") or "") == got.get("size")
        )
        return page(request, session, "memory_get.html", page="memory", agent=a, got=got, editable=editable)

    @r.post("/ui/agents/{agent}/memory/file")
    async def edit_file(agent: str, body: FileIn, session: WriteSession) -> dict[str, Any]:
        """Replace a curated file's text, as ``memory_write`` would, with the operator's authority."""
        a = store.agent(agent)
        ref = parse_ref(body.ref)
        if not isinstance(ref, FileRef):
            raise UsageError(f"{body.ref[:200]!r} is not a file reference (file:<scope>/<path>)")
        # write_memory, as the tool does: an edit that takes the file past the archive limit archives
        # its text and leaves the deterministic summary (no model call on the operator's behalf).
        result = await write_memory(
            store, a, ref.scope, ref.path, "replace", body.text, origin=ORIGIN, authority="operator"
        )
        return {"ref": str(ref), "size": result.size, "archive_ref": result.archive_ref}

    @r.post("/ui/memory/durable/{entry_id}/forget")
    async def forget(entry_id: str, body: ForgetIn, session: WriteSession) -> dict[str, Any]:
        """Stop recalling an entry (its events stay in the ledger: the audit trail)."""
        s = await asyncio.to_thread(
            review.forget, store, entry_id[:200], reason=body.reason or "forgotten from the dashboard", origin=ORIGIN
        )
        return {"entry_id": s.entry_id, "status": s.status}

    return r
