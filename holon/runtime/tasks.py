"""Background tasks: shell commands that outlive a short wait.

``TaskManager`` is a host service, not a tool: it owns the task events (``task.created``,
``task.state_changed``, ``task.resulted``) and appends them itself, in order, so a task's result
can never precede its creation in the ledger. When a task ends, ``on_done`` lets the host turn the
result into an input for the agent and resolve waits on it.

Commands run in the agent's workspace, in a session of their own (so a stop kills the whole
process group), with secret-looking variables removed from their environment: an agent that runs
``env`` must not copy API keys into the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from holon.clock import Clock
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev

__all__ = ["CommandOutcome", "RunningTask", "TaskManager", "command_env", "process_identity", "stop_orphan"]

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)
OUTPUT_LIMIT = 1_000_000
"""Bytes of output kept per task (the tail, when a command prints more)."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def process_identity(pid: int) -> str | None:
    """``pid:start-time:boot-id``: names one process for good, even after its pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return f"{pid}:{fields[19]}:{_boot_id()}"


def stop_orphan(identity: str) -> bool:
    """Kill the process group of a task whose holon died, if that very process still runs."""
    pid = int(identity.split(":", 1)[0])
    if process_identity(pid) != identity:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
        return True
    return False


def command_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k)}


@dataclass
class RunningTask:
    task_id: str
    agent_id: str
    command: str
    proc: asyncio.subprocess.Process
    started_us: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    stopped: bool = False
    watcher: asyncio.Task[None] | None = None

    def text(self) -> str:
        body = self.output.decode("utf-8", errors="replace")
        return f"[earlier output dropped: kept the last {OUTPUT_LIMIT} bytes]\n{body}" if self.truncated else body


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    finished: bool
    exit_code: int | None
    output: str
    task_id: str | None = None


Append = Callable[..., list[Event]]
OnDone = Callable[[str, str], Awaitable[None]]


class TaskManager:
    def __init__(self, append: Append, clock: Clock, on_done: OnDone | None = None) -> None:
        self._append = append
        self._clock = clock
        self._on_done = on_done
        self.running: dict[str, RunningTask] = {}

    async def _pump(self, task: RunningTask) -> None:
        assert task.proc.stdout is not None
        while chunk := await task.proc.stdout.read(65_536):
            task.output += chunk
            if len(task.output) > OUTPUT_LIMIT:
                del task.output[: len(task.output) - OUTPUT_LIMIT]
                task.truncated = True

    async def run_command(
        self, agent_id: str, workspace: Path, command: str, *, wait_s: float, timeout_s: float
    ) -> CommandOutcome:
        proc = await asyncio.create_subprocess_shell(
            command,
            cwd=workspace,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            env=command_env(),
        )
        task = RunningTask(new_id("task"), agent_id, command, proc, self._clock.now_us())
        pump = asyncio.create_task(self._pump(task))
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=min(wait_s, timeout_s))
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # the turn was aborted or its agent deleted: the command goes too
            self._kill(task)
            raise
        else:
            await pump
            return CommandOutcome(True, proc.returncode, task.text())
        # Still running: it becomes a background task whose result comes back as an input.
        self._append(
            NewEvent(
                agent_id,
                ev.TaskCreated(
                    task_id=task.task_id,
                    kind="command",
                    title=command[:200],
                    spec={"command": command, "cwd": str(workspace)},
                ),
                origin=f"agent:{agent_id}",
                authority="agent",
                task_id=task.task_id,
            ),
            NewEvent(
                agent_id,
                ev.TaskStateChanged(
                    task_id=task.task_id, state="running", detail=f"pid {proc.pid} process {process_identity(proc.pid)}"
                ),
                origin="runtime:tasks",
                task_id=task.task_id,
            ),
        )
        self.running[task.task_id] = task
        task.watcher = asyncio.create_task(self._watch(task, pump, timeout_s - wait_s))
        return CommandOutcome(False, None, task.text(), task.task_id)

    async def _watch(self, task: RunningTask, pump: asyncio.Task[None], remaining_s: float) -> None:
        state: ev.TaskState
        try:
            await asyncio.wait_for(asyncio.shield(task.proc.wait()), timeout=max(remaining_s, 0.001))
            state = "cancelled" if task.stopped else ("succeeded" if task.proc.returncode == 0 else "failed")
            detail = None
        except TimeoutError:
            self._kill(task)
            await task.proc.wait()
            state, detail = "failed", "timed out after the command's timeout; killed"
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pump, timeout=5)
        output = task.text() + (f"\n[{detail}]" if detail else "")
        self._append(
            NewEvent(
                task.agent_id,
                ev.TaskResulted(task_id=task.task_id, state=state, output=output, exit_code=task.proc.returncode),
                origin=f"task:{task.task_id}",
                authority="tool",
                task_id=task.task_id,
            )
        )
        self.running.pop(task.task_id, None)
        if self._on_done is not None:
            await self._on_done(task.agent_id, task.task_id)

    @staticmethod
    def _kill(task: RunningTask) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.proc.pid, signal.SIGKILL)

    def stop(self, task_id: str) -> bool:
        task = self.running.get(task_id)
        if task is None:
            return False
        task.stopped = True
        self._kill(task)
        return True

    def cancel_agent(self, agent_id: str, reason: str) -> list[str]:
        """Kill every running task of one agent and record each ``cancelled`` at once, with no
        ``on_done``: the agent is being deleted, so there is nobody to tell. Returns their ids.

        Synchronous (the kill is a signal to the task's process group; asyncio reaps it), so an
        agent's deletion is one step of the loop with nothing of it left running afterwards."""
        ended = []
        for task in [t for t in self.running.values() if t.agent_id == agent_id]:
            if task.watcher is not None:
                task.watcher.cancel()
            task.stopped = True
            self._kill(task)
            self._record_end(task, "cancelled", reason)
            ended.append(task.task_id)
        return ended

    def _record_end(self, task: RunningTask, state: Literal["cancelled", "interrupted"], reason: str) -> None:
        """Record a task this manager ended itself (no ``on_done`` runs) and forget it."""
        self._append(
            NewEvent(
                task.agent_id,
                ev.TaskResulted(task_id=task.task_id, state=state, output=task.text() + f"\n[{reason}]"),
                origin="runtime:tasks",
                authority="runtime",
                task_id=task.task_id,
            )
        )
        self.running.pop(task.task_id, None)

    def live_output(self, task_id: str) -> str | None:
        task = self.running.get(task_id)
        return None if task is None else task.text()

    async def shutdown(self, reason: str = "holon stopped before the task finished") -> list[str]:
        """Kill every running task and record it as interrupted. Returns their ids, oldest first.

        The caller (the host) tells each task's agent, as recovery does after a crash: the result
        must reach the agent even though no ``on_done`` runs any more."""
        stopped = []
        for task in list(self.running.values()):
            if task.watcher is not None:
                task.watcher.cancel()
            self._kill(task)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task.proc.wait(), timeout=5)
            self._record_end(task, "interrupted", reason)
            stopped.append(task.task_id)
        return stopped
