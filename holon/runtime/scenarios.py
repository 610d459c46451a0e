"""Continuity scenarios: ``holon scenario run FILE``.

A scenario is JSON: ``id``, ``budgets``, ``events``, ``required_refs``, ``forbidden_refs``,
``superseded_refs`` and ``variants``. Each event has a ``kind``, an optional ``ref`` label
(``message:plan-a``), optional ``text`` (filler is generated when absent), optional ``variants``
(authored alternative texts: ``{"paraphrase": "...", "zh": "..."}``) and an optional ``owner``
(the work item label it belongs to, ``work_item:a``). The runner turns the events into real
ledger events in a fresh home (through the same append path as the runtime, projections and
episodes included), then assembles the context for the next operator turn at every budget with
the real assembler, and checks what the rendered prompt **shows** (``holon.runtime.observe``:
an event's text, or a summary derived from it, found in the text of a section), not what the
sections declare:

* ``budget_respected``: the request fits (a budget is a context window; an eighth is reserved for
  the reply);
* ``current_input_present``; ``short_reply_predecessor_present`` (when the input is a short
  reply, the assistant message it answers is shown);
* ``required_refs_present`` (shown as text or inside a summary) and ``forbidden_refs_absent``
  (shown nowhere, not even inside an episode summary);
* ``superseded_marked``: a ``superseded_refs`` event is absent, or shown only verbatim in the
  conversation (where what replaced it follows) or marked superseded wherever it is restated;
* ``no_duplicate_evidence``: no ledger event is declared by two sections;
* ``no_duplicate_shown``: no message's text is shown by two sections (an episode summary quoting
  the current input, say);
* ``provenance_kept``: no non-operator input reads as operator text;
* ``monotone_degradation``: nothing declared at this budget was left out at a larger one (an
  episode's own id aside: a summary stands in for turns a larger budget shows in full);
* ``restart_identical``: a fresh process rebuilding from the ledger gives the same manifest digest.

Each budget's result reports ``observed``: for every labelled ref, ``{"shown", "how", "section"}``
(``how``: ``text`` or ``summary``), and ``included_refs`` / ``omitted_refs`` derived from it. A
scenario runs as one of the variants of ``holon.runtime.scenario_variants`` (``plain`` by default).

Event kinds: ``operator``, ``assistant`` (settles a turn over the pending inputs, with this text
as its reply), ``external``, ``timer``, ``task_result``, ``agent_lifecycle``, ``work_item_create``,
``work_item_switch``, ``work_item_return``, ``work_item_complete``, ``wait``, ``restart`` (the
process dies: a turn over pending inputs is left open, and the store is reopened) and
``recovery`` (crash recovery runs). Each event advances the clock by ``gap_s`` (default 20 s).
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter
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
from holon.runtime.observe import Seen, observe, tokens
from holon.runtime.recovery import recover
from holon.runtime.scenario_variants import AUTHORED, AUTOMATIC, FILLER_SCALE, PREFIX_PAIRS, VARIANTS, Variant
from holon.runtime.tools import builtin_registry

__all__ = [
    "Scenario",
    "ScenarioEvent",
    "applicable_variants",
    "assemble_at",
    "load_scenario",
    "run_scenario",
    "conclude",
    "fresh_digests",
    "replay_variants",
    "run_variants",
    "variant_events",
]

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
    variants: dict[Literal["paraphrase", "zh"], str] = Field(default_factory=dict)
    """Authored alternative texts of this event, by variant."""


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    budgets: list[int] = Field(default_factory=lambda: [2048, 4096, 16384])
    events: list[ScenarioEvent]
    required_refs: list[str] = Field(default_factory=list)
    forbidden_refs: list[str] = Field(default_factory=list)
    superseded_refs: list[str] = Field(default_factory=list)
    """Refs replaced by a later event: shown only verbatim in the conversation or marked superseded."""
    variants: list[Variant] | None = None
    """The variants this scenario runs under (default: ``applicable_variants``)."""


def applicable_variants(scenario: Scenario) -> list[Variant]:
    """The declared variants, else ``plain``, each authored one some event has a text for, and
    the automatic ones."""
    if scenario.variants is not None:
        return list(scenario.variants)
    authored = [v for v in AUTHORED if any(v in e.variants for e in scenario.events)]
    return ["plain", *authored, *AUTOMATIC]


def variant_events(scenario: Scenario, variant: Variant) -> list[ScenarioEvent]:
    """The scenario's events as told by ``variant`` (texts swapped, a prefix prepended)."""
    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    events = [
        e.model_copy(update={"text": e.variants[variant]}) if variant in e.variants else e for e in scenario.events
    ]
    if variant == "prefix30":
        prefix = [
            event
            for said, replied in PREFIX_PAIRS
            for event in (ScenarioEvent(kind="operator", text=said), ScenarioEvent(kind="assistant", text=replied))
        ]
        events = prefix + events
    return events


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


