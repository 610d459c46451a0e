"""``holon bench context`` at a tiny size: its keys, including ``method``."""

from __future__ import annotations

import pytest

from holon.bench.context import format_report, run_context_bench
from holon.bench.progress import reporting


@pytest.mark.slow  # runs a benchmark
def test_bench_context_tiny() -> None:
    steps: list[str] = []
    with reporting(lambda label, done, total: steps.append(label)):
        r = run_context_bench(events=1_500, samples=2, own_turns=4, stability_turns=3)
    for name in ("8k", "32k", "128k"):
        assert r[f"p50_ms_{name}"] > 0 and r[f"p95_ms_{name}"] > 0 and r[f"cpu_ms_p50_{name}"] >= 0
    assert 0 <= r["prefix_stability"] <= 1 and set(r["prefix_stability_by_budget"]) == {"8k", "32k", "128k"}
    assert r["ledger_events"] >= 1_500 and r["stability_turns"] == 3
    assert "byte-identical" in r["method"] and "1,500 events" in r["method"]
    assert any("filling" in s for s in steps)
    assert "prefix stability over 3 turns" in format_report(r)
