"""Commands and background tasks: shell commands, confined, recorded before they run.

``TaskManager`` is a host service, not a tool: it owns the command and task events
(``command.started``, ``task.created``, ``task.state_changed``, ``task.resulted``) and appends them
itself, in order, so a task's result can never precede its creation in the ledger. When a task
ends, ``on_done`` lets the host turn the result into an input for the agent and resolve waits on it.

Every command (RFC 0002, "Commands run confined"):

* runs in a session of its own (a stop kills the whole process group), under a tiny bash runner
  that first waits on a gate (its stdin): the process exists, its identity
  (``pid:start-time:boot-id``) is committed in ``command.started``, and only then is the gate
  opened. If holon dies before that, the gate's pipe closes and the runner exits without running
  anything; after that, recovery finds the identity and stops the process group, whether the
  command was in the foreground or had become a background task;
* writes its output to ``<home>/tasks/<task_id>/output`` and the runner writes the exit code to
  ``exit`` when it ends, so a background task that finished while holon was dead is reported
  with its real result, not ``interrupted``;
* gets a scrubbed environment and runs inside the ``Sandbox`` (``holon.runtime.sandbox``), in the
  agent's workspace or home.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from holon.clock import Clock
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.paths import inherited_umask
from holon.projections import Store
from holon.runtime.sandbox import Sandbox, command_env

__all__ = [
    "CommandOutcome",
    "RunningTask",
    "TaskManager",
    "command_env",
    "finished_result",
    "process_identity",
    "remove_task_files",
    "stop_orphan",
]

OUTPUT_LIMIT = 1_000_000
"""Bytes of output kept per task (the tail, when a command prints more)."""

# The runner: wait for "go" on stdin (holon has recorded the process), run the command with its
# output in a file, then leave the exit code beside it, atomically. Arguments: DIR, then the
# command's argv (the sandbox prefix and ``bash -c CMD``).
_RUNNER = r"""
IFS= read -r go || true
[ "$go" = go ] || exit 125
dir=$1; shift
"$@" </dev/null >"$dir/output" 2>&1
code=$?
printf '%s\n' "$code" >"$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
exit "$code"
"""


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


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def stop_orphan(identity: str) -> bool:
    """Kill the process group of a command whose holon died, if that very process still runs.

    Returns whether it was still running: a leader that already exited but was never reaped (a
    zombie: its holon died and nothing reaps orphans here) counts as ended, though what is left
    of its group is killed all the same."""
    pid = int(identity.split(":", 1)[0])
    if process_identity(pid) != identity:
        return False
    running = not _zombie(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
        return running
    return False


def _tail(path: Path) -> tuple[str, bool]:
    """The last ``OUTPUT_LIMIT`` bytes of a file as text, and whether earlier bytes were dropped."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - OUTPUT_LIMIT))
            data = fh.read(OUTPUT_LIMIT)
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), size > OUTPUT_LIMIT


def _text(directory: Path) -> str:
    body, truncated = _tail(directory / "output")
    return f"[earlier output dropped: kept the last {OUTPUT_LIMIT} bytes]\n{body}" if truncated else body


def finished_result(tasks_dir: Path, task_id: str) -> tuple[int, str] | None:
    """``(exit code, output)`` of a command whose runner recorded its end, else ``None``."""
    directory = tasks_dir / task_id
    try:
        code = int((directory / "exit").read_text().strip())
    except (OSError, ValueError):
        return None
    return code, _text(directory)


def remove_task_files(tasks_dir: Path, task_id: str) -> None:
    shutil.rmtree(tasks_dir / task_id, ignore_errors=True)


@dataclass
class RunningTask:
    task_id: str
    agent_id: str
    command: str
    proc: asyncio.subprocess.Process
    started_us: int
    directory: Path
    stopped: bool = False
    watcher: asyncio.Task[None] | None = None

    def text(self) -> str:
        return _text(self.directory)


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    finished: bool
    exit_code: int | None
    output: str
    task_id: str | None = None


Append = Callable[..., list[Event]]
OnDone = Callable[[str, str], Awaitable[None]]


