"""What tools see of their agent: read-only views of its own state, and its memory. Other agents' rows are invisible."""

from __future__ import annotations

from typing import Any

from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import events as ev
from holon.ledger.events import MemoryScope
from holon.memory.access import search_memory
from holon.memory.files import Op, locate
from holon.memory.get import MemoryGetRequest, MemoryRead, memory_get
from holon.memory.search import SearchResult
from holon.memory.writes import Summarize, WriteResult, check_write, write_memory
from holon.projections import Store
from holon.projections.state import AgentState, TaskProjection, WorkItemState
from holon.runtime.embedders import embedder_from_settings

__all__ = ["AgentMemory", "StoreViews"]


class StoreViews:
    def __init__(self, store: Store, agent_id: str) -> None:
        self._store = store
        self._agent = agent_id

    def working_memory(self) -> dict[str, Any]:
        return self._store.working_memory(self._agent)

    def work_item(self, work_item_id: str) -> WorkItemState | None:
        item = self._store.work_item(work_item_id)
        return item if item is not None and item.agent_id == self._agent else None

    def work_items(self, *, include_closed: bool = False) -> list[WorkItemState]:
        # Only the open ones are read (and decoded) unless closed ones are asked for too.
        return self._store.work_items(agent_id=self._agent, status=None if include_closed else ("open", "blocked"))

    def task(self, task_id: str) -> TaskProjection | None:
        task = self._store.task(task_id)
        return task if task is not None and task.agent_id == self._agent else None

    def tasks(self) -> list[TaskProjection]:
        return self._store.tasks(agent_id=self._agent)

    def blob_text(self, blob_hash: str) -> str | None:
        body = self._store.ledger.read_blob(ev.BlobRef(blob=blob_hash, size=0, preview=""))
        return body.text

    def tool_output(self, call_id: str) -> str | None:
        """The full output of one of this agent's recent tool calls."""
        for event in reversed(self._store.ledger.recent(self._agent, ("tool.resulted",), limit=500)):
            p = event.payload
            if isinstance(p, ev.ToolResulted) and p.call_id == call_id:
                text = self._store.ledger.resolve(p.output)
                return text if isinstance(text, str) else (text.text if text is not None else None)
        return None


class AgentMemory:
    """One agent's memory, handed to its memory tools: reads through MemoryGet, curated-file writes.

    Like ``StoreViews`` it is bound to one agent, so a tool cannot reach another agent's memory.
    A write appends its ``memory.written`` event itself instead of through ``ctx.emit``: the
    event must be appended while the file's lock is held (see ``holon.memory.writes``), so it
    commits just before the tool's result rather than with it, as task events do.
    """

    def __init__(
        self, store: Store, agent: AgentState, *, turn_id: str | None = None, summarize: Summarize | None = None
    ) -> None:
        self._store = store
        self.agent = agent
        self._turn_id = turn_id
        self._summarize = summarize

    def get(self, request: MemoryGetRequest) -> MemoryRead:
        return memory_get(self._store, self.agent, request)

    def propose_operator_write(
        self, path: str | None, op: Op, text: str, *, heading: str | None = None
    ) -> ev.ProposalCreated:
        """An edit of the operator's memory (which enters every agent's prompt), as a proposal the
        operator accepts or dismisses (``holon proposals``): an agent never edits it directly.

        Checks now what the write itself would check, so a proposal can be applied as it stands."""
        file = locate(self._store.paths, self.agent, "operator", path, purpose=op)
        check_write(op, text, heading)
        draft = ev.MemoryWriteDraft(path=file.path, op=op, text=text, heading=heading)
        reason = f"agent {self.agent.name} asks to {op} {file.ref}" + (f" (section {heading!r})" if heading else "")
        return ev.ProposalCreated(proposal_id=new_id("prop"), kind="memory_write", write=draft, reason=reason)

    async def write(
        self, scope: str, path: str | None, op: Op, text: str, *, heading: str | None = None
    ) -> WriteResult:
        if scope == "operator":
            raise UsageError("an agent does not write operator memory directly; it proposes the edit (memory_write)")
        return await write_memory(
            self._store,
            self.agent,
            scope,
            path,
            op,
            text,
            origin=f"agent:{self.agent.agent_id}",
            authority="agent",
            turn_id=self._turn_id,
            heading=heading,
            summarize=self._summarize,
        )

    def search(
        self,
        query: str,
        *,
        kinds: list[str] | tuple[str, ...] = (),
        since_us: int | None = None,
        until_us: int | None = None,
        work_item_id: str | None = None,
        scopes: list[MemoryScope] | tuple[MemoryScope, ...] = (),
        limit: int = 10,
    ) -> SearchResult:
        return search_memory(
            self._store,
            self.agent,
            query,
            kinds=kinds,
            since_us=since_us,
            until_us=until_us,
            work_item_id=work_item_id,
            scopes=scopes,
            limit=limit,
            embedder=embedder_from_settings(self._store.settings),
        )
