"""``TaskServices``: the tool services of a turn run without an agent host (``holon diagnose``,
``holon bench turn``): commands and background tasks, no child agents."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from holon.runtime.tasks import CommandOutcome, TaskManager
from holon.runtime.tools.base import ToolRetry

__all__ = ["TaskServices"]


@dataclass(frozen=True, slots=True)
class TaskServices:
    """``ToolServices`` over a ``TaskManager``; ``spawn_agent`` is refused (there is no host to run a child)."""

    tasks: TaskManager

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
        raise ToolRetry("child agents are not available here")
