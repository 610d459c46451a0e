"""``holon bench daemon`` end to end at a tiny size: real processes, the report's keys and sanity."""

from __future__ import annotations

import pytest
from helpers.turn_cli import holon

from holon.bench.daemon import format_report

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # a deadline for a hang: a loaded machine took 280 s


def test_bench_daemon_tiny(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = holon(tmp_path / "unused", "bench", "daemon", "--agents", "3", "--turns", "2", "--latency-ms", "20",
              "--idle-agents", "5", "--idle-window-s", "1", "--events-small", "300", "--events-large", "900",
              "--restart-agents", "3", "--restart-runs", "1",
              "--input-clients", "2", "--inputs", "4", "--input-agents", "1", "--input-rounds", "1",
              "--json", timeout=840)  # fmt: skip
    assert r.code == 0, r
    out = r.json()
    for key in ("wall_s", "cpu_s", "cpu_s_daemon", "cpu_ms_per_turn", "cpu_ms_per_turn_daemon", "turns_per_s",
                "idle_rss_mb_1000_agents", "restart_s_10k", "restart_s_1m", "restart_cpu_s_10k",
                "restart_cpu_s_1m"):  # fmt: skip
        assert isinstance(out[key], float) and out[key] > 0, key
    assert isinstance(out["idle_cpu_pct_1000_agents"], float) and out["idle_cpu_pct_1000_agents"] >= 0
    assert out["wall_s"] >= 2 * 0.020  # no agent can beat the model's latency
    assert out["latency_bound_turns_per_s"] == pytest.approx(3 / 0.020)
    assert 0 < out["turns_per_s_vs_latency_bound"] <= 1.0  # nothing beats the model's latency
    ratio = out["turns_per_s"] / out["latency_bound_turns_per_s"]
    assert out["turns_per_s_vs_latency_bound"] == pytest.approx(ratio, rel=0.1, abs=0.002)
    assert out["cpu_s_daemon"] <= out["cpu_s"] + 0.02  # the daemon's own process is part of its tree
    assert "efficiency" not in out
    assert "latency_bound_turns_per_s" in out["method"] and "cpu_ms_per_turn" in out["method"]
    assert "restart_cpu_s" in out["method"]
    assert out["restart_events_large"] >= 900 and out["restart_events_small"] >= 300
    assert out["restart_growth"] == pytest.approx(out["restart_s_1m"] / out["restart_s_10k"], rel=0.01)
    assert out["rss_mb_after_run"] > 0  # the daemon and its model processes
    assert "latency bound" in format_report(out) and "RSS after the run" in format_report(out)
    assert out["sections"] == ["throughput", "idle", "restart", "inputs"] and out["lost_inputs"] == 0


def test_bench_daemon_inputs_tiny(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The input section alone: group commit on and off, every acknowledged input in the ledger."""
    r = holon(tmp_path / "unused", "bench", "daemon", "--sections", "inputs", "--input-clients", "1,4",
              "--inputs", "16", "--input-agents", "2", "--input-rounds", "1", "--json", timeout=600)  # fmt: skip
    assert r.code == 0, r
    out = r.json()
    assert out["sections"] == ["inputs"] and "turns_per_s" not in out and "restart_s_1m" not in out
    assert out["lost_inputs"] == 0
    assert out["inputs_acknowledged"] == 2 * 2 * 16  # both modes, both client counts
    for c in (1, 4):
        for suffix in ("", "_no_group"):
            assert out[f"inputs_per_s_c{c}{suffix}"] > 0
            assert out[f"inputs_per_cpu_s_c{c}{suffix}"] is None or out[f"inputs_per_cpu_s_c{c}{suffix}"] > 0
            assert out[f"inputs_per_commit_c{c}{suffix}"] >= 1, (c, suffix)
        assert out[f"group_commit_ratio_c{c}"] > 0 and f"group_commit_cpu_ratio_c{c}" in out
    # One client waits for each acknowledgement before its next input; without group commit every
    # input is its own commit.
    assert (
        out["inputs_per_commit_c1"] == out["inputs_per_commit_c1_no_group"] == out["inputs_per_commit_c4_no_group"] == 1
    )
    assert out["input_synchronous"] == "FULL" and out["input_clients"] == [1, 4]
    assert "group_commit = false" in out["method"] and "lost_inputs" in out["method"]
    assert "without group commit" in format_report(out)
