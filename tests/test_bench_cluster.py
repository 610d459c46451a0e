"""``holon bench cluster`` at a tiny size: several real nodes on a throwaway PostgreSQL database.

The bench runs in a subprocess (in a session of its own, so that its node processes are reaped
with it whatever happens) and its JSON report is checked: every key of the issue's list is there,
and nothing acknowledged was lost or answered twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import pytest
from helpers.pg import ADMIN_URL
from helpers.turn_cli import REPO, cli_env, holon_argv

pytestmark = pytest.mark.slow

KEYS = ("method", "append_ratio_pg_vs_raw", "append_ratio_pg_vs_raw_sync_off", "turns_per_s", "scaling_2_over_1",
        "write_tx_per_turn", "wal_syncs_per_turn", "cpu_ms_per_turn", "failover_s", "failover_s_p95",
        "acknowledged", "lost_inputs", "duplicate_turns", "targets", "cluster_cores", "latency_bound", "of_bound",
        "bound_turns_per_s", "model_calls_per_turn")  # fmt: skip


def test_bench_cluster_reports_every_key_and_loses_nothing() -> None:
    argv = holon_argv(
        "bench", "cluster", "--nodes", "1,2", "--per-node", "1", "--seconds", "2", "--samples", "1",
        "--lease-s", "3", "--rounds", "1", "--latency-ms", "50", "--json",
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=REPO, env=cli_env(HOLON_BENCH_PG=ADMIN_URL), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=400)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the bench and any node it left behind
        proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)
    missing = [k for k in KEYS if k not in report]
    assert not missing, missing
    assert set(report["turns_per_s"]) == {"1", "2"} and all(v > 0 for v in report["turns_per_s"].values()), report
    assert report["acknowledged"] > 0
    assert (report["lost_inputs"], report["duplicate_turns"]) == (0, 0), report
    assert len(report["failover_s"]) == 1 and report["failover_s_p95"] > 0, report
    # the cluster's CPU is the nodes', their model children's and this database's backends'; the
    # bench's own (clients, fake model) beside it, never in it
    for point in report["cpu_ms_per_turn"].values():
        assert abs(point["cluster"] - (point["nodes"] + point["models"] + point["postgres"])) < 0.5, point
    assert report["bound_turns_per_s"] == {"1": 20.0, "2": 40.0}, report  # 1 agent per node at 50 ms