@functools.cache
def _tools_and_counter() -> tuple[tuple[dict[str, Any], ...], TokenCounter]:
    """The built-in tool schemas and one token counter, kept for the process as the runtime keeps
    them across turns (building either costs more than assembling a prompt)."""
    return tuple(builtin_registry().schemas()), TokenCounter(COUNTER_MODEL)


def assemble_at(store: Store, agent_id: str, inputs: list[int], started_seq: int, window: int) -> Assembly:
    tools, counter = _tools_and_counter()
    view = gather(store, agent_id, inputs=inputs, started_seq=started_seq, tools=tools)
    return assemble(build_sections(view, counter), budget_for(window))


class _Driver:
    def __init__(self, scenario: Scenario, home: Path, variant: Variant = "plain") -> None:
        self.scenario = scenario
        self.variant = variant
        self.scale = FILLER_SCALE.get(variant, 1)
        self.paths = HomePaths(home)
        self.settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
        self.clock = FakeClock(step_us=1_000)
        self.store = Store.open(self.paths, self.settings, clock=self.clock)
        self.agent_id = create_agent(self.store, "scenario", origin="operator:scenario").agent_id
        self.labels: dict[str, str] = {}
        self.items: dict[str, str] = {}
        self.rng = random.Random(scenario.id)
        self.more = random.Random(f"{scenario.id}/{variant}")
        self.texts: dict[int, str] = {}
        """Seq -> the text an event puts in front of a model (messages, replies, work items, waits)."""
        self.messages: set[int] = set()
        """Seqs of messages and replies: evidence that must not be shown twice."""

    def filler(self, kind: str, i: int) -> str:
        """Generated text for an event without one. Under ``long_filler`` the same words, then
        twice as many more from a second generator, so every variant draws the same base text."""
        n = self.rng.randint(10, 24)
        words = [self.rng.choice(_FILLER) for _ in range(n)]
        words += [self.more.choice(_FILLER) for _ in range(n * (self.scale - 1))]
        return f"{kind} {i}: {' '.join(words)}"

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
        if stored:
            self.record(e, text, stored[-1].seq)

    def record(self, e: ScenarioEvent, text: str, seq: int) -> None:
        """Remember what ``seq`` shows a model, and its label."""
        if e.kind != "agent_lifecycle":
            self.texts[seq] = text[:400] if e.kind == "wait" else text
            if e.kind in ("operator", "assistant", "external", "timer", "task_result"):
                self.messages.add(seq)
        if e.ref is not None:
            self.labels[e.ref] = f"event:{seq}"

    def episodes(self) -> dict[str, tuple[int, int]]:
        """Every sealed episode of the agent: its id and ledger range."""
        out = {}
        for e in self.store.ledger.recent(self.agent_id, ("episode.sealed",), limit=1_000_000):
            p = e.payload
            assert isinstance(p, ev.EpisodeSealed)
            out[p.episode_id] = (p.seq_start, p.seq_end)
        return out


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


def run_scenario(
    scenario: Scenario, *, variant: Variant = "plain", budgets: list[int] | None = None, fresh_check: bool = True
) -> dict[str, Any]:
    """Replay ``scenario`` as ``variant`` and check every assertion at every budget."""
    return run_variants(scenario, [variant], budgets=budgets, fresh_check=fresh_check)[variant]


