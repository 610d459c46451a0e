"""``holon bench context``: assembly latency on a large ledger, and prompt-prefix stability.

Latency covers everything a turn does to build its prompt: ``gather`` (projection reads and
bounded ledger walks), ``build_sections`` and ``assemble``, with one ``TokenCounter`` kept across
turns as the runner keeps it. The ledger holds about 1,000,000 events over 100 agents; the
measured agent has a long history of its own (turns with inputs and replies, work items,
episodes). Each sample is a new turn: an operator message and a ``turn.started`` are appended
(untimed), then the prompt is assembled (timed).

Prefix stability runs a 200-turn scripted conversation and counts the consecutive turns whose
stable prefix (system text plus tool schemas) is byte-identical.
"""

from __future__ import annotations

import itertools
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from holon.bench import workload
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.context.assembler import Budget, assemble
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.tools import builtin_registry

__all__ = ["TARGETS", "format_report", "run_context_bench"]

TARGETS = {"p95_ms_128k": 10.0, "prefix_stability": 0.95}
METHOD = (
    "One Store with ~{events:,} events over 100 agents; the measured agent has up to {own_turns:,} settled "
    "turns of its own (with work items), spread among the others' realistic turns. Per budget "
    "(8k/32k/128k) {samples} samples: an operator message and turn.started appended (untimed), then "
    "gather + build_sections + assemble timed with time.perf_counter (wall) and time.process_time "
    "(cpu_ms_p50_*: on a shared machine wall time also counts waiting for a core), one TokenCounter "
    "kept across turns; p50 and p95 per budget. prefix_stability: a new agent per budget, {stability_turns} "
    "scripted turns; the share of consecutive turns whose stable prefix (system text and tool "
    "schemas) is byte-identical, lowest over the budgets."
)
BUDGETS = {"8k": 8_192, "32k": 32_768, "128k": 131_072}
N_AGENTS = 100
_WORDS = [
    "deploy",
    "review",
    "ledger",
    "budget",
    "invoice",
    "migration",
    "schema",
    "parser",
    "latency",
    "cache",
    "token",
    "retry",
    "queue",
    "index",
]


