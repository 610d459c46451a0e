"""Command tools: run a shell command; follow, read and stop the background tasks it becomes."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from holon.projections.state import TaskProjection
from holon.runtime.tools.base import Tool, ToolContext, ToolOutput, ToolParams, ToolRetry

__all__ = ["COMMAND_TOOLS"]


class RunParams(ToolParams):
    command: str = Field(min_length=1, max_length=20_000, description="A bash command line.")
    wait_s: float = Field(10.0, ge=0, le=60, description="How long to wait before it becomes a background task.")
    timeout_s: float = Field(600.0, gt=0, le=86_400, description="Kill the command after this long.")
    cwd: str | None = Field(
        None,
        max_length=4_096,
        description="Directory to run in, relative to your workspace; must stay inside it or your home.",
    )


class TaskParams(ToolParams):
    task_id: str


class OutputParams(ToolParams):
    task_id: str
    tail_lines: int = Field(60, ge=1, le=2_000)


class NoParams(ToolParams):
    pass


def _tail(text: str, lines: int) -> str:
    parts = text.splitlines()
    return "\n".join(parts[-lines:]) if len(parts) > lines else text


def _confined_cwd(ctx: ToolContext, cwd: str | None) -> Path:
    """The command's working directory: the workspace, or a directory inside it or the agent's home."""
    if cwd is not None and "\0" in cwd:
        raise ToolRetry("cwd must not contain NUL")
    try:
        roots = [ctx.workspace.resolve(), ctx.home.resolve()]
        target = (ctx.workspace / (cwd or ".")).resolve()
        if not any(target == root or target.is_relative_to(root) for root in roots):
            raise ToolRetry(f"cwd {cwd!r} is outside your workspace ({roots[0]}) and your home ({roots[1]})")
        if not target.is_dir():
            raise ToolRetry(f"cwd {cwd!r} is not a directory")
    except OSError as e:
        raise ToolRetry(f"cwd {cwd!r} cannot be used: {e.strerror}") from e
    return target


async def run_command(ctx: ToolContext, p: RunParams) -> ToolOutput:
    if (refusal := ctx.services.command_refusal()) is not None:
        raise ToolRetry(refusal)
    cwd = _confined_cwd(ctx, p.cwd)
    out = await ctx.services.run_command(
        ctx.agent_id, ctx.home, ctx.workspace, cwd, p.command, wait_s=p.wait_s, timeout_s=p.timeout_s
    )
    if out.finished:
        return ToolOutput(f"exit code: {out.exit_code}\n{out.output}")
    return ToolOutput(
        f"still running after {p.wait_s:g} s: it is now background task {out.task_id}. Its result will "
        f"arrive as an input when it ends; use wait (on='task') to wait for it, task_output to peek.\n"
        f"output so far:\n{_tail(out.output, 20)}"
    )


def _task(ctx: ToolContext, task_id: str) -> TaskProjection:
    task = ctx.views.task(task_id)
    if task is None:
        raise ToolRetry(f"no task {task_id!r}; task_list shows yours")
    return task


async def task_status(ctx: ToolContext, p: TaskParams) -> str:
    t = _task(ctx, p.task_id)
    code = t.exit_code
    return f"task {p.task_id}: {t.state}" + (f", exit code {code}" if code is not None else "")


async def task_output(ctx: ToolContext, p: OutputParams) -> str:
    t = _task(ctx, p.task_id)
    live = ctx.services.live_output(p.task_id)
    if live is not None:
        return f"task {p.task_id} is running; last {p.tail_lines} lines:\n{_tail(live, p.tail_lines)}"
    output = t.output
    if output is not None and not isinstance(output, str):
        output = ctx.views.blob_text(output.blob) or f"[output pruned; preview]\n{output.preview}"
    return f"task {p.task_id} is {t.state}; last {p.tail_lines} lines:\n{_tail(output or '', p.tail_lines)}"


async def task_stop(ctx: ToolContext, p: TaskParams) -> str:
    _task(ctx, p.task_id)
    if not ctx.services.stop_task(p.task_id):
        raise ToolRetry(f"task {p.task_id} is not running")
    return f"stopping task {p.task_id}; its result (cancelled) will arrive as an input"


async def task_list(ctx: ToolContext, p: NoParams) -> str:
    tasks = ctx.views.tasks()
    if not tasks:
        return "no tasks"
    return "\n".join(f"{t.task_id} [{t.state}] {t.title}" for t in tasks[-30:])


COMMAND_TOOLS = [
    Tool(
        "run_command",
        "Run a bash command in your workspace. Returns its exit code and output when it finishes "
        "within wait_s; otherwise it keeps running as a background task and its result arrives later "
        'as an input. Example: {"command": "pytest -q", "wait_s": 30}',
        RunParams,
        run_command,
        timeout_s=90.0,
    ),
    Tool(
        "task_status",
        'State and exit code of a background task. Example: {"task_id": "task_0193..."}',
        TaskParams,
        task_status,
    ),
    Tool(
        "task_output",
        'The last lines of a background task\'s output, live or final. Example: {"task_id": "task_0193...", "tail_lines": 40}',
        OutputParams,
        task_output,
    ),
    Tool("task_stop", 'Stop a running background task. Example: {"task_id": "task_0193..."}', TaskParams, task_stop),
    Tool("task_list", "Your background tasks and their states, newest last. Example: {}", NoParams, task_list),
]
