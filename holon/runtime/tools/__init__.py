"""Tools agents call. ``builtin_registry()`` gives every built-in tool.

The tool modules load with the first registry (``builtin_registry``), not with this package: the
daemon imports the package's types at start and builds a registry only for its first turn.
"""

import functools

from holon.runtime.tools.base import (
    Tool,
    ToolContext,
    ToolOutput,
    ToolParams,
    ToolRegistry,
    ToolResult,
    ToolRetry,
    ToolServices,
)
from holon.runtime.tools.services import TaskServices

__all__ = [
    "TaskServices",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolParams",
    "ToolRegistry",
    "ToolResult",
    "ToolRetry",
    "ToolServices",
    "builtin_registry",
]


def builtin_registry(*, exclude: frozenset[str] = frozenset()) -> ToolRegistry:
    """Every built-in tool but ``exclude``: one registry per ``exclude`` and process (tools never
    change; importing their modules and building their JSON schemas took ~50 ms of the first
    turn, on the daemon's loop, before ``holon.daemon.warm`` built it in its thread)."""
    return _builtin(frozenset(exclude))


@functools.cache
def _builtin(exclude: frozenset[str]) -> ToolRegistry:
    from holon.runtime.tools.commands import COMMAND_TOOLS
    from holon.runtime.tools.memory import MEMORY_TOOLS
    from holon.runtime.tools.misc import MISC_TOOLS
    from holon.runtime.tools.work import WORK_TOOLS

    tools = (*WORK_TOOLS, *COMMAND_TOOLS, *MISC_TOOLS, *MEMORY_TOOLS)
    return ToolRegistry([t for t in tools if t.name not in exclude])
