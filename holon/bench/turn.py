"""``holon bench turn``: runtime overhead per turn, and whether it grows with history.

A zero-latency scripted model drives turns of two model rounds with three tool calls
(``update_work_item``, ``list_work_items``, ``brief``) through the real ``TurnRunner`` over a real
``Store``. Overhead is a turn's wall time minus the time spent inside the model provider, so it
is everything holon itself does: prompt assembly, ledger appends with their projections, tool
dispatch. It is measured on a ledger with about 1,000 prior events and on one with about
1,000,000 (``--events``), spread over 100 agents including the measured one.
"""

from __future__ import annotations

import asyncio
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
from holon.ledger import NewEvent
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, TextSink
from holon.runtime.providers.scripted import reply, tool_calls
from holon.runtime.tasks import TaskManager
from holon.runtime.tools import TaskServices, builtin_registry
from holon.runtime.turn import TurnRunner

__all__ = ["TARGETS", "format_report", "run_turn_bench"]

TARGETS = {"growth_ratio": 1.2, "overhead_ms_p50_large": 10.0}
N_AGENTS = 100


class _TimedScript:
    """A zero-latency scripted model that keeps track of the time spent inside it."""

    def __init__(self) -> None:
        self.spent_s = 0.0
        self._round = 0

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        t0 = time.perf_counter()
        self._round += 1
        if self._round % 2 == 1:
            # State-neutral calls: the measured agent's state must not grow with the turn count.
            status = "in_progress" if self._round % 4 == 1 else "pending"
            out = tool_calls(
                ("update_work_item", {"todos": [{"id": "t1", "status": status}]}),
                ("list_work_items", {}),
                ("brief", {"kind": "progress", "text": f"progress {self._round}"}),
            )
        else:
            out = reply(f"done with round {self._round}")
        self.spent_s += time.perf_counter() - t0
        return out


def _fill(store: Store, agent_id: str, events: int) -> None:
    """About ``events`` prior events over ``N_AGENTS`` agents; the measured agent gets a settled
    conversation turn for every 500 events of the others (the same shape on both ledger sizes)."""
    store.append(*workload.creation_events(N_AGENTS - 1))
    others = workload.stream(N_AGENTS - 1)
    rng = random.Random(3)
    own = itertools.count()
    while store.ledger.head() < events:
        step(f"filling a ledger of {events:,} events", store.ledger.head(), events)
        batch = list(itertools.islice(others, 500))
        for j in range(0, len(batch), 250):
            store.append(*batch[j : j + 250])
        workload.conversation_turn(store, agent_id, rng, next(own))


async def _measure(store: Store, agent_id: str, turns: int) -> list[float]:
    model = _TimedScript()
    runner = TurnRunner(
        store,
        builtin_registry(),
        lambda _a: (model, ModelSettings(model="bench")),
        clock=SystemClock(),
        services=TaskServices(TaskManager.for_store(store, SystemClock())),
    )
    store.append(
        NewEvent(agent_id, _work_item(), origin="operator:bench", authority="operator", work_item_id="wi_bench"),
        NewEvent(agent_id, _todo(), origin="operator:bench", authority="operator", work_item_id="wi_bench"),
    )
    samples = []
    for i in range(turns):
        store.append(NewEvent(agent_id, _message(i), origin="operator:bench", authority="operator"))
        spent_before = model.spent_s
        t0 = time.perf_counter()
        result = await runner.run(agent_id)
        wall = time.perf_counter() - t0
        assert result is not None and result.outcome == "completed", result
        samples.append((wall - (model.spent_s - spent_before)) * 1000)
        step(f"measuring turns after {store.ledger.head():,} events", i + 1, turns)
    return samples


def _work_item() -> Any:
    from holon.ledger import events as ev

    return ev.WorkItemOpened(work_item_id="wi_bench", title="benchmark", objective="measure turn overhead")


def _todo() -> Any:
    from holon.ledger import events as ev

    return ev.TodoChanged(work_item_id="wi_bench", op="add", todo_id="t1", text="keep measuring")


def _message(i: int) -> Any:
    from holon.ledger import events as ev

    return ev.MessageReceived(text=f"bench message {i}: please continue the work")


def _run_size(events: int, turns: int, synchronous: str) -> dict[str, float]:
    # The operator's text (``holon bench --synchronous``): LedgerSettings validates it.
    settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": synchronous}))
    with tempfile.TemporaryDirectory(prefix="holon-bench-turn-") as tmp:
        store = Store.open(HomePaths(Path(tmp)), settings, clock=SystemClock())
        agent = create_agent(store, "bench-agent", origin="operator:bench")
        t0 = time.perf_counter()
        _fill(store, agent.agent_id, events)
        fill_s = time.perf_counter() - t0
        prior = store.ledger.head()
        asyncio.run(_measure(store, agent.agent_id, 20))  # warm caches
        samples = asyncio.run(_measure(store, agent.agent_id, turns))
        store.close()
    q = statistics.quantiles(samples, n=20)
    return {"prior_events": prior, "p50": statistics.median(samples), "p95": q[18], "fill_s": fill_s}


def run_turn_bench(*, large_events: int = 1_000_000, turns: int = 200, synchronous: str = "NORMAL") -> dict[str, Any]:
    small = _run_size(1_000, turns, synchronous)
    large = _run_size(large_events, turns, synchronous)
    return {
        "overhead_ms_p50_small": round(small["p50"], 3),
        "overhead_ms_p95_small": round(small["p95"], 3),
        "overhead_ms_p50_large": round(large["p50"], 3),
        "overhead_ms_p95_large": round(large["p95"], 3),
        "growth_ratio": round(large["p50"] / small["p50"], 3),
        "prior_events_small": small["prior_events"],
        "prior_events_large": large["prior_events"],
        "turns": turns,
        "tool_calls_per_turn": 3,
        "model_rounds_per_turn": 2,
        "synchronous": synchronous,
        "targets": TARGETS,
    }


def format_report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"turn overhead benchmark ({r['turns']} turns, 2 model rounds and 3 tool calls each, synchronous={r['synchronous']})",
            f"  {r['prior_events_small']:>9,} prior events: p50 {r['overhead_ms_p50_small']:.2f} ms, p95 {r['overhead_ms_p95_small']:.2f} ms",
            f"  {r['prior_events_large']:>9,} prior events: p50 {r['overhead_ms_p50_large']:.2f} ms, p95 {r['overhead_ms_p95_large']:.2f} ms (target p50 <= {TARGETS['overhead_ms_p50_large']})",
            f"  growth ratio (large/small p50): {r['growth_ratio']:.3f} (target <= {TARGETS['growth_ratio']})",
        ]
    )
