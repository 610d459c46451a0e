"""``holon bench turn``: runtime overhead per turn, and whether it grows with the ledger's size.

A zero-latency scripted model drives turns of two model rounds with three tool calls
(``update_work_item``, ``list_work_items``, ``brief``) through the real ``TurnRunner`` over a real
``Store``. Overhead is a turn's wall time minus the time spent inside the model provider, so it
is everything holon itself does: prompt assembly, ledger appends with their projections, tool
dispatch. Beside it, the turn's CPU time (``time.process_time``, the model's share subtracted):
on a shared machine wall time includes waiting for a core, CPU time does not.

**Same history, two ledger sizes.** The measured agent has the same history on both ledgers: the
same ``history_turns`` settled conversation turns (operator message, ``turn.started``,
``turn.settled``), spread evenly among other agents' events. The small ledger holds about
``SMALL_EVENTS`` events, the large one ``large_events``; everything beyond the measured agent's
history is 99 other agents' realistic turns (``holon.bench.workload``). So
``growth_ratio_same_history`` (large p50 / small p50) shows what the ledger's size costs a turn,
and nothing else. The two ledgers are measured turn by turn in alternation, so a busy moment of
the machine falls on both.

**Own history** (``growth_ratio_own_history``): in a third small ledger, each measured turn runs on
a new agent with ``FRESH_TURNS`` settled turns and one untimed warm-up turn; the ratio is the
small ledger's p50 (an agent with ``history_turns`` turns) over that p50. This is what the
benchmark used to call growth: the agent's own history filling its context.

**Sections built per turn**: calls of ``build_sections`` in the turn runner, counted over the
measured turns, beside the model rounds (a turn should build them once, not once per round).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
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

TARGETS = {"overhead_ms_p50_large": 5.0, "growth_ratio_same_history": 1.1, "sections_built_per_turn": 1.0}
N_AGENTS = 100
SMALL_EVENTS = 1_000
FRESH_TURNS = 2
WARMUP_TURNS = 20
FILL_BATCH = 2_000
"""Events per ``Store.append`` (one transaction) while filling."""

METHOD = (
    "Turns of 2 model rounds and 3 tool calls through the real TurnRunner and Store, on a scripted "
    "model with zero latency; overhead = turn wall time minus time inside the model, cpu = "
    "time.process_time of the turn minus the model's. The measured agent has the same {history} "
    "settled turns on a small ledger (~{small:,} events) and a large one ({large:,} events), its turns "
    "spread among 99 other agents' realistic turns; {warmup} untimed warm-up turns on each, then "
    "{turns} timed turns alternating between the two ledgers (each measured turn adds to the "
    "agent's history, equally on both). growth_ratio_same_history = p50 large / p50 small. "
    "growth_ratio_own_history = p50 small / p50 of agents with {fresh} settled turns (a new agent "
    "per timed turn, after one untimed turn, in a third small ledger). sections_built_per_turn counts "
    "build_sections calls of the turn runner over the timed turns. synchronous={synchronous}."
)


class _TimedScript:
    """A zero-latency scripted model that keeps track of the time spent inside it."""

    def __init__(self) -> None:
        self.spent_s = 0.0
        self.spent_cpu_s = 0.0
        self.rounds = 0

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        t0, c0 = time.perf_counter(), time.process_time()
        self.rounds += 1
        if self.rounds % 2 == 1:
            # State-neutral calls: the measured agent's state must not grow with the turn count.
            status = "in_progress" if self.rounds % 4 == 1 else "pending"
            out = tool_calls(
                ("update_work_item", {"todos": [{"id": "t1", "status": status}]}),
                ("list_work_items", {}),
                ("brief", {"kind": "progress", "text": f"progress {self.rounds}"}),
            )
        else:
            out = reply(f"done with round {self.rounds}")
        self.spent_s += time.perf_counter() - t0
        self.spent_cpu_s += time.process_time() - c0
        return out


class _SectionCounter:
    """Counts ``build_sections`` calls made by the turn runner (input admission builds none: it
    adds up the pinned sections alone, ``fixed_minimum``)."""

    def __init__(self) -> None:
        self.calls = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        from holon.runtime.turn import runner as runner_module

        modules = (runner_module,)
        originals = [m.build_sections for m in modules]

        def counting(original: Callable[..., Any]) -> Callable[..., Any]:
            def build(*args: Any, **kwargs: Any) -> Any:  # Any: a transparent wrapper
                self.calls += 1
                return original(*args, **kwargs)

            return build

        for module, original in zip(modules, originals, strict=True):
            setattr(module, "build_sections", counting(original))  # noqa: B010 (mypy: no assignment to a function)
        try:
            yield
        finally:
            for module, original in zip(modules, originals, strict=True):
                setattr(module, "build_sections", original)  # noqa: B010


@dataclass
class _Subject:
    """One ledger and one agent on it, measured turn after turn."""

    store: Store
    agent_id: str
    model: _TimedScript = field(default_factory=_TimedScript)
    runner: TurnRunner | None = None
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    rounds: int = 0
    sections: int = 0
    prior_events: int = 0

    def __post_init__(self) -> None:
        model = self.model
        self.runner = TurnRunner(
            self.store,
            builtin_registry(),
            lambda _a: (model, ModelSettings(model="bench")),
            clock=SystemClock(),
            services=TaskServices(TaskManager.for_store(self.store, SystemClock())),
        )

    async def turn(self, i: int, counter: _SectionCounter, *, record: bool) -> None:
        assert self.runner is not None
        self.store.append(NewEvent(self.agent_id, _message(i), origin="operator:bench", authority="operator"))
        m = self.model
        spent, spent_cpu, rounds, sections = m.spent_s, m.spent_cpu_s, m.rounds, counter.calls
        t0, c0 = time.perf_counter(), time.process_time()
        result = await self.runner.run(self.agent_id)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert result is not None and result.outcome == "completed", result
        if record:
            self.wall_ms.append((wall - (m.spent_s - spent)) * 1000)
            self.cpu_ms.append((cpu - (m.spent_cpu_s - spent_cpu)) * 1000)
            self.rounds += m.rounds - rounds
            self.sections += counter.calls - sections


def _append_others(store: Store, others: Iterator[NewEvent], n: int) -> None:
    while n > 0:
        batch = list(itertools.islice(others, min(n, FILL_BATCH)))
        store.append(*batch)
        n -= len(batch)


def _fill(store: Store, agent_id: str, events: int, history_turns: int) -> None:
    """About ``events`` events: the measured agent's ``history_turns`` settled turns (the same on
    every ledger: same seed, same texts) spread evenly among 99 other agents' turns."""
    store.append(*workload.creation_events(N_AGENTS - 1))
    others = workload.stream(N_AGENTS - 1)
    rng = random.Random(3)
    label = f"filling a ledger of {events:,} events"
    start = store.ledger.head()
    others_total = max(0, events - start - 3 * history_turns)  # 3 events per own turn
    for i in range(history_turns):
        step(label, store.ledger.head(), events)
        # Aim at the head, not at a count: appends may add events of their own (episodes sealing).
        target = start + others_total * (i + 1) // (history_turns + 1) + 3 * i
        _append_others(store, others, target - store.ledger.head())
        workload.conversation_turn(store, agent_id, rng, i)
    while store.ledger.head() < events:
        step(label, store.ledger.head(), events)
        _append_others(store, others, min(events - store.ledger.head(), 50_000))


