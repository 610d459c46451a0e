"""A scripted in-process provider for pure unit tests: no HTTP, no litellm.

Each step is a ``ModelReply`` (returned), a ``ModelError`` (raised) or a function of the request
returning a reply (sync or async; it may raise). Requests are recorded in ``.requests``::

    provider = ScriptedProvider([tool_call("read_file", {"path": "a.txt"}), reply("done")])
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from holon.errors import ModelError
from holon.ledger.events import ToolCallSpec, Usage
from holon.runtime.providers.base import ModelReply, ModelRequest, TextSink

__all__ = ["ScriptStep", "ScriptedProvider", "reply", "tool_call", "tool_calls"]

ScriptStep = ModelReply | ModelError | Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]]

_call_ids = itertools.count(1)


class ScriptedProvider:
    """``Provider`` that plays back ``steps`` in order, one per ``complete()`` call."""

    def __init__(self, steps: Iterable[ScriptStep] = ()) -> None:
        self._steps: list[ScriptStep] = list(steps)
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def add(self, *steps: ScriptStep) -> None:
        self._steps.extend(steps)

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        self.requests.append(request)
        if not self._steps:
            raise ModelError(f"{request.settings.model}: script exhausted", kind="bad_request")
        step = self._steps.pop(0)
        if isinstance(step, ModelError):
            raise step
        if isinstance(step, ModelReply):
            result = step
        else:
            produced = step(request)
            result = await produced if inspect.isawaitable(produced) else produced
        if on_text is not None and result.content:
            # Word-sized fragments, as a streaming server would send them.
            for fragment in re.findall(r"\s+|\S+\s*", result.content):
                on_text(fragment)
        return result


def reply(text: str, *, usage: Usage | None = None, model: str = "scripted", finish_reason: str = "stop") -> ModelReply:
    """A plain text reply."""
    return ModelReply(content=text, tool_calls=[], finish_reason=finish_reason, usage=usage or Usage(), model=model)


def tool_call(
    name: str,
    arguments: dict[str, Any] | str,
    call_id: str | None = None,
    *,
    content: str | None = None,
    usage: Usage | None = None,
    model: str = "scripted",
) -> ModelReply:
    """A reply calling one tool. ``arguments`` is a dict (sent as JSON) or a raw, possibly bad, string."""
    return tool_calls((name, arguments, call_id), content=content, usage=usage, model=model)


def tool_calls(
    *calls: tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str | None],
    content: str | None = None,
    usage: Usage | None = None,
    model: str = "scripted",
) -> ModelReply:
    """A reply calling several tools at once: ``tool_calls(("a", {...}), ("b", "{...}", "id"))``."""
    specs = []
    for call in calls:
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) > 2 else None
        specs.append(
            ToolCallSpec(
                call_id=call_id or f"call_{next(_call_ids)}",
                tool=name,
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    return ModelReply(
        content=content, tool_calls=specs, finish_reason="tool_calls", usage=usage or Usage(), model=model
    )
