"""``holon bench continuity``: every continuity scenario, under every variant, at every budget.

A cell is one (scenario, variant, budget); it passes when every assertion of
``holon.runtime.scenarios`` holds for what the rendered prompt shows. The variants tell the same
conversation another way (other wording without marker words, Chinese, longer filler, thirty
earlier unrelated turns), so a projector that depends on the words it looks for passes ``plain``
and fails the others. The fresh-process determinism check (``restart_identical``) is one new
process at the end that rebuilds every scenario-variant's prompts at all budgets from the kept
ledgers: a process per run would cost more than the whole bench.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from holon.bench.progress import step
from holon.errors import UsageError
from holon.runtime.scenario_variants import VARIANTS
from holon.runtime.scenarios import applicable_variants, conclude, fresh_digests, load_scenario, replay_variants

__all__ = ["DEFAULT_DIR", "METHOD", "format_report", "run_continuity_bench"]

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "tests" / "scenarios"
METHOD = (
    "Each scenario is replayed into a fresh ledger (real projections and episodes) under each applicable "
    "variant (plain; paraphrase: other wording without marker words; zh: Chinese; long_filler: filler 3x "
    "longer; prefix30: 30 earlier unrelated turn pairs) and the next turn's prompt is assembled at each "
    "of its budgets (2,048, 4,096 and 16,384 tokens in the suite); a cell passes when the rendered "
    "prompt shows every required event (its text, or a summary derived from it), no forbidden event, "
    "the question a short reply answers, no message twice, fits the budget, keeps provenance, degrades "
    "monotonically and is byte-identical when rebuilt by a fresh process."
)


def _scratch() -> str | None:
    """Where the bench's ledgers live: memory-backed when the machine has it (thousands of small
    commits; nothing of them is kept), else the default temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _rate(passed: int, total: int) -> float:
    return round(passed / total, 4) if total else 0.0


def run_continuity_bench(directory: Path = DEFAULT_DIR, *, fresh_check: bool = True) -> dict[str, Any]:
    paths = sorted(directory.glob("*.json"))
    if not paths:
        raise UsageError(f"no scenario files (*.json) in {directory}")
    scenarios = [load_scenario(p) for p in paths]
    started = time.perf_counter()
    per_variant: dict[str, list[int]] = {v: [0, 0] for v in VARIANTS}
    table: dict[str, dict[str, list[int]]] = {}
    failures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="holon-continuity-", dir=_scratch()) as tmp:
        replayed = []
        for n, scenario in enumerate(scenarios):
            step(scenario.id, n, len(scenarios) + 1)
            replayed.append(replay_variants(scenario, applicable_variants(scenario), Path(tmp) / f"s{n}"))
        # One fresh process rebuilds every prompt from the ledgers: restart_identical per cell.
        step("fresh process", len(scenarios), len(scenarios) + 1)
        jobs = [job for r in replayed for _result, job in r]
        digests = fresh_digests(jobs) if fresh_check else None
    at = 0
    for scenario, r in zip(scenarios, replayed, strict=True):
        results = conclude(r, digests[at : at + len(r)] if digests is not None else None)
        at += len(r)
        table[scenario.id] = {}
        for variant, result in results.items():
            failed = []
            for b in result["budgets"]:
                per_variant[variant][1] += 1
                if b["passed"]:
                    per_variant[variant][0] += 1
                    continue
                failed.append(b["budget"])
                assertions = [k for k, v in b["assertions"].items() if not v]
                if result["unknown_refs"]:
                    assertions.append("unknown_refs")
                failure = {"scenario": scenario.id, "variant": variant, "budget": b["budget"], "failed": assertions}
                missing = [
                    r for r in scenario.required_refs if not b.get("observed", {}).get(r, {}).get("shown", False)
                ]
                shown = [r for r in scenario.forbidden_refs if b.get("observed", {}).get(r, {}).get("shown", False)]
                if missing:
                    failure["required_not_shown"] = missing
                if shown:
                    failure["forbidden_shown"] = {r: b["observed"][r]["section"] for r in shown}
                if b.get("duplicates"):
                    failure["shown_twice"] = b["duplicates"]
                failures.append(failure)
            table[scenario.id][variant] = failed
    step("done", len(scenarios) + 1, len(scenarios) + 1)
    passed = sum(p for p, _t in per_variant.values())
    total = sum(t for _p, t in per_variant.values())
    return {
        "directory": str(directory),
        "scenarios_run": len(scenarios),
        "cells_passed": passed,
        "cells_total": total,
        "pass_rate": _rate(passed, total),
        "variants": {
            v: {"cells_passed": p, "cells_total": t, "pass_rate": _rate(p, t)} for v, (p, t) in per_variant.items() if t
        },
        "scenarios": table,
        "failures": failures,
        "method": METHOD,
        "fresh_check": fresh_check,
        "seconds": round(time.perf_counter() - started, 1),
    }


def format_report(result: dict[str, Any]) -> str:
    lines = [
        f"continuity: {result['cells_passed']}/{result['cells_total']} cells passed ({result['pass_rate']:.1%}) "
        f"over {result['scenarios_run']} scenarios in {result['seconds']} s",
    ]
    for v, r in result["variants"].items():
        lines.append(f"  {v:<12} {r['cells_passed']:>4}/{r['cells_total']:<4} {r['pass_rate']:.1%}")
    failing = {sid: {v: b for v, b in row.items() if b} for sid, row in result["scenarios"].items()}
    failing = {sid: row for sid, row in failing.items() if row}
    if failing:
        lines.append("failing scenarios (variant: budgets):")
        for sid, row in failing.items():
            lines.append(f"  {sid}: " + "; ".join(f"{v} {','.join(map(str, b))}" for v, b in row.items()))
    lines.append(result["method"])
    return "\n".join(lines)