def run_variants(
    scenario: Scenario, variants: list[Variant], *, budgets: list[int] | None = None, fresh_check: bool = True
) -> dict[str, dict[str, Any]]:
    """``run_scenario`` for several variants, with one fresh process checking all their digests."""
    with tempfile.TemporaryDirectory(prefix="holon-scenario-") as tmp:
        replayed = replay_variants(scenario, variants, Path(tmp), budgets=budgets)
        fresh = fresh_digests([job for _r, job in replayed]) if fresh_check else None
    return conclude(replayed, fresh)


Replayed = list[tuple[dict[str, Any], dict[str, Any]]]
"""Per variant: its result (``restart_identical`` and ``passed`` not yet decided) and the job a
fresh process runs to rebuild its prompts (``fresh_digests``)."""


def replay_variants(
    scenario: Scenario, variants: list[Variant], root: Path, *, budgets: list[int] | None = None
) -> Replayed:
    """Replay ``scenario`` once per variant into homes under ``root`` (kept for ``fresh_digests``)
    and check everything but ``restart_identical``."""
    windows = sorted(budgets or scenario.budgets, reverse=True)
    out: Replayed = []
    for variant in variants:
        d = _Driver(scenario, root / variant, variant)
        try:
            out.append(_assess(d, windows))
        finally:
            d.store.close()
    return out


def conclude(replayed: Replayed, fresh: list[dict[int, str]] | None) -> dict[str, dict[str, Any]]:
    """The final results by variant: ``restart_identical`` from ``fresh`` (None: not checked, so it
    holds) and ``passed``."""
    out: dict[str, dict[str, Any]] = {}
    for n, (result, _job) in enumerate(replayed):
        digests = fresh[n] if fresh is not None else None
        missing = result["unknown_refs"]
        for r in result["budgets"]:
            if "digest" in r:
                r["assertions"]["restart_identical"] = digests is None or digests.get(r["budget"]) == r["digest"]
            r["passed"] = all(r["assertions"].values()) and not missing
            r.pop("digest", None)
        result["passed"] = all(r["passed"] for r in result["budgets"]) and not missing
        out[result["variant"]] = result
    return out


