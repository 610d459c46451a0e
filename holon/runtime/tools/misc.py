"""Waits, sleep, briefs to the operator, child agents, and paging through large outputs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from holon.clock import parse_iso
from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import events as ev
from holon.runtime.tools.base import Tool, ToolContext, ToolOutput, ToolParams, ToolRetry

__all__ = ["MISC_TOOLS", "MAX_RECHECK_S"]

#: No wait may go longer than this without the agent being woken to look again.
MAX_RECHECK_S = 7 * 86_400


class WaitParams(ToolParams):
    on: Literal["task", "operator", "external", "timer"] = Field(description="What you wait for.")
    target: str | None = Field(None, description="Task id for 'task', event name for 'external', timer id for 'timer'.")
    recheck_in_s: float = Field(gt=0, le=MAX_RECHECK_S, description="Wake up after this long even if nothing arrived.")
    reason: str = Field("", max_length=500)

    @model_validator(mode="after")
    def _target(self) -> WaitParams:
        if self.on in ("task", "timer") and not self.target:
            raise ValueError(f"waiting on a {self.on} needs its id in 'target'")
        return self


class SleepParams(ToolParams):
    seconds: float | None = Field(None, gt=0, le=MAX_RECHECK_S)
    until: str | None = Field(None, description="ISO 8601 time (UTC when no zone is given).")
    reason: str = Field("", max_length=500)

    @model_validator(mode="after")
    def _one(self) -> SleepParams:
        if (self.seconds is None) == (self.until is None):
            raise ValueError("give exactly one of 'seconds' or 'until'")
        return self


class BriefParams(ToolParams):
    kind: Literal["progress", "result", "question"]
    text: str = Field(min_length=1, max_length=20_000)


class SpawnParams(ToolParams):
    task: str = Field(min_length=1, max_length=20_000, description="What the child agent must do and report back.")
    name: str | None = Field(None, description="Child name (a-z, 0-9, '-', '_'); generated when omitted.")
    template: str = "assistant"


class ReadOutputParams(ToolParams):
    ref: str = Field(description="The reference shown with a truncated output, e.g. 'out:call_123'.")
    offset: int = Field(0, ge=0)
    length: int = Field(8_000, ge=1, le=32_000)


def _register(ctx: ToolContext, on: ev.WaitOn, target: str | None, recheck_s: float, reason: str) -> ToolOutput:
    wait_id = new_id("wait")
    recheck_at = ctx.clock.now_us() + int(recheck_s * 1_000_000)
    ctx.emit(ev.WaitRegistered(wait_id=wait_id, on=on, target=target, recheck_at_us=recheck_at, reason=reason))
    what = f"{on} {target}" if target else on
    return ToolOutput(
        f"waiting on {what} (wait {wait_id}); you will be woken when it arrives or in {recheck_s:g} s at the latest. "
        "End your turn now.",
        ends_turn="waiting",
    )


async def wait(ctx: ToolContext, p: WaitParams) -> ToolOutput:
    if p.on == "task":
        task = ctx.views.task(p.target or "")
        if task is None:
            raise ToolRetry(f"no task {p.target!r}; task_list shows yours")
        if task.state not in ("pending", "running"):
            raise ToolRetry(f"task {p.target} already ended ({task.state}); read it with task_output")
    return _register(ctx, p.on, p.target, p.recheck_in_s, p.reason)


async def sleep(ctx: ToolContext, p: SleepParams) -> ToolOutput:
    if p.until is not None:
        try:
            at = parse_iso(p.until, field="'until'")
        except UsageError as e:
            raise ToolRetry(str(e)) from e
        seconds = (at - ctx.clock.now_us()) / 1_000_000
        if seconds <= 0:
            raise ToolRetry(f"{p.until} is in the past")
        if seconds > MAX_RECHECK_S:
            raise ToolRetry(f"sleep at most {MAX_RECHECK_S // 86_400} days at a time")
    else:
        seconds = p.seconds or 0.0
    return _register(ctx, "until", None, seconds, p.reason)


async def brief(ctx: ToolContext, p: BriefParams) -> str:
    active = ctx.views.working_memory().get("active_work_item")
    ctx.emit(ev.BriefDelivered(kind=p.kind, text=p.text, work_item_id=active), work_item_id=active)
    return f"{p.kind} brief delivered to the operator"


async def spawn_agent(ctx: ToolContext, p: SpawnParams) -> str:
    child, task_id = await ctx.services.spawn_child(ctx.agent_id, p.task, name=p.name, template=p.template)
    return (
        f"started child agent {child} on task {task_id}; its final answer arrives as an input when it "
        "finishes. Use wait (on='task', target=the task id) to wait for it."
    )


async def read_output(ctx: ToolContext, p: ReadOutputParams) -> str:
    if not p.ref.startswith("out:"):
        raise ToolRetry("ref must look like 'out:<call id>', as shown with the truncated output")
    text = ctx.views.tool_output(p.ref[4:])
    if text is None:
        raise ToolRetry(f"no stored output for {p.ref}")
    part = text[p.offset : p.offset + p.length]
    end = p.offset + len(part)
    more = f"; more from offset {end}" if end < len(text) else "; end of output"
    return f"[{p.ref}: characters {p.offset}-{end} of {len(text)}{more}]\n{part}"


MISC_TOOLS = [
    Tool(
        "wait",
        "Wait for a task result, the operator, an external event or a timer, then end your turn. Every "
        "wait has a recheck time: you are woken then even if nothing arrived. "
        'Example: {"on": "task", "target": "task_0193...", "recheck_in_s": 600, "reason": "tests running"}',
        WaitParams,
        wait,
    ),
    Tool(
        "sleep",
        "Pause until a time or for a number of seconds, then end your turn; you are woken then. "
        'Example: {"seconds": 3600, "reason": "check the deploy again in an hour"}',
        SleepParams,
        sleep,
    ),
    Tool(
        "brief",
        "Send the operator a short message: progress on long work, a result, or a question only they "
        'can answer. Example: {"kind": "question", "text": "Deploy to staging or production?"}',
        BriefParams,
        brief,
    ),
    Tool(
        "spawn_agent",
        "Start a child agent for a self-contained subtask. It works in its own workspace (a git worktree "
        "of yours when yours is a git repository) and its answer comes back as a task result. "
        'Example: {"task": "Summarise the open issues in ISSUES.md into five bullets."}',
        SpawnParams,
        spawn_agent,
        timeout_s=30.0,
    ),
    Tool(
        "read_output",
        "Read part of a tool output that was too long to show in full. "
        'Example: {"ref": "out:call_abc", "offset": 8000, "length": 8000}',
        ReadOutputParams,
        read_output,
    ),
]
