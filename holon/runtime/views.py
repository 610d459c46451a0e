"""Read-only views of one agent's own state, handed to its tools. Other agents' rows are invisible."""

from __future__ import annotations

from typing import Any

from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import TaskProjection, WorkItemState

__all__ = ["StoreViews"]


class StoreViews:
    def __init__(self, store: Store, agent_id: str) -> None:
        self._store = store
        self._agent = agent_id

    def _own(self, kind: str, key: str) -> Any:
        state = self._store.state(kind, key)
        return state if state is not None and getattr(state, "agent_id", None) == self._agent else None

    def working_memory(self) -> dict[str, Any]:
        return self._store.working_memory(self._agent)

    def work_item(self, work_item_id: str) -> WorkItemState | None:
        return self._own("work_item", work_item_id)  # type: ignore[no-any-return]

    def work_items(self, *, include_closed: bool = False) -> list[WorkItemState]:
        items: list[WorkItemState] = self._store.rows("work_item", agent_id=self._agent)
        return items if include_closed else [i for i in items if i.status in ("open", "blocked")]

    def task(self, task_id: str) -> TaskProjection | None:
        return self._own("task", task_id)  # type: ignore[no-any-return]

    def tasks(self) -> list[TaskProjection]:
        return self._store.rows("task", agent_id=self._agent)

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
