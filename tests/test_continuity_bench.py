"""``holon bench continuity`` on a handful of scenarios: the report's shape and its arithmetic."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from holon.bench.continuity import run_continuity_bench

SUITE = Path(__file__).parent / "scenarios"
HANDFUL = ("sr-yes-migrations", "ts-start-on-offsite", "wi-wait-legal")


def handful(tmp_path: Path) -> Path:
    d = tmp_path / "scenarios"
    d.mkdir()
    for name in HANDFUL:
        shutil.copy(SUITE / f"{name}.json", d)
    return d


@pytest.mark.slow  # runs a benchmark
def test_the_report_counts_cells_per_variant_and_names_failures(tmp_path: Path) -> None:
    r = run_continuity_bench(handful(tmp_path), fresh_check=False)
    assert r["scenarios_run"] == 3
    assert set(r["variants"]) == {"plain", "paraphrase", "zh", "long_filler", "prefix30"}
    assert r["cells_total"] == 3 * 5 * 3 == sum(v["cells_total"] for v in r["variants"].values())
    assert r["cells_passed"] == sum(v["cells_passed"] for v in r["variants"].values())
    assert r["pass_rate"] == round(r["cells_passed"] / r["cells_total"], 4)
    assert set(r["scenarios"]) == set(HANDFUL)
    failed_cells = sum(len(b) for row in r["scenarios"].values() for b in row.values())
    assert failed_cells == len(r["failures"]) == r["cells_total"] - r["cells_passed"]
    for f in r["failures"]:
        assert f["budget"] in r["scenarios"][f["scenario"]][f["variant"]] and f["failed"]
    assert "rendered prompt" in r["method"]


@pytest.mark.slow  # starts the holon CLI
def test_the_cli_runs_the_bench_with_a_fresh_process_check(tmp_path: Path) -> None:
    d = tmp_path / "one"
    d.mkdir()
    shutil.copy(SUITE / "sr-yes-migrations.json", d)
    out = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "bench", "continuity", "--dir", str(d), "--json"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["cells_total"] == 15 and r["fresh_check"] is True
    assert not [f for f in r["failures"] if "restart_identical" in f["failed"]]