def _say(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _turn(store: Store, agent_id: str, rng: random.Random, i: int, *, settle: bool = True) -> tuple[list[int], int]:
    return workload.conversation_turn(store, agent_id, rng, i, settle=settle)


def _fill(store: Store, agent_id: str, events: int, own_turns: int) -> None:
    rng = random.Random(11)
    store.append(*workload.creation_events(N_AGENTS - 1))
    others = workload.stream(N_AGENTS - 1)
    per = max(1, (events // max(own_turns, 1)))
    for i in range(own_turns):
        if i % 25 == 0:
            wid = f"wi_bench_{i}"
            store.append(
                NewEvent(
                    agent_id,
                    ev.WorkItemOpened(work_item_id=wid, title=_say(rng, 3), objective=_say(rng, 10)),
                    work_item_id=wid,
                )
            )
        _turn(store, agent_id, rng, i)
        step(f"filling a ledger of {events:,} events", store.ledger.head(), events)
        if i % 25 == 24:
            store.append(
                NewEvent(agent_id, ev.WorkItemCompleted(work_item_id=f"wi_bench_{i - 24}", report=_say(rng, 20)))
            )
        batch = list(itertools.islice(others, per))
        for j in range(0, len(batch), 1_000):
            store.append(*batch[j : j + 1_000])
        if store.ledger.head() >= events:
            break
    while store.ledger.head() < events:
        step(f"filling a ledger of {events:,} events", store.ledger.head(), events)
        batch = list(itertools.islice(others, 1_000))
        store.append(*batch)


def _latency(
    store: Store, agent_id: str, window: int, samples: int, counter: TokenCounter
) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of each sample's assembly."""
    rng = random.Random(window)
    tools = builtin_registry().schemas()
    budget = Budget(context_window=window, output_reserve=min(4_096, window // 4))
    out, cpu = [], []
    for i in range(samples):
        inputs, started = _turn(store, agent_id, rng, 100_000 + i, settle=False)
        t0, c0 = time.perf_counter(), time.process_time()
        view = gather(store, agent_id, inputs=inputs, started_seq=started, tools=tools)
        assemble(build_sections(view, counter), budget)
        out.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        store.append(NewEvent(agent_id, ev.TurnSettled(turn_id=f"bench_{window}_{i}", outcome="completed", reply="ok")))
    return out, cpu


def _stability(store: Store, window: int, turns: int) -> float:
    agent = create_agent(store, f"prefix-{window}", origin="operator:bench")
    rng = random.Random(5)
    tools = builtin_registry().schemas()
    counter = TokenCounter("gpt-4o")
    budget = Budget(context_window=window, output_reserve=min(4_096, window // 4))
    prefixes = []
    for i in range(turns):
        inputs, started = _turn(store, agent.agent_id, rng, i, settle=False)
        a = assemble(
            build_sections(gather(store, agent.agent_id, inputs=inputs, started_seq=started, tools=tools), counter),
            budget,
        )
        prefixes.append((a.stable_prefix, repr(a.tools)))
        state = store.agent_state(agent.agent_id)
        turn_id = (state.current_turn_id if state is not None else None) or "t"
        store.append(
            NewEvent(
                agent.agent_id,
                ev.TurnSettled(turn_id=turn_id, outcome="completed", reply=f"reply {i}: {_say(rng, 40)}"),
                turn_id=turn_id,
            )
        )
    same = sum(1 for a, b in itertools.pairwise(prefixes) if a == b)
    return same / (len(prefixes) - 1)


def run_context_bench(
    *, events: int = 1_000_000, samples: int = 100, own_turns: int = 2_000, stability_turns: int = 200
) -> dict[str, Any]:
    settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
    with tempfile.TemporaryDirectory(prefix="holon-bench-context-") as tmp:
        store = Store.open(HomePaths(Path(tmp)), settings, clock=SystemClock())
        agent = create_agent(store, "measured", origin="operator:bench")
        step(f"filling a ledger of {events:,} events", 0, events)
        t0 = time.perf_counter()
        _fill(store, agent.agent_id, events, own_turns)
        fill_s = time.perf_counter() - t0
        counter = TokenCounter("gpt-4o")
        result: dict[str, Any] = {"ledger_events": store.ledger.head(), "fill_s": round(fill_s, 1), "samples": samples}
        for name, window in BUDGETS.items():
            step(f"assembling {name} contexts", list(BUDGETS).index(name), len(BUDGETS))
            lat, cpu = _latency(store, agent.agent_id, window, samples, counter)
            result[f"p50_ms_{name}"] = round(statistics.median(lat), 3)
            result[f"p95_ms_{name}"] = round(statistics.quantiles(lat, n=20)[18], 3)
            result[f"cpu_ms_p50_{name}"] = round(statistics.median(cpu), 3)
        step("prefix stability", len(BUDGETS), len(BUDGETS))
        stability = {name: round(_stability(store, window, stability_turns), 4) for name, window in BUDGETS.items()}
        store.close()
    result["prefix_stability"] = min(stability.values())
    result["prefix_stability_by_budget"] = stability
    result["stability_turns"] = stability_turns
    result["targets"] = TARGETS
    result["method"] = METHOD.format(
        events=events, own_turns=own_turns, samples=samples, stability_turns=stability_turns
    )
    return result


def format_report(r: dict[str, Any]) -> str:
    lines = [f"context assembly on a ledger of {r['ledger_events']:,} events ({r['samples']} turns per budget)"]
    for name in BUDGETS:
        lines.append(
            f"  {name:>4}: p50 {r[f'p50_ms_{name}']:.2f} ms (CPU {r[f'cpu_ms_p50_{name}']:.2f} ms), "
            f"p95 {r[f'p95_ms_{name}']:.2f} ms"
        )
    lines.append(f"  target: p95 <= {TARGETS['p95_ms_128k']} ms at 128k")
    lines.append(
        f"  prefix stability over {r['stability_turns']} turns: {r['prefix_stability']:.3f} (target >= {TARGETS['prefix_stability']}); by budget {r['prefix_stability_by_budget']}"
    )
    return "\n".join(lines)
