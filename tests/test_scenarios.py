"""The continuity acceptance suite: every scenario under tests/scenarios/ at each of its budgets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from holon.runtime.scenarios import (
    Scenario,
    ScenarioEvent,
    conclude,
    fresh_digests,
    load_scenario,
    replay_variants,
    run_scenario,
)

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))
REQUIRED_ASSERTIONS = {
    "budget_respected",
    "current_input_present",
    "short_reply_predecessor_present",
    "required_refs_present",
    "forbidden_refs_absent",
    "superseded_marked",
    "no_duplicate_evidence",
    "no_duplicate_shown",
    "provenance_kept",
    "monotone_degradation",
    "restart_identical",
}


def test_the_suite_covers_what_the_issue_asks_for() -> None:
    names = {p.stem for p in SCENARIOS}
    assert {"decision-10", "decision-40", "decision-200", "topic-switch", "topic-return", "work-items-aba"} <= names
    assert {"wait-restart-task", "background-wakes", "short-reply-en", "short-reply-zh"} <= names
    kinds = {e.kind for p in SCENARIOS for e in load_scenario(p).events}
    assert kinds >= {
        "operator", "assistant", "external", "timer", "task_result", "agent_lifecycle", "work_item_create",
        "work_item_return", "wait", "restart", "recovery",
    }  # fmt: skip
    assert all(set(load_scenario(p).budgets) >= {2048, 4096, 16384} for p in SCENARIOS)


#: Scenarios the projector does not pass yet in their plain wording (issue 17 is open: see
#: ``holon bench continuity --json`` for every failing cell and why). Run, never skipped: a
#: scenario listed here that starts to pass is reported as XPASS, and one not listed must pass.
NOT_YET = frozenset(
    {
        "ov-meeting-dentist",
        "ov-status-update-team",
    }
)


@pytest.fixture(scope="module")
def plain_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every scenario's plain wording replayed once, and one fresh process rebuilding all their
    prompts (``restart_identical``), as ``holon bench continuity`` does: a process per scenario
    cost most of this file's time."""
    root = tmp_path_factory.mktemp("scenarios")
    replayed = [replay_variants(load_scenario(p), ["plain"], root / p.stem) for p in SCENARIOS]
    digests = fresh_digests([job for r in replayed for _result, job in r])
    assert len(digests) == len(SCENARIOS)
    return {p.stem: conclude(r, [d])["plain"] for p, r, d in zip(SCENARIOS, replayed, digests, strict=True)}


@pytest.mark.slow  # the fixture starts a process
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_passes_at_every_budget(
    path: Path, request: pytest.FixtureRequest, plain_results: dict[str, dict[str, Any]]
) -> None:
    if path.stem in NOT_YET:
        request.applymarker(pytest.mark.xfail(reason="issue 17: not met yet", strict=False))
    result = plain_results[path.stem]
    failures = {
        b["budget"]: [k for k, v in b["assertions"].items() if not v] for b in result["budgets"] if not b["passed"]
    }
    assert result["passed"], failures
    for b in result["budgets"]:
        assert set(b["assertions"]) == REQUIRED_ASSERTIONS
        assert b["used_tokens"] <= b["budget"]


def _conversation(n: int) -> list[ScenarioEvent]:
    out = []
    for _ in range(n):
        out += [ScenarioEvent(kind="operator"), ScenarioEvent(kind="assistant")]
    return out


def test_a_violated_expectation_fails_and_says_which() -> None:
    events = [
        ScenarioEvent(kind="operator", ref="message:early", text="The staging password rotates on Mondays."),
        ScenarioEvent(kind="assistant", text="Noted."),
        *_conversation(3),
        ScenarioEvent(kind="operator", ref="message:now", text="When does the staging password rotate?"),
    ]
    scenario = Scenario(
        id="forbid-what-must-be-there", budgets=[16384], events=events, forbidden_refs=["message:early"]
    )
    result = run_scenario(scenario, fresh_check=False)
    assert not result["passed"]
    (b,) = result["budgets"]
    assert b["assertions"]["forbidden_refs_absent"] is False
    assert "message:early" in b["included_refs"]


def test_unknown_refs_fail_the_scenario() -> None:
    events = [ScenarioEvent(kind="operator", ref="message:a", text="hello there")]
    result = run_scenario(
        Scenario(id="typo", budgets=[4096], events=events, required_refs=["message:b"]), fresh_check=False
    )
    assert not result["passed"] and result["unknown_refs"] == ["message:b"]


def test_a_scenario_must_end_with_an_input() -> None:
    from holon.errors import UsageError

    events = [ScenarioEvent(kind="operator", text="hi"), ScenarioEvent(kind="assistant", text="hello")]
    with pytest.raises(UsageError, match="must end with an input"):
        run_scenario(Scenario(id="no-input", budgets=[4096], events=events), fresh_check=False)


@pytest.mark.slow
def test_cli_runs_a_scenario_and_reports_per_budget(tmp_path: Path) -> None:
    path = Path(__file__).parent / "scenarios" / "background-wakes.json"
    out = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "scenario", "run", str(path), "--budget", "4096", "--variant", "zh", "--json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["passed"] is True and data["variant"] == "zh"
    (b,) = data["budgets"]
    assert b["budget"] == 4096 and b["passed"] is True
    assert {"included_refs", "omitted_refs", "observed", "assertions"} <= set(b)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "x", "events": [{"kind": "nonsense"}]}))
    out = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "scenario", "run", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "events.0.kind" in out.stderr and "Traceback" not in out.stderr


def test_the_verdict_reports_what_the_prompt_shows_and_where() -> None:
    events = [
        ScenarioEvent(kind="operator", ref="message:ask", text="Renew the wildcard certificate for example.org."),
        ScenarioEvent(kind="work_item_create", ref="work_item:cert", text="Renew the example.org certificate"),
        ScenarioEvent(kind="assistant", owner="work_item:cert", text="Renewing it with certbot now."),
        ScenarioEvent(kind="wait", ref="wait:dns", text="the DNS provider's API to answer again"),
        ScenarioEvent(kind="operator", ref="message:now", text="ok"),
        ScenarioEvent(kind="assistant", text="Done."),
        ScenarioEvent(kind="operator", text="ok"),
        ScenarioEvent(kind="assistant", text="Done."),
        ScenarioEvent(kind="operator", ref="message:current", text="What is still open?"),
    ]
    scenario = Scenario(id="observed", budgets=[16384], events=events, required_refs=["work_item:cert", "wait:dns"])
    (b,) = run_scenario(scenario, fresh_check=False)["budgets"]
    assert b["observed"]["work_item:cert"] == {"shown": True, "how": "text", "section": "work_item"}
    assert b["observed"]["wait:dns"]["shown"] and b["observed"]["wait:dns"]["how"] == "text"
    assert b["observed"]["message:current"]["section"] == "input"
    assert b["assertions"]["required_refs_present"]
    # "ok" and "Done." said twice are two messages, not one message shown twice.
    assert b["assertions"]["no_duplicate_shown"], b.get("duplicates")
    assert set(b["included_refs"]) | set(b["omitted_refs"]) == set(b["observed"])