def _prepare(store: Store, agent_id: str) -> None:
    """The work item and todo the measured turns toggle."""
    store.append(
        NewEvent(agent_id, _work_item(), origin="operator:bench", authority="operator", work_item_id="wi_bench"),
        NewEvent(agent_id, _todo(), origin="operator:bench", authority="operator", work_item_id="wi_bench"),
    )


def _work_item() -> Any:
    from holon.ledger import events as ev

    return ev.WorkItemOpened(work_item_id="wi_bench", title="benchmark", objective="measure turn overhead")


def _todo() -> Any:
    from holon.ledger import events as ev

    return ev.TodoChanged(work_item_id="wi_bench", op="add", todo_id="t1", text="keep measuring")


def _message(i: int) -> Any:
    from holon.ledger import events as ev

    return ev.MessageReceived(text=f"bench message {i}: please continue the work")


def _open(stack: ExitStack, synchronous: str, name: str) -> Store:
    # The operator's text (``holon bench --synchronous``): LedgerSettings validates it.
    settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": synchronous}))
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"holon-bench-turn-{name}-"))
    store = Store.open(HomePaths(Path(tmp)), settings, clock=SystemClock())
    stack.callback(store.close)
    return store


def _ledger(stack: ExitStack, synchronous: str, name: str, events: int, history_turns: int) -> tuple[_Subject, float]:
    store = _open(stack, synchronous, name)
    agent = create_agent(store, "bench-agent", origin="operator:bench")
    t0 = time.perf_counter()
    _fill(store, agent.agent_id, events, history_turns)
    fill_s = time.perf_counter() - t0
    _prepare(store, agent.agent_id)
    return _Subject(store, agent.agent_id), fill_s


async def _fresh_turn(store: Store, i: int, counter: _SectionCounter, *, record: bool) -> _Subject:
    """A new agent with ``FRESH_TURNS`` settled turns and one untimed turn, then one turn."""
    agent = create_agent(store, f"fresh-{i}-{int(record)}", origin="operator:bench")
    rng = random.Random(i)
    for j in range(FRESH_TURNS):
        workload.conversation_turn(store, agent.agent_id, rng, j)
    _prepare(store, agent.agent_id)
    subject = _Subject(store, agent.agent_id)
    await subject.turn(-1, counter, record=False)
    await subject.turn(0, counter, record=record)
    return subject


async def _measure(small: _Subject, large: _Subject, fresh_store: Store, turns: int, warmup: int) -> list[float]:
    counter = _SectionCounter()
    fresh: list[float] = []
    with counter.installed():
        for i in range(warmup + turns):
            record = i >= warmup
            # Alternate which ledger goes first, so neither always follows the other's cache misses.
            pair = (small, large) if i % 2 == 0 else (large, small)
            for subject in pair:
                await subject.turn(i, counter, record=record)
            fresh += (await _fresh_turn(fresh_store, i, counter, record=record)).wall_ms
            step("measuring turns (small, large and fresh agent, alternating)", i + 1, warmup + turns)
    return fresh


