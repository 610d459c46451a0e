"""The tool framework: typed parameters, JSON schemas, validation, timeouts and emitted events.

A tool is a name, a description written for the model, a pydantic parameter model and an async
handler ``(ctx, params) -> ToolOutput | str``. A tool whose parameters depend on the agent (the
memory scopes it may write) has a ``specialize`` function giving the tool as one agent sees it;
``ToolRegistry.for_agent`` applies them, so each agent's schemas offer only what it may do (the
handler still checks: a schema is advice to the model, not a permission).

Handlers get a narrow ``ToolContext``: their agent, the clock, their home and workspace,
read-only views of their own state (``Views``), their memory, the host's few services
(``ToolServices``: commands, background tasks, child agents) and ``ctx.emit`` to record events.
They never see the database: what they emit commits atomically with their result.

Errors are signals, not strings: a handler raises ``ToolRetry`` for a problem the model can fix
(bad id, wrong state). Malformed JSON, unknown tools, wrong types, unknown parameters and
timeouts become the same kind of result: a clear message back to the model, recorded in the
ledger, that uses up one of the turn's tool-error allowance. Any other exception is a bug in holon
and ends the turn loudly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from holon.clock import Clock
from holon.ledger.events import Payload, ToolCallSpec, ToolStatus
from holon.projections.state import AgentState, TaskProjection, WorkItemState
from holon.runtime.tasks import CommandOutcome
from holon.runtime.views import AgentMemory

__all__ = [
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolParams",
    "ToolRegistry",
    "ToolRetry",
    "ToolResult",
    "ToolServices",
    "Views",
]


class ToolParams(BaseModel):
    """Base of every tool's parameters: unknown (hallucinated) parameters are refused."""

    model_config = ConfigDict(extra="forbid")


class ToolRetry(Exception):  # a signal, not an error: the model gets another try
    """Raised by a handler when the model should fix its call; the message goes back to it."""


EndTurn = Literal["waiting"]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    text: str
    status: ToolStatus = "ok"
    ends_turn: EndTurn | None = None
    """Set by wait/sleep: the turn settles as waiting after this round."""


@dataclass(frozen=True, slots=True)
class Emitted:
    payload: Payload
    work_item_id: str | None = None
    task_id: str | None = None


class Views(Protocol):
    """Read-only views of the calling agent's own state (``holon.runtime.views.StoreViews``)."""

    def working_memory(self) -> dict[str, Any]: ...
    def work_item(self, work_item_id: str) -> WorkItemState | None: ...
    def work_items(self, *, include_closed: bool = False) -> list[WorkItemState]: ...
    def task(self, task_id: str) -> TaskProjection | None: ...
    def tasks(self) -> list[TaskProjection]: ...
    def blob_text(self, blob_hash: str) -> str | None: ...
    def tool_output(self, call_id: str) -> str | None: ...


class ToolServices(Protocol):
    """What a tool may ask of its host beyond its own agent's views and memory: commands and
    their background tasks, and child agents. ``AgentHost`` implements it;
    ``holon.runtime.tools.services.TaskServices`` gives commands without child agents."""

    def command_refusal(self) -> str | None:
        """Why no command may run at all (the sandbox the operator asked for is unavailable)."""
        ...

    async def run_command(
        self, agent_id: str, home: Path, workspace: Path, cwd: Path, command: str, *, wait_s: float, timeout_s: float
    ) -> CommandOutcome:
        """Run ``command`` in ``cwd``; its result if it ends within ``wait_s``, else a background task."""
        ...

    def live_output(self, task_id: str) -> str | None:
        """A running task's output so far; ``None`` when it is not running here."""
        ...

    def stop_task(self, task_id: str) -> bool:
        """Stop a running task; ``False`` when it is not running."""
        ...

    async def spawn_child(self, parent_id: str, task_text: str, *, name: str | None, template: str) -> tuple[str, str]:
        """Start a child agent on ``task_text``; its name and the parent's task id."""
        ...


@dataclass
class ToolContext:
    agent_id: str
    agent_name: str
    turn_id: str
    clock: Clock
    home: Path
    workspace: Path
    views: Views
    services: ToolServices
    """What the host offers tools: commands, background tasks, child agents."""
    memory: AgentMemory | None = None
    """The agent's memory (MemoryGet, curated files); the turn runner always sets it."""
    emitted: list[Emitted] = field(default_factory=list)

    def emit(self, payload: Payload, *, work_item_id: str | None = None, task_id: str | None = None) -> None:
        """Record an event; it commits atomically with this tool call's result."""
        self.emitted.append(Emitted(payload, work_item_id, task_id))


