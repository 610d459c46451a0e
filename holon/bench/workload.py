"""A deterministic, realistic stream of agent events for benchmarks.

Each simulated turn looks like a real one: an operator message, turn start, a model request and a
response asking for tools, three tool calls with results of varied size, now and then work-item,
todo, decision, file and task events, and the turn's settlement. Agents take turns round-robin.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from holon.ids import new_id
from holon.ledger import NewEvent
from holon.ledger import events as ev

if TYPE_CHECKING:
    from holon.projections import Store

__all__ = ["agent_ids", "conversation_turn", "creation_events", "stream", "take_inputs", "turn_events"]

_WORDS = [
    "ledger",
    "projection",
    "agent",
    "episode",
    "budget",
    "context",
    "memory",
    "search",
    "tool",
    "result",
    "plan",
    "todo",
    "wait",
    "timer",
    "operator",
    "brief",
    "shell",
    "command",
    "file",
    "parser",
    "config",
    "daemon",
    "schedule",
    "retry",
    "latency",
    "token",
    "cache",
    "prefix",
    "review",
    "deploy",
    "migrate",
    "index",
    "query",
    "refactor",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def agent_ids(n: int) -> list[str]:
    return [f"agt_bench{i:04d}" for i in range(n)]


def creation_events(n: int) -> list[NewEvent]:
    return [
        NewEvent(
            a, ev.AgentCreated(name=f"bench-{i}", home=f"/tmp/bench/{i}"), origin="operator:bench", authority="operator"
        )
        for i, a in enumerate(agent_ids(n))
    ]


def turn_events(agent_id: str, turn: int, rng: random.Random) -> list[NewEvent]:
    """About a dozen events of one turn."""
    tid = f"turn_{agent_id}_{turn}"
    wi = f"wi_{agent_id}_{turn // 10}"
    out: list[NewEvent] = [
        NewEvent(
            agent_id,
            ev.MessageReceived(text=_text(rng, rng.randint(5, 40))),
            origin="operator:cli",
            authority="operator",
        ),
        NewEvent(agent_id, ev.TurnStarted(turn_id=tid), turn_id=tid, work_item_id=wi),
    ]
    if turn % 10 == 0:
        out.append(
            NewEvent(
                agent_id,
                ev.WorkItemOpened(
                    work_item_id=wi,
                    title=_text(rng, 4),
                    objective=_text(rng, 12),
                    plan=[_text(rng, 5) for _ in range(3)],
                ),
                origin=f"agent:{agent_id}",
                authority="agent",
                turn_id=tid,
                work_item_id=wi,
            )
        )
    calls = [
        ev.ToolCallSpec(call_id=f"{tid}_c{i}", tool="run_command", arguments='{"cmd": "ls -la"}') for i in range(3)
    ]
    out.append(
        NewEvent(
            agent_id, ev.ModelRequested(turn_id=tid, round=0, model="openai/bench", messages=12, tools=8), turn_id=tid
        )
    )
    out.append(
        NewEvent(
            agent_id,
            ev.ModelResponded(
                turn_id=tid,
                round=0,
                model="openai/bench",
                content=_text(rng, rng.randint(10, 80)),
                tool_calls=calls,
                finish_reason="tool_calls",
                usage=ev.Usage(prompt_tokens=1800, completion_tokens=120, total_tokens=1920),
                latency_ms=850.0,
            ),
            origin="runtime:model",
            turn_id=tid,
        )
    )
    for call in calls:
        out.append(
            NewEvent(
                agent_id,
                ev.ToolCalled(call_id=call.call_id, tool=call.tool, arguments=call.arguments),
                origin=f"agent:{agent_id}",
                authority="agent",
                turn_id=tid,
            )
        )
        out.append(
            NewEvent(
                agent_id,
                ev.ToolResulted(
                    call_id=call.call_id,
                    tool=call.tool,
                    status="ok",
                    output=_text(rng, rng.randint(20, 300)),
                    duration_ms=12.5,
                ),
                origin="tool:run_command",
                authority="tool",
                turn_id=tid,
            )
        )
    extra = turn % 4
    if extra == 0:
        out.append(
            NewEvent(
                agent_id,
                ev.TodoChanged(work_item_id=wi, op="add", todo_id=f"td{turn}", text=_text(rng, 6)),
                turn_id=tid,
                work_item_id=wi,
            )
        )
    elif extra == 1:
        out.append(NewEvent(agent_id, ev.FileTouched(path=f"src/{rng.choice(_WORDS)}.py"), turn_id=tid))
    elif extra == 2:
        out.append(NewEvent(agent_id, ev.DecisionRecorded(text=_text(rng, 10), work_item_id=wi), turn_id=tid))
    else:
        out.append(
            NewEvent(
                agent_id,
                ev.TaskCreated(task_id=f"task_{tid}", title=_text(rng, 4), spec={"cmd": "pytest -q"}),
                turn_id=tid,
            )
        )
    out.append(
        NewEvent(
            agent_id,
            ev.TurnSettled(turn_id=tid, outcome="completed", rounds=2, tool_calls=3, reply=_text(rng, 30)),
            turn_id=tid,
        )
    )
    return out


def stream(n_agents: int, seed: int = 7) -> Iterator[NewEvent]:
    """An endless round-robin stream of turns across ``n_agents`` agents."""
    rng = random.Random(seed)
    ids = agent_ids(n_agents)
    turn = 0
    while True:
        for a in ids:
            yield from turn_events(a, turn, rng)
        turn += 1


def take_inputs(chunk: list[NewEvent], head: int, waiting: dict[str, list[int]]) -> list[NewEvent]:
    """``chunk`` (appended in one call on a ledger whose head is ``head``) with each turn taking
    the inputs its agent received before it, as the runner records turns.

    ``stream`` cannot know the seqs its messages will get, so its ``turn.started`` events take no
    input; appended as they are, every agent's pending inputs (its projection row) grow without
    bound: 4 KB per agent row after 72k events, rewritten three times per turn, which made each
    round of ``bench ledger`` slower than the last. ``waiting`` (agent -> received, not yet taken)
    carries over from chunk to chunk; an ``append`` gives its events consecutive seqs from
    ``head + 1`` (the stream has no idempotency keys).
    """
    out = []
    for i, ne in enumerate(chunk):
        p = ne.payload
        if isinstance(p, ev.MessageReceived):
            waiting.setdefault(ne.agent_id, []).append(head + 1 + i)
        elif isinstance(p, ev.TurnStarted):
            out.append(replace(ne, payload=p.model_copy(update={"inputs": waiting.pop(ne.agent_id, [])})))
            continue
        out.append(ne)
    return out


def conversation_turn(
    store: Store, agent_id: str, rng: random.Random, i: int, *, settle: bool = True
) -> tuple[list[int], int]:
    """One settled operator-agent exchange of ``agent_id``, as the runner records it.

    Returns (the input's seq, the ``turn.started`` seq).
    """
    msg = store.append(
        NewEvent(
            agent_id,
            ev.MessageReceived(text=f"request {i}: {_text(rng, 18)}"),
            origin="operator:bench",
            authority="operator",
        )
    )[0]
    turn_id = new_id("turn")
    started = store.append(NewEvent(agent_id, ev.TurnStarted(turn_id=turn_id, inputs=[msg.seq]), turn_id=turn_id))[0]
    if settle:
        reply = ev.TurnSettled(turn_id=turn_id, outcome="completed", reply=f"done {i}: {_text(rng, 30)}")
        store.append(NewEvent(agent_id, reply, turn_id=turn_id))
    return [msg.seq], started.seq