def _p(samples: list[float], q: int) -> float:
    return statistics.median(samples) if q == 50 else statistics.quantiles(samples, n=20)[18]


def run_turn_bench(
    *,
    large_events: int = 1_000_000,
    turns: int = 200,
    history_turns: int = 200,
    warmup: int = WARMUP_TURNS,
    synchronous: str = "NORMAL",
) -> dict[str, Any]:
    with ExitStack() as stack:
        small, _ = _ledger(stack, synchronous, "small", SMALL_EVENTS, history_turns)
        large, fill_s = _ledger(stack, synchronous, "large", large_events, history_turns)
        fresh_store = _open(stack, synchronous, "fresh")
        fresh_store.append(*workload.creation_events(N_AGENTS - 1))
        _append_others(fresh_store, workload.stream(N_AGENTS - 1), SMALL_EVENTS - fresh_store.ledger.head())
        small.prior_events, large.prior_events = small.store.ledger.head(), large.store.ledger.head()
        t0 = time.perf_counter()
        fresh = asyncio.run(_measure(small, large, fresh_store, turns, warmup))
        measure_s = time.perf_counter() - t0
    timed = 2 * turns
    r: dict[str, Any] = {
        "overhead_ms_p50_small": round(_p(small.wall_ms, 50), 3),
        "overhead_ms_p95_small": round(_p(small.wall_ms, 95), 3),
        "overhead_ms_p50_large": round(_p(large.wall_ms, 50), 3),
        "overhead_ms_p95_large": round(_p(large.wall_ms, 95), 3),
        "cpu_ms_p50_small": round(_p(small.cpu_ms, 50), 3),
        "cpu_ms_p50_large": round(_p(large.cpu_ms, 50), 3),
        "growth_ratio_same_history": round(_p(large.wall_ms, 50) / _p(small.wall_ms, 50), 3),
        "cpu_growth_ratio_same_history": round(_p(large.cpu_ms, 50) / _p(small.cpu_ms, 50), 3),
        "overhead_ms_p50_fresh": round(_p(fresh, 50), 3),
        "growth_ratio_own_history": round(_p(small.wall_ms, 50) / _p(fresh, 50), 3),
        "sections_built_per_turn": round((small.sections + large.sections) / timed, 3),
        "model_rounds_per_turn": round((small.rounds + large.rounds) / timed, 3),
        "tool_calls_per_turn": 3,
        "prior_events_small": small.prior_events,
        "prior_events_large": large.prior_events,
        "history_turns": history_turns,
        "fresh_turns": FRESH_TURNS,
        "turns": turns,
        "fill_s_large": round(fill_s, 1),
        "fill_events_per_s_large": round(large.prior_events / fill_s) if fill_s > 0 else None,
        "measure_s": round(measure_s, 1),
        "synchronous": synchronous,
        "targets": TARGETS,
    }
    r["method"] = METHOD.format(
        history=history_turns, small=SMALL_EVENTS, large=large_events, warmup=warmup, turns=turns,
        fresh=FRESH_TURNS, synchronous=synchronous,
    )  # fmt: skip
    return r


def format_report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"turn overhead benchmark ({r['turns']} turns, 2 model rounds and 3 tool calls each, "
            f"synchronous={r['synchronous']}); the same {r['history_turns']}-turn agent history on both ledgers",
            f"  {r['prior_events_small']:>9,} prior events: p50 {r['overhead_ms_p50_small']:.2f} ms "
            f"(CPU {r['cpu_ms_p50_small']:.2f} ms), p95 {r['overhead_ms_p95_small']:.2f} ms",
            f"  {r['prior_events_large']:>9,} prior events: p50 {r['overhead_ms_p50_large']:.2f} ms "
            f"(CPU {r['cpu_ms_p50_large']:.2f} ms), p95 {r['overhead_ms_p95_large']:.2f} ms "
            f"(target p50 <= {TARGETS['overhead_ms_p50_large']})",
            f"  growth, same history (large/small p50): {r['growth_ratio_same_history']:.3f} "
            f"(CPU {r['cpu_growth_ratio_same_history']:.3f}; target <= {TARGETS['growth_ratio_same_history']})",
            f"  growth, own history ({r['history_turns']} turns vs {r['fresh_turns']}, small ledger): "
            f"{r['growth_ratio_own_history']:.3f} (fresh agent p50 {r['overhead_ms_p50_fresh']:.2f} ms)",
            f"  sections built per turn: {r['sections_built_per_turn']:.2f} for {r['model_rounds_per_turn']:.2f} "
            f"model rounds (target {TARGETS['sections_built_per_turn']:.0f})",
            f"  filling the large ledger took {r['fill_s_large']:.0f} s ({r['fill_events_per_s_large']:,} events/s "
            f"through Store.append, {FILL_BATCH:,} per transaction); measuring {r['measure_s']:.0f} s",
        ]
    )
