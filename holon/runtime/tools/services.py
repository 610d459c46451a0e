"""``TaskServices``: the tool services (``ToolServices``) over a ``TaskManager``: commands and
background tasks, and child agents when a host gives a way to spawn them (``AgentHost`` does;
``holon diagnose`` and ``holon bench turn`` run turns without one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from holon.runtime.tasks import CommandOutcome, TaskManager
from holon.runtime.tools.base import ToolRetry

__all__ = ["TaskServices"]


@dataclass(frozen=True, slots=True)
class TaskServices:
    """``ToolServices`` over a ``TaskManager``; without ``spawn`` the ``spawn_agent`` tool is refused
    (there is no host to run a child)."""

    tasks: TaskManager
    spawn: Callable[[str, str, str | None, str], Awaitable[tuple[str, str]]] | None = None
    """``(parent_id, task_text, name, template) -> (child name, task id)``."""

    def command_refusal(self) -> str | None:
        return self.tasks.sandbox.refusal

    async def run_command(
        self, agent_id: str, home: Path, workspace: Path, cwd: Path, command: str, *, wait_s: float, timeout_s: float
    ) -> CommandOutcome:
        return await self.tasks.run_command(agent_id, home, workspace, cwd, command, wait_s=wait_s, timeout_s=timeout_s)

    def live_output(self, task_id: str) -> str | None:
        return self.tasks.live_output(task_id)

    def stop_task(self, task_id: str) -> bool:
        return self.tasks.stop(task_id)

    async def spawn_child(self, parent_id: str, task_text: str, *, name: str | None, template: str) -> tuple[str, str]:
        if self.spawn is None:
            raise ToolRetry("child agents are not available here")
        return await self.spawn(parent_id, task_text, name, template)
