"""What becomes a search document: events (read through the ledger's typed seam) to ``Doc`` values.

* conversation turns: messages received (operator, external, other agents) and the agent's
  replies, as turns (neighbour context, segments: see ``holon.memory.index_writer``);
* briefs, tool results (capped), sealed episodes, decisions;
* work items and tasks, one document each, rewritten as they change (from their projection rows);
* durable memory entries go to their own tables (``holon.memory.index_durable``).

``index_events`` folds a batch of decoded events, in seq order, inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from holon.ledger import Event
from holon.ledger import events as ev
from holon.memory.index_durable import index_durable
from holon.memory.index_writer import Doc, _Writer, cap
from holon.projections import Store
from holon.projections.state import TaskProjection, WorkItemState

__all__ = ["INDEXED_TYPES", "TOOL_RESULT_CAP", "UNINDEXED_TOOLS", "DocMaker", "index_events"]

#: Characters of a tool result or task output that are indexed.
TOOL_RESULT_CAP = 4_000
#: Tools whose results are not indexed: they are views of memory itself.
UNINDEXED_TOOLS = frozenset({"memory_search", "memory_get", "read_output"})
#: The event types the index reads; no other event is even decoded.
INDEXED_TYPES = frozenset(
    {
        "message.received",
        "turn.settled",
        "brief.delivered",
        "tool.resulted",
        "episode.sealed",
        "decision.recorded",
        "work_item.opened",
        "work_item.updated",
        "work_item.completed",
        "todo.changed",
        "task.created",
        "task.resulted",
        "durable.recorded",
        "durable.forgotten",
    }
)


class DocMaker:
    """Turns events into documents; resolves large texts and agent names through the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._names: dict[str, str] = {}

    def _name(self, agent_id: str) -> str:
        if agent_id not in self._names:
            try:
                self._names[agent_id] = self.store.agent(agent_id).name
            except Exception:  # an agent row always exists; be robust all the same
                self._names[agent_id] = "agent"
        return self._names[agent_id]

    def _text(self, value: ev.LargeText | None) -> str:
        resolved = self.store.ledger.resolve(value)
        if resolved is None:
            return ""
        if isinstance(resolved, str):
            return resolved
        return resolved.text if resolved.text is not None else resolved.preview

    def docs_for(self, event: Event) -> Iterable[Doc]:
        p = event.payload
        key = f"event:{event.seq}"

        def doc(kind: str, title: str, text: str, *, ref: str = key, sender: str = "", turn: bool = False,
                work_item_id: str | None = event.work_item_id) -> Doc:  # fmt: skip
            return Doc(ref, ref, owner=f"agent:{event.agent_id}", kind=kind, ts_us=event.ts_us, title=title,
                       text=text, seq=event.seq, sender=sender, work_item_id=work_item_id, turn=turn)  # fmt: skip

        if isinstance(p, ev.MessageReceived):
            yield doc("message", f"message from {p.sender}", self._text(p.text), sender=p.sender, turn=True)
        elif isinstance(p, ev.TurnSettled) and p.reply is not None:
            name = self._name(event.agent_id)
            text = self._text(p.reply)
            if text.strip():
                yield doc("reply", f"reply of {name}", text, sender=name, turn=True)
        elif isinstance(p, ev.BriefDelivered):
            yield doc("brief", f"{p.kind} brief", self._text(p.text), sender=self._name(event.agent_id))
        elif isinstance(p, ev.ToolResulted) and p.tool not in UNINDEXED_TOOLS:
            yield doc("tool_result", f"{p.tool} result ({p.status})", cap(self._text(p.output), TOOL_RESULT_CAP))
        elif isinstance(p, ev.EpisodeSealed):
            parts = [p.objective, p.summary, *p.decisions, *p.follow_ups, *p.excerpts, p.last_reply, " ".join(p.files)]
            title = p.topic or p.objective or f"episode ending {p.boundary}"
            yield doc("episode", cap(title, 200), "\n".join(x for x in parts if x), ref=f"episode:{p.episode_id}",
                      work_item_id=p.work_item_id)  # fmt: skip
        elif isinstance(p, ev.DecisionRecorded):
            yield doc("decision", "decision", p.text)

    def work_item_doc(self, event: Event) -> Iterable[Doc]:
        item_id = getattr(event.payload, "work_item_id", "")
        state = self.store.work_item(item_id)
        if not isinstance(state, WorkItemState):
            return
        lines = [state.objective, *state.plan, *state.constraints, *(t.text for t in state.todos)]
        if state.report is not None:
            lines.append(self._text(state.report))
        ref = f"work_item:{item_id}"
        yield Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="work_item", ts_us=state.updated_us,
                  title=f"{state.title} ({state.status})", text="\n".join(x for x in lines if x),
                  seq=event.seq, work_item_id=item_id)  # fmt: skip

    def task_doc(self, event: Event) -> Iterable[Doc]:
        task_id = getattr(event.payload, "task_id", "")
        state = self.store.task(task_id)
        if not isinstance(state, TaskProjection):
            return
        command = state.spec.get("command") or state.spec.get("task") or ""
        output = cap(self._text(state.output), TOOL_RESULT_CAP) if state.output is not None else ""
        ref = f"task:{task_id}"
        yield Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="task", ts_us=state.updated_us,
                  title=f"{state.title} ({state.state})", text=f"{command}\n{output}".strip(),
                  seq=event.seq, work_item_id=event.work_item_id)  # fmt: skip


def index_events(conn: sqlite3.Connection, maker: DocMaker, events: Sequence[Event], *, durable: bool) -> None:
    """Index ``events`` (in seq order) inside the open transaction of ``conn``.

    A work item or task is written once per batch, from its projection row, however many of its
    events the batch holds: at the place of its last event in the batch, so that documents get
    their ids in the order of their last events whatever the batches were (ids break ties in a
    ranking, and two nodes folding the same ledger in other batches must rank alike: RFC 0008,
    "Identical ranking on every node"). ``durable``: follow durable memory entries too (a
    whole-index pass; rebuilding one owner leaves them as they are).
    """
    writer = _Writer(conn)
    last: dict[tuple[str, str], int] = {}
    for i, event in enumerate(events):
        p = event.payload
        if isinstance(p, ev.WorkItemOpened | ev.WorkItemUpdated | ev.WorkItemCompleted | ev.TodoChanged):
            last[("item", p.work_item_id)] = i
        elif isinstance(p, ev.TaskCreated | ev.TaskResulted):
            last[("task", p.task_id)] = i
    for i, event in enumerate(events):
        p = event.payload
        if isinstance(p, ev.WorkItemOpened | ev.WorkItemUpdated | ev.WorkItemCompleted | ev.TodoChanged):
            if last[("item", p.work_item_id)] == i:
                for doc in maker.work_item_doc(event):
                    writer.upsert(doc)
            continue
        if isinstance(p, ev.TaskCreated | ev.TaskResulted):
            if last[("task", p.task_id)] == i:
                for doc in maker.task_doc(event):
                    writer.upsert(doc)
            continue
        if isinstance(p, ev.DurableRecorded | ev.DurableForgotten):
            if durable:
                index_durable(conn, p)
            continue
        for doc in maker.docs_for(event):
            writer.upsert(doc)
    writer.finish()
