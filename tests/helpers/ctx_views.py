"""Building ``TurnView`` s by hand for section tests, and checking the prompts they turn into."""

from __future__ import annotations

import dataclasses
from typing import Any

from holon.context.assembler import Assembly, Budget, ContextOverflow, Section, assemble
from holon.context.render import InputView
from holon.context.view import EpisodeView, HistoryTurn, RoundView, ToolEvidence, TurnView
from holon.projections.state import AgentState, WorkItemState

__all__ = [
    "T0",
    "TOOLS",
    "agent",
    "budget_for",
    "episode",
    "history_turn",
    "inp",
    "make_view",
    "minimum",
    "round_view",
    "sweep",
    "tool_sequence_errors",
    "work_item",
]

T0 = 1_767_225_600_000_000

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a bash command in your workspace. Returns its exit code. Example: ls -la",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command line to run."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_output",
            "description": "Read the full output of an earlier tool call. Example: out:call_1",
            "parameters": {
                "type": "object",
                "properties": {"ref": {"type": "string", "description": "A ref such as out:call_1."}},
                "required": ["ref"],
            },
        },
    },
)


def agent(**fields: Any) -> AgentState:
    base: dict[str, Any] = {
        "agent_id": "agt_test",
        "name": "tester",
        "template": "assistant",
        "home": "/nonexistent/tester",
        "created_us": T0,
        "last_event_us": T0,
    }
    return AgentState(**{**base, **fields})


def inp(seq: int, text: str, authority: str = "operator", origin: str = "operator:cli") -> InputView:
    return InputView(seq, T0 + seq * 1_000_000, authority, origin, text)


def history_turn(
    turn_id: str,
    started_seq: int,
    inputs: tuple[InputView, ...],
    reply: str,
    *,
    thread: str = "conv:1",
    work_item_id: str | None = None,
    outcome: str = "completed",
) -> HistoryTurn:
    """A past turn of ``thread``; fills whichever thread fields ``HistoryTurn`` has."""
    names = {f.name for f in dataclasses.fields(HistoryTurn)}
    values: dict[str, Any] = {
        "turn_id": turn_id,
        "started_seq": started_seq,
        "settled_seq": started_seq + 3,
        "inputs": inputs,
        "reply": reply,
        "outcome": outcome,
        "work_item_id": work_item_id,
        # Older ``HistoryTurn`` s carried the work item as ``thread`` (None in conversation).
        "thread": thread if "work_item_id" in names else work_item_id,
    }
    return HistoryTurn(**{k: v for k, v in values.items() if k in names})


def work_item(work_item_id: str, title: str, objective: str = "", status: str = "open") -> WorkItemState:
    return WorkItemState(
        work_item_id=work_item_id,
        agent_id="agt_test",
        title=title,
        objective=objective,
        status=status,  # type: ignore[arg-type]
        opened_seq=1,
        opened_us=T0,
        updated_us=T0,
    )


def episode(
    episode_id: str, seq: int, topic: str, summary: str, work_item_id: str | None = None, boundary: str = "idle_gap"
) -> EpisodeView:
    return EpisodeView(episode_id, seq, seq - 10, seq - 1, work_item_id, topic, summary, boundary)


def round_view(index: int, n_calls: int = 1, output_chars: int = 600, base_seq: int = 100) -> RoundView:
    calls = tuple(
        ToolEvidence(
            call_id=f"call_{index}_{j}",
            tool="run_command" if j % 2 == 0 else "read_output",
            arguments=f'{{"command": "make step{index}-{j}"}}',
            status="ok",
            output=f"exit code: 0\nstep {index}.{j} " + "lorem ipsum dolor sit amet " * (output_chars // 27),
            called_seq=base_seq + index * 10,
            result_seq=base_seq + index * 10 + 1 + j,
        )
        for j in range(n_calls)
    )
    return RoundView(index, f"Round {index}: running steps." if index % 2 else None, calls)


def make_view(**fields: Any) -> TurnView:
    base: dict[str, Any] = {
        "agent": agent(),
        "agents_md": "# AGENTS.md\nBe careful. Keep answers short.",
        "memory_files": (),
        "tools": TOOLS,
        "working_memory": {},
        "work_item": None,
        "open_items": (),
        "thread": "conv:1",
        "key_points": (),
        "history": (),
        "episodes": (),
        "tasks": (),
        "waits": (),
        "inputs": (inp(50, "hello"),),
        "last_turn": None,
    }
    return TurnView(**{**base, **fields})


def budget_for(limit: int, reserve: int = 512) -> Budget:
    return Budget(context_window=limit + reserve + 8, output_reserve=reserve)


def minimum(sections: list[Section]) -> int:
    """The pinned minimum: the smallest budget limit at which the sections assemble."""
    return sum(s.renderings[-1].tokens for s in sections if s.pinned and not s.excluded)


def sweep(sections: list[Section], steps: int = 40) -> list[Assembly]:
    """Assemblies from the pinned minimum up to everything in full (about ``steps`` budgets)."""
    low = minimum(sections)
    high = sum(s.renderings[0].tokens for s in sections if not s.excluded)
    out = []
    for limit in sorted({low, high, *range(low, high + 1, max(1, (high - low) // steps))}):
        try:
            out.append(assemble(sections, budget_for(limit)))
        except ContextOverflow as e:  # pragma: no cover - a failure of the property under test
            raise AssertionError(f"limit {limit} >= pinned minimum {low} was refused") from e
    return out


def tool_sequence_errors(messages: list[dict[str, Any]]) -> list[str]:
    """Problems with tool messages: each ``tool`` message must answer a call of the assistant
    ``tool_calls`` message right before its group, and every such call must be answered there."""
    errors = []
    pending: set[str] | None = None
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            if pending is None or m.get("tool_call_id") not in pending:
                errors.append(f"message {i}: tool result {m.get('tool_call_id')} without its call")
            else:
                pending.discard(m["tool_call_id"])
            continue
        if pending:
            errors.append(f"message {i}: calls {sorted(pending)} have no result")
        pending = None
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            if len(set(ids)) != len(ids):
                errors.append(f"message {i}: duplicate call ids")
            pending = set(ids)
    if pending:
        errors.append(f"end: calls {sorted(pending)} have no result")
    return errors