Handler = Callable[[ToolContext, Any], Awaitable["ToolOutput | str"]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    params: type[ToolParams]
    handler: Handler
    timeout_s: float = 60.0
    specialize: Callable[[AgentState], Tool] | None = None
    """The tool as one agent sees it, when that differs; must return the same object for agents
    that see the same tool, so per-agent registries (and prompt caches) can be reused."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema the model sees."""
        params = self.params.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    call: ToolCall
    status: ToolStatus
    output: str
    duration_ms: float
    emitted: tuple[Emitted, ...] = ()
    ends_turn: EndTurn | None = None

    @property
    def is_error(self) -> bool:
        return self.status != "ok"


def _explain(e: ValidationError) -> str:
    problems = []
    for err in e.errors()[:6]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            problems.append(f"'{where}' is not a parameter of this tool")
        elif err["type"] == "missing":
            problems.append(f"'{where}' is required")
        else:
            problems.append(f"'{where}': {err['msg']}")
    return "; ".join(problems)


class ToolRegistry:
    def __init__(self, tools: list[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        # Tools never change after registration; generating JSON schemas costs milliseconds.
        self._schemas = [self.tools[name].schema() for name in sorted(self.tools)]
        self._variants: dict[tuple[int, ...], ToolRegistry] = {}

    def schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    def for_agent(self, agent: AgentState) -> ToolRegistry:
        """The registry as ``agent`` sees it: specialized tools swapped in (``self`` when none differ).

        Variants are kept, so an agent gets the same registry, and the same schema objects, every
        turn: context assembly caches tool renderings by identity.
        """
        tools = [t.specialize(agent) if t.specialize else t for t in self.tools.values()]
        if all(a is b for a, b in zip(tools, self.tools.values(), strict=True)):
            return self
        key = tuple(id(t) for t in tools)
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = ToolRegistry(tools)
        return variant

    def _parse(self, call: ToolCall) -> tuple[Tool, ToolParams]:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            raise ToolRetry(f"unknown tool {call.name!r}; available tools: {known}")
        raw = call.arguments.strip() or "{}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ToolRetry(f"arguments are not valid JSON ({e.msg} at position {e.pos}); send a JSON object") from e
        except (ValueError, RecursionError) as e:
            # Nested too deeply to parse, or an integer too long to convert: unusable all the same.
            reason = str(e).split(":", 1)[0]
            raise ToolRetry(f"arguments are not valid JSON ({reason}); send a JSON object") from e
        if not isinstance(data, dict):
            raise ToolRetry(f"arguments must be a JSON object, not {type(data).__name__}")
        try:
            return tool, tool.params.model_validate(data)
        except ValidationError as e:
            raise ToolRetry(f"invalid arguments for {tool.name}: {_explain(e)}") from e

    async def execute(self, spec: ToolCallSpec, ctx: ToolContext) -> ToolResult:
        call = ToolCall(spec.call_id, spec.tool, spec.arguments)
        started = asyncio.get_running_loop().time()

        def done(status: ToolStatus, text: str, ends: EndTurn | None = None, *, kept: bool = False) -> ToolResult:
            # Events a handler emitted count only when it returned normally; a refused or
            # timed-out call changes nothing.
            elapsed = (asyncio.get_running_loop().time() - started) * 1000
            emitted = tuple(ctx.emitted) if kept else ()
            return ToolResult(call, status, text, round(elapsed, 3), emitted, ends)

        try:
            tool, params = self._parse(call)
        except ToolRetry as e:
            return done("invalid", str(e))
        try:
            # The handler runs in this task under a deadline (``asyncio.timeout``), not in a task
            # of its own (``wait_for``): no task and no loop pass per call (0.18 ms of a bench
            # turn's three calls; issue 18, step 6). On expiry it is cancelled the same way and
            # ``TimeoutError`` comes out of the block.
            async with asyncio.timeout(tool.timeout_s):
                out = await tool.handler(ctx, params)
        except ToolRetry as e:
            return done("error", str(e))
        except TimeoutError:
            return done("timeout", f"{tool.name} did not finish within {tool.timeout_s:g} s and was stopped")
        if isinstance(out, str):
            out = ToolOutput(out)
        return done(out.status, out.text, out.ends_turn, kept=True)
