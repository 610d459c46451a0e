"""``holon bench dashboard`` at a tiny size: real daemon and model processes, the report's keys and
sanity (figures are the bench's business, never asserted against a clock here)."""

from __future__ import annotations

import pytest

from holon.bench.dashboard import format_report, run_dashboard_bench

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_bench_dashboard_tiny() -> None:
    out = run_dashboard_bench(agents=6, samples=3, live_inputs=3)
    assert (out["agents"], out["samples"], out["live_inputs"]) == (6, 3, 3)
    for key in ("agents_page_first_ms_6", "agents_page_ms_p50_6", "agents_page_ms_p95_6", "anchor_ms_p50",
                "anchor_ms_p95", "live_turn_ms_p50", "live_turn_first_ms"):  # fmt: skip
        assert isinstance(out[key], float) and out[key] > 0, key
    for key in ("live_delay_first_ms", "live_delay_ms_p50", "live_delay_ms_p95", "live_delay_ms_max"):
        assert isinstance(out[key], float) and out[key] >= 0, key  # an event may beat its acknowledgement: 0
    for key in ("agents_page_cpu_ms_6", "anchor_cpu_ms"):  # a request may fall between two 10 ms ticks: 0
        assert isinstance(out[key], float) and out[key] >= 0, key
    assert out["agents_page_ms_p50_6"] <= out["agents_page_ms_p95_6"]
    assert out["anchor_ms_p50"] <= out["anchor_ms_p95"]
    assert out["live_delay_ms_p50"] <= out["live_delay_ms_p95"] <= out["live_delay_ms_max"]
    assert out["agents_page_vs_anchor_p50"] == pytest.approx(
        out["agents_page_ms_p50_6"] / out["anchor_ms_p50"], rel=0.05
    )
    assert len(out["load_1m"]) == 2 and out["synchronous"] == "NORMAL"
    assert "GET /v1/agents" in out["method"] and "/ui/agents/{a}/events" in out["method"]
    assert "6 registered agents" in out["method"]
    report = format_report(out)
    assert "agents page" in report and "live view" in report and "anchor" in report


def test_bench_dashboard_refuses_empty_sizes() -> None:
    with pytest.raises(ValueError):
        run_dashboard_bench(agents=0)