def _assess(d: _Driver, windows: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replay the events, then assemble and check the next turn's prompt at every budget (largest
    first). Returns the result (``restart_identical`` still to check) and the fresh-process job."""
    scenario = d.scenario
    for i, e in enumerate(variant_events(scenario, d.variant)):
        d.apply(i, e)
    store = d.store
    inputs = store.agent(d.agent_id).pending_inputs
    if not inputs:
        raise UsageError(f"scenario {scenario.id}: it must end with an input for the next turn")
    turn_id = new_id("turn")
    started = d.add(ev.TurnStarted(turn_id=turn_id, inputs=inputs), turn_id=turn_id, work_item_id=d.active())[0]
    view = gather(store, d.agent_id, inputs=inputs, started_seq=started.seq, tools=())
    short = is_short_reply(view.inputs)
    predecessor = view.history[-1].settled_seq if view.history else None
    non_operator = [i.text for t in view.history for i in t.inputs if i.authority != "operator"]
    non_operator += [i.text for i in view.inputs if i.authority != "operator"]
    seq_of = {label: int(ref.removeprefix("event:")) for label, ref in d.labels.items()}
    episodes = d.episodes()
    superseded = [seq_of[r] for r in scenario.superseded_refs if r in seq_of]
    # A message whose words another message repeats ("ok", "yes") cannot be told apart from it:
    # the duplicate check covers the messages with words of their own.
    said = Counter(tokens(d.texts[s]) for s in d.messages)
    unique = {s for s in d.messages if said[tokens(d.texts[s])] == 1}
    results: list[dict[str, Any]] = []
    previous: set[str] | None = None
    for window in windows:
        try:
            a = assemble_at(store, d.agent_id, inputs, started.seq, window)
        except ContextOverflow as e:
            results.append(
                {
                    "budget": window,
                    "passed": False,
                    "assertions": {"budget_respected": False},
                    "error": str(e),
                    "observed": {label: {"shown": False, "how": None, "section": None} for label in sorted(d.labels)},
                    "included_refs": [],
                    "omitted_refs": sorted(d.labels),
                }
            )
            continue
        seen = observe(a, d.texts, episodes)
        declared, duplicate = _refs(a)

        def shown(seq: int | None, seen: dict[int, Seen] = seen, declared: set[str] = declared) -> bool:
            if seq is None:
                return False
            if seq in seen:
                return seen[seq].shown
            return f"event:{seq}" in declared  # an event with no text of its own (none yet)

        checks = {
            "budget_respected": a.used_tokens <= budget_for(window).limit,
            "current_input_present": all(shown(s) for s in inputs),
            "short_reply_predecessor_present": (not short) or predecessor is None or shown(predecessor),
            "required_refs_present": all(shown(seq_of.get(r)) for r in scenario.required_refs),
            "forbidden_refs_absent": not any(shown(seq_of.get(r)) for r in scenario.forbidden_refs),
            "superseded_marked": all(not seen[s].shown or seen[s].marked_superseded for s in superseded if s in seen),
            "no_duplicate_evidence": not duplicate,
            "no_duplicate_shown": not any(len({k for k, _h in seen[s].places}) > 1 for s in unique if s in seen),
            "provenance_kept": _provenance_kept(a, non_operator),
            "monotone_degradation": previous is None or _evidence(declared) <= _evidence(previous),
        }
        previous = declared
        observed = {
            label: seen[seq].to_json() if seq in seen else {"shown": shown(seq), "how": None, "section": None}
            for label, seq in sorted(seq_of.items())
        }
        duplicates = {
            _label(d, s): [k for k, _h in seen[s].places]
            for s in sorted(unique)
            if s in seen and len({k for k, _h in seen[s].places}) > 1
        }
        results.append(
            {
                "budget": window,
                "used_tokens": a.used_tokens,
                "assertions": checks,
                "observed": observed,
                "included_refs": sorted(label for label, o in observed.items() if o["shown"]),
                "omitted_refs": sorted(label for label, o in observed.items() if not o["shown"]),
                **({"duplicates": duplicates} if duplicates else {}),
                "digest": a.digest,
            }
        )
    missing = [
        r for r in scenario.required_refs + scenario.forbidden_refs + scenario.superseded_refs if r not in d.labels
    ]
    result = {
        "id": scenario.id,
        "variant": d.variant,
        "passed": False,
        "unknown_refs": missing,
        "budgets": sorted(results, key=lambda r: r["budget"]),
    }
    job = {
        "home": str(d.paths.root),
        "agent_id": d.agent_id,
        "inputs": inputs,
        "started": started.seq,
        "windows": [r["budget"] for r in results if "digest" in r],
    }
    return result, job


def _evidence(refs: set[str]) -> set[str]:
    """The refs monotone degradation compares: an episode's own id is left out, since a smaller
    budget shows a summary (``episode:<id>``) exactly where a larger one shows its turns in full."""
    return {r for r in refs if not r.startswith("episode:")}


def _label(d: _Driver, seq: int) -> str:
    """A labelled event's label, else ``event:<seq>``."""
    return next((label for label, ref in d.labels.items() if ref == f"event:{seq}"), f"event:{seq}")


def fresh_digests(jobs: list[dict[str, Any]]) -> list[dict[int, str]]:
    """Manifest digests computed by one new process from the ledgers alone (one per job); a job
    whose process failed gets none, so its ``restart_identical`` fails."""
    if not jobs:
        return []
    args = [sys.executable, "-m", "holon.runtime.scenarios"]
    out = subprocess.run(args, input=json.dumps(jobs), capture_output=True, text=True, check=False, timeout=3600)
    if out.returncode != 0:
        return [{} for _ in jobs]
    return [{int(k): v for k, v in x.items()} for x in json.loads(out.stdout)]


def _main() -> int:
    """Read jobs (JSON on stdin), write their digests: the other side of ``_fresh_digests``."""
    out = []
    for job in json.loads(sys.stdin.read()):
        settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
        store = Store.open(HomePaths(Path(job["home"])), settings, clock=FakeClock())
        try:
            out.append(
                {
                    w: assemble_at(store, job["agent_id"], job["inputs"], job["started"], w).digest
                    for w in job["windows"]
                }
            )
        finally:
            store.close()
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
