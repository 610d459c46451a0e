"""``holon bench turn`` at a tiny size: the same agent history on both ledgers, the report's keys."""

from __future__ import annotations

import pytest

from holon.bench.progress import reporting
from holon.bench.turn import format_report, run_turn_bench


@pytest.mark.slow  # runs a benchmark
def test_bench_turn_tiny() -> None:
    steps: list[str] = []
    with reporting(lambda label, done, total: steps.append(label)):
        r = run_turn_bench(large_events=2_500, turns=3, history_turns=4, warmup=1)
    for key in ("overhead_ms_p50_small", "overhead_ms_p50_large", "cpu_ms_p50_small", "cpu_ms_p50_large",
                "overhead_ms_p50_fresh", "growth_ratio_same_history", "growth_ratio_own_history"):  # fmt: skip
        assert isinstance(r[key], float) and r[key] > 0, key
    assert r["growth_ratio_same_history"] == pytest.approx(
        r["overhead_ms_p50_large"] / r["overhead_ms_p50_small"], rel=0.01
    )
    assert r["growth_ratio_own_history"] == pytest.approx(
        r["overhead_ms_p50_small"] / r["overhead_ms_p50_fresh"], rel=0.01
    )
    # The large ledger is the small one's history among many more other agents' events.
    assert 1_000 <= r["prior_events_small"] < 1_200 and r["prior_events_large"] >= 2_500
    assert r["model_rounds_per_turn"] == 2.0  # the script's two rounds, counted
    assert r["sections_built_per_turn"] >= 1.0  # measured, not asserted to the target
    assert "same 4 settled turns" in r["method"] and r["history_turns"] == 4
    assert any("filling" in s for s in steps) and any("measuring" in s for s in steps)
    assert "same history" in format_report(r)