class TaskManager:
    @classmethod
    def for_store(cls, store: Store, clock: Clock, on_done: OnDone | None = None) -> TaskManager:
        """The manager of a home: files under ``<home>/tasks``, confinement from ``[tools]``."""
        tools = store.settings.tools
        return cls(
            store.append,
            clock,
            on_done,
            tasks_dir=store.paths.root / "tasks",
            sandbox=Sandbox(store.paths.root, tools.isolation, tools.command_wrapper),
            pass_env=tools.pass_env,
        )

    def __init__(
        self,
        append: Append,
        clock: Clock,
        on_done: OnDone | None = None,
        *,
        tasks_dir: Path,
        sandbox: Sandbox,
        pass_env: Sequence[str] = (),
    ) -> None:
        self._append = append
        self._clock = clock
        self._on_done = on_done
        self.tasks_dir = tasks_dir
        self.sandbox = sandbox
        self._pass_env = tuple(pass_env)
        self.running: dict[str, RunningTask] = {}

    async def _start(self, agent_id: str, home: Path, workspace: Path, cwd: Path, command: str) -> RunningTask:
        """Spawn the runner behind its gate, record ``command.started``, then open the gate."""
        task_id = new_id("task")
        directory = self.tasks_dir / task_id
        directory.mkdir(parents=True, mode=0o700)
        argv = [
            "bash",
            "-c",
            _RUNNER,
            "holon-task",
            str(directory),
            *self.sandbox.prefix([home, workspace]),
            "bash",
            "-c",
            command,
        ]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env=command_env(home, self._pass_env),
            # Files the command makes in the operator's workspace keep the operator's umask, not
            # holon's private one; the runner's own files sit in a 0700 directory.
            umask=inherited_umask(),
        )
        task = RunningTask(task_id, agent_id, command, proc, self._clock.now_us(), directory)
        assert proc.stdin is not None
        try:
            started = ev.CommandStarted(task_id=task_id, process=process_identity(proc.pid), sandbox=self.sandbox.mode)
            self._append(NewEvent(agent_id, started, origin="runtime:tasks", authority="runtime", task_id=task_id))
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        except BaseException:
            self._kill(task)
            remove_task_files(self.tasks_dir, task_id)
            raise
        finally:
            proc.stdin.close()
        return task

    async def run_command(
        self, agent_id: str, home: Path, workspace: Path, cwd: Path, command: str, *, wait_s: float, timeout_s: float
    ) -> CommandOutcome:
        """Run ``command`` in ``cwd`` (the caller checked it lies in the agent's home or workspace);
        its result if it ends within ``wait_s``, else it becomes a background task."""
        task = await self._start(agent_id, home, workspace, cwd, command)
        proc = task.proc
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=min(wait_s, timeout_s))
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # the turn was aborted or its agent deleted: the command goes too
            self._kill(task)
            remove_task_files(self.tasks_dir, task.task_id)
            raise
        else:
            output = task.text()
            remove_task_files(self.tasks_dir, task.task_id)
            return CommandOutcome(True, proc.returncode, output)
        # Still running: it becomes a background task whose result comes back as an input.
        self._append(
            NewEvent(
                agent_id,
                ev.TaskCreated(
                    task_id=task.task_id,
                    kind="command",
                    title=command[:200],
                    spec={"command": command, "cwd": str(cwd)},
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
        task.watcher = asyncio.create_task(self._watch(task, timeout_s - wait_s))
        return CommandOutcome(False, None, task.text(), task.task_id)

    async def _watch(self, task: RunningTask, remaining_s: float) -> None:
        state: ev.TaskState
        try:
            await asyncio.wait_for(asyncio.shield(task.proc.wait()), timeout=max(remaining_s, 0.001))
            state = "cancelled" if task.stopped else ("succeeded" if task.proc.returncode == 0 else "failed")
            detail = None
        except TimeoutError:
            self._kill(task)
            await task.proc.wait()
            state, detail = "failed", "timed out after the command's timeout; killed"
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
        remove_task_files(self.tasks_dir, task.task_id)
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

    def drop_agent(self, agent_id: str) -> list[str]:
        """Kill every running task of an agent this process no longer owns (another node took it
        over, RFC 0008) and forget them, recording nothing: this node may not append for the agent
        any more (the database would refuse it), and the new owner's recovery reports the tasks
        interrupted. Returns their ids."""
        ended = []
        for task in [t for t in self.running.values() if t.agent_id == agent_id]:
            if task.watcher is not None:
                task.watcher.cancel()
            task.stopped = True
            self._kill(task)
            self.running.pop(task.task_id, None)
            remove_task_files(self.tasks_dir, task.task_id)
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
        remove_task_files(self.tasks_dir, task.task_id)

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
