"""Work-item tools: create, update, pick (switch and return), complete, list."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from holon.ids import new_id
from holon.ledger import events as ev
from holon.projections.state import WorkItemState
from holon.runtime.tools.base import Tool, ToolContext, ToolParams, ToolRetry

__all__ = ["WORK_TOOLS"]


class CreateParams(ToolParams):
    title: str = Field(min_length=1, max_length=200, description="Short name of the work.")
    objective: str = Field(min_length=1, max_length=2000, description="What 'done' looks like.")
    plan: list[str] = Field(default_factory=list, max_length=30, description="Ordered steps.")
    todos: list[str] = Field(default_factory=list, max_length=50, description="Concrete next actions.")
    delivery_target: str | None = Field(None, max_length=500, description="Where the result goes.")
    constraints: list[str] = Field(default_factory=list, max_length=20, description="Limits on scope or method.")
    activate: bool = Field(True, description="Make it the active work item now.")


class TodoEdit(ToolParams):
    id: str | None = Field(None, description="Todo id; omit to add a new todo.")
    text: str | None = Field(None, max_length=500)
    status: ev.TodoStatus | None = None
    remove: bool = False


class UpdateParams(ToolParams):
    work_item_id: str | None = Field(None, description="Defaults to the active work item.")
    objective: str | None = Field(None, max_length=2000)
    plan: list[str] | None = Field(None, max_length=30, description="Replaces the whole plan.")
    delivery_target: str | None = Field(None, max_length=500)
    constraints: list[str] | None = Field(None, max_length=20)
    status: Literal["open", "blocked", "abandoned"] | None = None
    todos: list[TodoEdit] = Field(default_factory=list, max_length=50)


class PickParams(ToolParams):
    work_item_id: str = Field(description="The work item to switch to, or 'previous' to go back.")


class CompleteParams(ToolParams):
    report: str = Field(min_length=1, max_length=20_000, description="What was done and how it was verified.")
    work_item_id: str | None = Field(None, description="Defaults to the active work item.")


class ListParams(ToolParams):
    include_closed: bool = False


def _resolve(ctx: ToolContext, work_item_id: str | None) -> tuple[str, WorkItemState]:
    wid = work_item_id or ctx.views.working_memory().get("active_work_item")
    if not wid:
        raise ToolRetry("no work item is active; pass work_item_id or create one with create_work_item")
    item = ctx.views.work_item(wid)
    if item is None:
        raise ToolRetry(f"no work item {wid!r}; list_work_items shows yours")
    return wid, item


async def create_work_item(ctx: ToolContext, p: CreateParams) -> str:
    wid = new_id("wi")
    ctx.emit(
        ev.WorkItemOpened(
            work_item_id=wid,
            title=p.title,
            objective=p.objective,
            delivery_target=p.delivery_target,
            plan=p.plan,
            constraints=p.constraints,
            activate=p.activate,
        ),
        work_item_id=wid,
    )
    for i, text in enumerate(p.todos, start=1):
        ctx.emit(ev.TodoChanged(work_item_id=wid, op="add", todo_id=f"t{i}", text=text), work_item_id=wid)
    state = "active" if p.activate else "open (not active)"
    todos = f"{len(p.todos)} todos (ids t1..t{len(p.todos)})" if p.todos else "no todos yet"
    return f"created work item {wid} '{p.title}', {state}, with {todos}"


async def update_work_item(ctx: ToolContext, p: UpdateParams) -> str:
    wid, item = _resolve(ctx, p.work_item_id)
    if item.status in ("completed", "abandoned"):
        raise ToolRetry(f"work item {wid} is {item.status}; it cannot change any more")
    fields = {k: getattr(p, k) for k in ("objective", "plan", "delivery_target", "constraints", "status")}
    if any(v is not None for v in fields.values()):
        ctx.emit(ev.WorkItemUpdated(work_item_id=wid, **fields), work_item_id=wid)
    existing = {t.id for t in item.todos}
    next_n = len(existing) + 1
    changes = []
    for edit in p.todos:
        if edit.id is None:
            if not edit.text:
                raise ToolRetry("a new todo needs text")
            while f"t{next_n}" in existing:
                next_n += 1
            tid = f"t{next_n}"
            existing.add(tid)
            ctx.emit(
                ev.TodoChanged(work_item_id=wid, op="add", todo_id=tid, text=edit.text, status=edit.status),
                work_item_id=wid,
            )
            changes.append(f"added {tid}")
        elif edit.id not in existing:
            raise ToolRetry(
                f"work item {wid} has no todo {edit.id!r}; its todos: {', '.join(sorted(existing)) or 'none'}"
            )
        elif edit.remove:
            ctx.emit(ev.TodoChanged(work_item_id=wid, op="remove", todo_id=edit.id), work_item_id=wid)
            changes.append(f"removed {edit.id}")
        else:
            ctx.emit(
                ev.TodoChanged(work_item_id=wid, op="update", todo_id=edit.id, text=edit.text, status=edit.status),
                work_item_id=wid,
            )
            changes.append(f"updated {edit.id}")
    if not ctx.emitted:
        raise ToolRetry("nothing to update: pass at least one field or todo edit")
    return f"updated work item {wid}" + (f" ({', '.join(changes)})" if changes else "")


async def pick_work_item(ctx: ToolContext, p: PickParams) -> str:
    wm = ctx.views.working_memory()
    if p.work_item_id == "previous":
        if not wm.get("work_stack"):
            raise ToolRetry("there is no previous work item to return to")
        ctx.emit(ev.WorkItemPicked(work_item_id=None))
        return f"switched back to work item {wm['work_stack'][-1]}"
    item = ctx.views.work_item(p.work_item_id)
    if item is None:
        raise ToolRetry(f"no work item {p.work_item_id!r}; list_work_items shows yours")
    if item.status in ("completed", "abandoned"):
        raise ToolRetry(f"work item {p.work_item_id} is {item.status}")
    if wm.get("active_work_item") == p.work_item_id:
        return f"work item {p.work_item_id} is already active"
    ctx.emit(ev.WorkItemPicked(work_item_id=p.work_item_id), work_item_id=p.work_item_id)
    return f"switched to work item {p.work_item_id}; the previous one is kept and 'previous' returns to it"


async def complete_work_item(ctx: ToolContext, p: CompleteParams) -> str:
    wid, item = _resolve(ctx, p.work_item_id)
    if item.status == "completed":
        raise ToolRetry(f"work item {wid} is already completed")
    ctx.emit(ev.WorkItemCompleted(work_item_id=wid, report=p.report), work_item_id=wid)
    title = item.title
    ctx.emit(
        ev.BriefDelivered(kind="result", text=f"Completed: {title}\n\n{p.report}", work_item_id=wid), work_item_id=wid
    )
    return f"completed work item {wid}; the report was sent to the operator as a brief"


async def list_work_items(ctx: ToolContext, p: ListParams) -> str:
    items = ctx.views.work_items(include_closed=p.include_closed)
    active = ctx.views.working_memory().get("active_work_item")
    if not items:
        return "no work items"
    lines = []
    for it in items:
        mark = "*" if it.work_item_id == active else " "
        done = sum(1 for t in it.todos if t.status == "done")
        lines.append(f"{mark} {it.work_item_id} [{it.status}] {it.title} ({done}/{len(it.todos)} todos done)")
    return "\n".join(lines)


WORK_TOOLS = [
    Tool(
        "create_work_item",
        "Start tracking a piece of work: title, objective, plan and todos. Use it when the operator "
        "asks for something that takes more than one step. Returns the new work item id. "
        'Example: {"title": "Fix login bug", "objective": "Users can log in again", '
        '"plan": ["reproduce", "fix", "test"], "todos": ["run the failing test"]}',
        CreateParams,
        create_work_item,
    ),
    Tool(
        "update_work_item",
        "Change the objective, plan, status or todos of a work item (the active one by default). "
        "Todo edits: omit id to add; give id with status 'done' to tick one off; remove: true to drop it. "
        'Example: {"todos": [{"id": "t1", "status": "done"}, {"text": "write the changelog"}]}',
        UpdateParams,
        update_work_item,
    ),
    Tool(
        "pick_work_item",
        "Switch the active work item. The one you leave is kept; pass 'previous' to return to it. "
        'Example: {"work_item_id": "previous"}',
        PickParams,
        pick_work_item,
    ),
    Tool(
        "complete_work_item",
        "Finish a work item (the active one by default) with a report of what was done and how it "
        "was verified; the report is delivered to the operator. "
        'Example: {"report": "Fixed the null check in auth.py; tests pass (pytest -q: 42 passed)."}',
        CompleteParams,
        complete_work_item,
    ),
    Tool(
        "list_work_items",
        "List your work items with status and todo progress; '*' marks the active one. Example: {}",
        ListParams,
        list_work_items,
    ),
]
