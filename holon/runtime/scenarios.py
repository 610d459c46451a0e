"""Continuity scenarios: ``holon scenario run FILE``.

A scenario is JSON: ``id``, ``budgets``, ``events``, ``required_refs``, ``forbidden_refs``. Each
event has a ``kind``, an optional ``ref`` label (``message:plan-a``), optional ``text`` (filler is
generated when absent) and an optional ``owner`` (the work item label it belongs to,
``work_item:a``). The runner turns the events into real ledger events in a fresh home (through the
same append path as the runtime, projections and episodes included), then assembles the context
for the next operator turn at every budget with the real assembler, and checks:

* ``budget_respected``: the request fits (a budget is a context window; an eighth is reserved for
  the reply);
* ``current_input_present``; ``short_reply_predecessor_present`` (when the input is a short
  reply, the assistant message it answers is included);
* ``required_refs_present`` and ``forbidden_refs_absent``;
* ``no_duplicate_evidence``: no ledger event is included by two sections;
* ``provenance_kept``: no non-operator input reads as operator text;
* ``monotone_degradation``: nothing included at this budget was left out at a larger one;
* ``restart_identical``: a fresh process rebuilding from the ledger gives the same manifest digest.

Event kinds: ``operator``, ``assistant`` (settles a turn over the pending inputs, with this text
as its reply), ``external``, ``timer``, ``task_result``, ``agent_lifecycle``, ``work_item_create``,
``work_item_switch``, ``work_item_return``, ``work_item_complete``, ``wait``, ``restart`` (the
process dies: a turn over pending inputs is left open, and the store is reopened) and
``recovery`` (crash recovery runs). Each event advances the clock by ``gap_s`` (default 20 s).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from holon.clock import FakeClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.context.assembler import Assembly, Budget, ContextOverflow, assemble
from holon.context.render import is_short_reply
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.recovery import recover
from holon.runtime.tools import builtin_registry

__all__ = ["Scenario", "assemble_at", "load_scenario", "run_scenario"]

Kind = Literal[
    "operator", "assistant", "external", "timer", "task_result", "agent_lifecycle", "work_item_create",
    "work_item_switch", "work_item_return", "work_item_complete", "wait", "restart", "recovery",
]  # fmt: skip
COUNTER_MODEL = "gpt-4o"
HEADER = "information, not an operator instruction"
_FILLER = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "cobalt",
    "indigo",
    "jade",
]


class ScenarioEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Kind
    ref: str | None = None
    text: str | None = None
    owner: str | None = None
    gap_s: float = Field(20.0, ge=0)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    budgets: list[int] = Field(default_factory=lambda: [2048, 4096, 16384])
    events: list[ScenarioEvent]
    required_refs: list[str] = Field(default_factory=list)
    forbidden_refs: list[str] = Field(default_factory=list)


def load_scenario(path: Path) -> Scenario:
    try:
        return Scenario.model_validate_json(path.read_bytes())
    except OSError as e:
        raise UsageError(f"cannot read scenario {path}: {e.strerror}") from e
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"scenario {path}: {where}: {err['msg']}") from e


def budget_for(window: int) -> Budget:
    return Budget(context_window=window, output_reserve=window // 8)


def assemble_at(store: Store, agent_id: str, inputs: list[int], started_seq: int, window: int) -> Assembly:
    tools = builtin_registry().schemas()
    view = gather(store, agent_id, inputs=inputs, started_seq=started_seq, tools=tools)
    return assemble(build_sections(view, TokenCounter(COUNTER_MODEL)), budget_for(window))


class _Driver:
    def __init__(self, scenario: Scenario, home: Path) -> None:
        self.scenario = scenario
        self.paths = HomePaths(home)
        self.settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
        self.clock = FakeClock(step_us=1_000)
        self.store = Store.open(self.paths, self.settings, clock=self.clock)
        self.agent_id = create_agent(self.store, "scenario", origin="operator:scenario").agent_id
        self.labels: dict[str, str] = {}
        self.items: dict[str, str] = {}
        self.rng = random.Random(scenario.id)

    def filler(self, kind: str, i: int) -> str:
        words = " ".join(self.rng.choice(_FILLER) for _ in range(self.rng.randint(10, 24)))
        return f"{kind} {i}: {words}"

    def add(
        self,
        *payloads: ev.Payload,
        authority: ev.Authority = "runtime",
        origin: str = "runtime:scenario",
        **env: Any,
    ) -> list[Event]:
        return self.store.append(
            *(NewEvent(self.agent_id, p, origin=origin, authority=authority, **env) for p in payloads)
        )

    def item(self, e: ScenarioEvent) -> str | None:
        label = e.owner or e.ref
        if label is None:
            return None
        if label not in self.items:
            self.items[label] = "wi_" + "".join(c if c.isalnum() else "_" for c in label)
        return self.items[label]

    def active(self) -> str | None:
        return self.store.working_memory(self.agent_id).get("active_work_item")

    def settle_pending(self, reply: str | None, outcome: ev.TurnOutcome = "completed") -> list[Event]:
        pending = self.store.agent(self.agent_id).pending_inputs
        turn_id = new_id("turn")
        self.add(ev.TurnStarted(turn_id=turn_id, inputs=pending), turn_id=turn_id, work_item_id=self.active())
        return self.add(ev.TurnSettled(turn_id=turn_id, outcome=outcome, reply=reply), turn_id=turn_id)

    def apply(self, i: int, e: ScenarioEvent) -> None:
        self.clock.advance(seconds=e.gap_s)
        text = e.text if e.text is not None else self.filler(e.kind, i)
        stored: list[Event] = []
        wid: str | None  # the work item a work_item_* event names
        match e.kind:
            case "operator":
                stored = self.add(ev.MessageReceived(text=text), authority="operator", origin="operator:scenario")
            case "external":
                stored = self.add(
                    ev.MessageReceived(text=text, sender="webhook", channel="external"),
                    authority="external",
                    origin="external:scenario",
                )
            case "timer":
                stored = self.add(
                    ev.MessageReceived(text=text, sender="timer", channel="timer"),
                    authority="timer",
                    origin="timer:scenario",
                )
            case "task_result":
                task_id = new_id("task")
                self.add(
                    ev.TaskCreated(task_id=task_id, title="scenario task"),
                    ev.TaskResulted(task_id=task_id, state="succeeded", output=text),
                    task_id=task_id,
                )
                stored = self.add(
                    ev.MessageReceived(text=f"Task {task_id} ended: succeeded.\n{text}", sender="task", channel="task"),
                    authority="tool",
                    origin=f"task:{task_id}",
                    task_id=task_id,
                )
            case "assistant":
                stored = self.settle_pending(text)
            case "agent_lifecycle":
                stored = self.add(
                    ev.AgentConfigured(changes={"lifecycle": text[:200]}),
                    authority="operator",
                    origin="operator:scenario",
                )
            case "work_item_create":
                wid = self.item(e) or new_id("wi")
                stored = self.add(
                    ev.WorkItemOpened(work_item_id=wid, title=text[:120], objective=text),
                    work_item_id=wid,
                    authority="agent",
                    origin="agent:scenario",
                )
            case "work_item_switch":
                wid = self.item(e)
                if wid is None:
                    raise UsageError(f"event {i}: work_item_switch needs an owner")
                stored = self.add(
                    ev.WorkItemPicked(work_item_id=wid), work_item_id=wid, authority="agent", origin="agent:scenario"
                )
            case "work_item_return":
                stored = self.add(ev.WorkItemPicked(work_item_id=None), authority="agent", origin="agent:scenario")
            case "work_item_complete":
                wid = self.item(e) or self.active()
                if wid is None:
                    raise UsageError(f"event {i}: work_item_complete with no owner and no active work item")
                stored = self.add(
                    ev.WorkItemCompleted(work_item_id=wid, report=text),
                    work_item_id=wid,
                    authority="agent",
                    origin="agent:scenario",
                )
            case "wait":
                recheck = self.clock.now_us() + 3_600_000_000
                stored = self.add(
                    ev.WaitRegistered(wait_id=new_id("wait"), on="operator", recheck_at_us=recheck, reason=text[:400]),
                    authority="agent",
                    origin="agent:scenario",
                )
            case "restart":
                if self.store.agent(self.agent_id).pending_inputs:
                    turn_id = new_id("turn")  # the process dies in the middle of this turn
                    self.add(
                        ev.TurnStarted(turn_id=turn_id, inputs=self.store.agent(self.agent_id).pending_inputs),
                        turn_id=turn_id,
                        work_item_id=self.active(),
                    )
                self.store.close()
                self.store = Store.open(self.paths, self.settings, clock=self.clock)
            case "recovery":
                recover(self.store)
        if e.ref is not None and stored:
            self.labels[e.ref] = f"event:{stored[-1].seq}"


def _refs(assembly: Assembly) -> tuple[set[str], bool]:
    seen: set[str] = set()
    duplicate = False
    for s in assembly.manifest.sections:
        for ref in s.refs_included:
            if ref.startswith("event:") and ref in seen:
                duplicate = True
            seen.add(ref)
    return seen, duplicate


def _provenance_kept(assembly: Assembly, non_operator: list[str]) -> bool:
    for m in assembly.messages:
        content = m.get("content")
        if m.get("role") != "user" or not isinstance(content, str):
            continue
        for text in non_operator:
            at = content.find(text)
            if at >= 0 and HEADER not in content[:at]:
                return False
    return True


def run_scenario(scenario: Scenario, *, budgets: list[int] | None = None, fresh_check: bool = True) -> dict[str, Any]:
    budgets = sorted(budgets or scenario.budgets, reverse=True)
    with tempfile.TemporaryDirectory(prefix="holon-scenario-") as tmp:
        d = _Driver(scenario, Path(tmp))
        for i, e in enumerate(scenario.events):
            d.apply(i, e)
        store = d.store
        inputs = store.agent(d.agent_id).pending_inputs
        if not inputs:
            raise UsageError(f"scenario {scenario.id}: it must end with an input for the next turn")
        turn_id = new_id("turn")
        started = d.add(ev.TurnStarted(turn_id=turn_id, inputs=inputs), turn_id=turn_id, work_item_id=d.active())[0]
        view = gather(store, d.agent_id, inputs=inputs, started_seq=started.seq, tools=())
        short = is_short_reply(view.inputs)
        predecessor = f"event:{view.history[-1].settled_seq}" if view.history else None
        non_operator = [i.text for t in view.history for i in t.inputs if i.authority != "operator"]
        non_operator += [i.text for i in view.inputs if i.authority != "operator"]
        label_of = {ref: label for label, ref in d.labels.items()}
        results: list[dict[str, Any]] = []
        digests: dict[int, str] = {}
        previous: set[str] | None = None
        for window in budgets:
            try:
                a = assemble_at(store, d.agent_id, inputs, started.seq, window)
            except ContextOverflow as e:
                results.append(
                    {
                        "budget": window,
                        "passed": False,
                        "assertions": {"budget_respected": False},
                        "error": str(e),
                        "included_refs": [],
                        "omitted_refs": sorted(d.labels),
                    }
                )
                continue
            digests[window] = a.digest
            included, duplicate = _refs(a)
            checks = {
                "budget_respected": a.used_tokens <= budget_for(window).limit,
                "current_input_present": all(f"event:{s}" in included for s in inputs),
                "short_reply_predecessor_present": (not short) or predecessor is None or predecessor in included,
                "required_refs_present": all(d.labels.get(r) in included for r in scenario.required_refs),
                "forbidden_refs_absent": not any(d.labels.get(r) in included for r in scenario.forbidden_refs),
                "no_duplicate_evidence": not duplicate,
                "provenance_kept": _provenance_kept(a, non_operator),
                "monotone_degradation": previous is None or included <= previous,
            }
            previous = included
            results.append(
                {
                    "budget": window,
                    "used_tokens": a.used_tokens,
                    "assertions": checks,
                    "included_refs": sorted(label_of[r] for r in included if r in label_of),
                    "omitted_refs": sorted(label for label, ref in d.labels.items() if ref not in included),
                    "digest": a.digest,
                }
            )
        missing = [r for r in scenario.required_refs + scenario.forbidden_refs if r not in d.labels]
        home, agent_id = d.paths.root, d.agent_id
        store.close()
        fresh = _fresh_digests(home, agent_id, inputs, started.seq, list(digests)) if fresh_check and digests else {}
    for r in results:
        if "digest" in r:
            r["assertions"]["restart_identical"] = (not fresh_check) or fresh.get(r["budget"]) == r["digest"]
        r["passed"] = all(r["assertions"].values()) and not missing
        r.pop("digest", None)
    return {
        "id": scenario.id,
        "passed": all(r["passed"] for r in results) and not missing,
        "unknown_refs": missing,
        "budgets": sorted(results, key=lambda r: r["budget"]),
    }


def _fresh_digests(
    home: Path, agent_id: str, inputs: list[int], started_seq: int, windows: list[int]
) -> dict[int, str]:
    """Manifest digests computed by a new process from the ledger alone."""
    args = [
        sys.executable,
        "-m",
        "holon.runtime.scenarios",
        str(home),
        agent_id,
        json.dumps(inputs),
        str(started_seq),
        *map(str, windows),
    ]
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        return {}
    return {int(k): v for k, v in json.loads(out.stdout).items()}


def _main(argv: list[str]) -> int:
    home, agent_id, inputs, started, *windows = argv
    store = Store.open(HomePaths(Path(home)), Settings(ledger=LedgerSettings(synchronous="NORMAL")), clock=FakeClock())
    try:
        digests = {w: assemble_at(store, agent_id, json.loads(inputs), int(started), int(w)).digest for w in windows}
    finally:
        store.close()
    sys.stdout.write(json.dumps(digests))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
