"""Tools agents call. ``builtin_registry()`` gives every built-in tool."""

from holon.runtime.tools.base import Tool, ToolContext, ToolOutput, ToolParams, ToolRegistry, ToolResult, ToolRetry
from holon.runtime.tools.commands import COMMAND_TOOLS
from holon.runtime.tools.misc import MISC_TOOLS
from holon.runtime.tools.work import WORK_TOOLS

__all__ = [
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolParams",
    "ToolRegistry",
    "ToolResult",
    "ToolRetry",
    "builtin_registry",
]


def builtin_registry(*, exclude: frozenset[str] = frozenset()) -> ToolRegistry:
    return ToolRegistry([t for t in (*WORK_TOOLS, *COMMAND_TOOLS, *MISC_TOOLS) if t.name not in exclude])
