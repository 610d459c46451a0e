"""The whole continuity suite as ``holon bench continuity`` runs it: every scenario under every
applicable variant at every budget must pass, and rewording a conversation (no marker words,
Chinese, longer filler, thirty earlier turns) must never lose a cell the plain wording passes.

Written for issue 17 before the projector met it: it fails until the algorithm does.
"""

from __future__ import annotations

import pytest

from holon.bench.continuity import run_continuity_bench


@pytest.mark.slow  # about two minutes; a fresh process rebuilds every prompt
def test_every_cell_of_the_continuity_suite_passes() -> None:
    r = run_continuity_bench()
    # No variant may pass fewer cells than plain on the scenarios both run (same budgets each).
    for variant in r["variants"]:
        shared = [sid for sid, row in r["scenarios"].items() if variant in row and "plain" in row]
        failed = sum(len(r["scenarios"][sid][variant]) for sid in shared)
        failed_plain = sum(len(r["scenarios"][sid]["plain"]) for sid in shared)
        assert failed <= failed_plain, f"{variant} fails {failed} cells, plain {failed_plain}"
    assert r["cells_passed"] == r["cells_total"], "\n".join(
        f"{f['scenario']} [{f['variant']} @ {f['budget']}]: {', '.join(f['failed'])}" for f in r["failures"]
    )
