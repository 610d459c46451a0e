"""What becomes a search document: events (read through the ledger's typed seam) to ``Doc`` values.

* conversation turns: messages received (operator, external, other agents) and the agent's
  replies, as turns (neighbour context, segments: see ``holon.memory.index_writer``);
* briefs, tool results (capped), sealed episodes, decisions;
* work items and tasks, one document each, a new version at each event that changes it (folded by
  the index itself from the ledger's events; the earlier versions superseded);
* durable memory entries go to their own tables (``holon.memory.index_durable``).

``index_events`` folds a batch of decoded events, in seq order, inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TypeVar

from holon.ledger import Event
from holon.ledger import events as ev
from holon.memory.index_durable import index_durable
from holon.memory.index_writer import Doc, _Writer, cap
from holon.projections import Store
from holon.projections.reducers import TaskEvent, WorkItemEvent, apply_task, apply_work_item
from holon.projections.state import TaskProjection, WorkItemState

__all__ = ["INDEXED_TYPES", "TOOL_RESULT_CAP", "UNINDEXED_TOOLS", "DocMaker", "index_events"]

#: Characters of a tool result or task output that are indexed.
TOOL_RESULT_CAP = 4_000
#: Tools whose results are not indexed: they are views of memory itself.
UNINDEXED_TOOLS = frozenset({"memory_search", "memory_get", "read_output"})
_S = TypeVar("_S", WorkItemState, TaskProjection)
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
        "task.state_changed",
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

    def work_item_doc(self, state: WorkItemState, seq: int) -> Doc:
        """A work item's document as of ``state`` (the item folded up to ``seq``)."""
        lines = [state.objective, *state.plan, *state.constraints, *(t.text for t in state.todos)]
        if state.report is not None:
            lines.append(self._text(state.report))
        ref = f"work_item:{state.work_item_id}"
        return Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="work_item", ts_us=state.updated_us,
                   title=f"{state.title} ({state.status})", text="\n".join(x for x in lines if x),
                   seq=seq, work_item_id=state.work_item_id)  # fmt: skip

    def task_doc(self, state: TaskProjection, event: Event) -> Doc:
        """A task's document as of ``state`` (the task folded up to ``event``)."""
        command = state.spec.get("command") or state.spec.get("task") or ""
        output = cap(self._text(state.output), TOOL_RESULT_CAP) if state.output is not None else ""
        ref = f"task:{state.task_id}"
        return Doc(ref, ref, owner=f"agent:{state.agent_id}", kind="task", ts_us=state.updated_us,
                   title=f"{state.title} ({state.state})", text=f"{command}\n{output}".strip(),
                   seq=event.seq, work_item_id=event.work_item_id)  # fmt: skip


class _States:
    """The index's own fold of work items and tasks (``search_states``, one JSON row each), so that
    each version of their document is a function of the ledger up to its event: the projection's
    rows hold the state at the head, which depends on when a node's batch ran."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def get(self, key: str, model: type[_S]) -> _S | None:
        row = self.conn.execute("SELECT state FROM search_states WHERE key = ?", (key,)).fetchone()
        return model.model_validate_json(row[0]) if row is not None else None

    def put(self, key: str, owner: str, state: WorkItemState | TaskProjection) -> None:
        self.conn.execute(
            "INSERT INTO search_states(key, owner, state) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET state = excluded.state",
            (key, owner, state.model_dump_json()),
        )


def _changes(conn: sqlite3.Connection, doc: Doc) -> bool:
    """Whether ``doc`` differs from its live version in what a search finds and shows (a new time
    alone, such as a task's heartbeat, writes no version)."""
    row = conn.execute("SELECT title, text, work_item_id FROM search_docs WHERE key = ?", (doc.key,)).fetchone()
    return row is None or tuple(row) != (doc.title, cap(doc.text), doc.work_item_id)


def _fold_versioned(conn: sqlite3.Connection, maker: DocMaker, states: _States, writer: _Writer, event: Event) -> bool:
    """Fold a work item's or a task's event into its state and write the version it makes (if its
    document changed); False for any other event."""
    p = event.payload
    if isinstance(p, WorkItemEvent):
        key = f"work_item:{p.work_item_id}"
        item = apply_work_item(states.get(key, WorkItemState), event)
        if item is not None:
            states.put(key, f"agent:{item.agent_id}", item)
            doc = maker.work_item_doc(item, event.seq)
            if _changes(conn, doc):
                writer.upsert(doc, version=True)
        return True
    if isinstance(p, TaskEvent):
        key = f"task:{p.task_id}"
        task = apply_task(states.get(key, TaskProjection), event)
        if task is not None:
            states.put(key, f"agent:{task.agent_id}", task)
            doc = maker.task_doc(task, event)
            if _changes(conn, doc):
                writer.upsert(doc, version=True)
        return True
    return False


def index_events(conn: sqlite3.Connection, maker: DocMaker, events: Sequence[Event], *, durable: bool) -> None:
    """Index ``events`` (in seq order) inside the open transaction of ``conn``.

    A work item or task gets a new version of its document at each of its events that changes it
    (the earlier one superseded: ``_Writer.supersede``), built from the index's own fold of its
    events, and the fold compacts at the events the ledger decides (``_Writer._maybe_compact``):
    what the engine holds after any event is a function of the ledger alone, whatever the batches
    (BM25's statistics count every document the engine holds, so two nodes folding the same ledger
    in other batches score alike: RFC 0008, "Identical ranking on every node"). ``durable``: follow
    durable memory entries too (a whole-index pass; rebuilding one owner leaves them as they are).
    """
    writer = _Writer(conn)
    states = _States(conn)
    for event in events:
        p = event.payload
        if _fold_versioned(conn, maker, states, writer, event):
            continue
        if isinstance(p, ev.DurableRecorded | ev.DurableForgotten):
            if durable:
                index_durable(conn, p)
            continue
        for doc in maker.docs_for(event):
            writer.upsert(doc, version=True)
    writer.finish()
