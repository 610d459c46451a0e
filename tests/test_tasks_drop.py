"""A node that loses an agent kills its background tasks and records nothing (RFC 0008: the new
owner's recovery reports them interrupted; this node may no longer append for the agent)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from helpers.wait import wait_for

from holon.clock import SystemClock
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.tasks import TaskManager


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie not reaped yet counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_drop_agent_kills_its_background_tasks_and_records_nothing(store: Store) -> None:
    agent = create_agent(store, "ada")
    home = Path(agent.home)
    workspace = Path(agent.workspace) if agent.workspace else home

    async def scenario() -> tuple[list[str], int, int]:
        tasks = TaskManager.for_store(store, SystemClock())
        outcome = await tasks.run_command(agent.agent_id, home, workspace, home, "sleep 60", wait_s=0.05, timeout_s=120)
        assert not outcome.finished and outcome.task_id
        pid = tasks.running[outcome.task_id].proc.pid
        head = store.ledger.head()
        dropped = tasks.drop_agent(agent.agent_id)
        await asyncio.sleep(0)  # let the cancelled watcher go
        assert not tasks.running
        return dropped, pid, head

    dropped, pid, head = asyncio.run(scenario())
    assert len(dropped) == 1
    wait_for("the task's process is gone", lambda: not _alive(pid), timeout=10)
    assert store.ledger.head() == head  # nothing recorded
