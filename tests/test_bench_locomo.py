"""``holon bench locomo`` on a small conversation written by the test (the real data is never committed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from holon.bench.locomo import format_report, leave_one_out, load_conversation, run_locomo_bench
from holon.errors import UsageError

SENTINEL = "ANNOTATIONSENTINEL"


def _conversation(tmp_path: Path) -> Path:
    data = {
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "Hi Bo! How was your week?"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Great, I finally bought a red kayak for the lake."},
                {"speaker": "Ada", "dia_id": "D1:3", "text": "Nice! I started pottery classes on Tuesday."},
                {
                    "speaker": "Bo",
                    "dia_id": "D1:4",
                    "text": "Look at this!",
                    "blip_caption": "a photo of a sunflower painting",
                },
            ],
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": [
                {"speaker": "Ada", "dia_id": "D2:1", "text": "My pottery teacher said my bowl was the best."},
                {"speaker": "Bo", "dia_id": "D2:2", "text": "We took the kayak out on Saturday morning."},
            ],
        },
        "observation": {"D1:2": SENTINEL},
        "session_summary": {"session_1": SENTINEL},
        "event_summary": {"events_session_1": SENTINEL},
        "qa": [
            {"question": "What colour is Bo's kayak?", "answer": "red", "evidence": ["D1:2"], "category": 4},
            {"question": "What did Bo paint?", "answer": "sunflower", "evidence": ["D1:4"], "category": 4},
            {
                "question": "What does Ada make in pottery?",
                "answer": "bowl",
                "evidence": ["D:2:1; D1:3"],
                "category": 1,
            },
            {"question": "Unanswerable", "answer": "n/a", "evidence": [], "category": 5},
        ],
    }
    path = tmp_path / "conv-test.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_loader_reads_turns_and_questions_only(tmp_path: Path) -> None:
    conv = load_conversation(_conversation(tmp_path))
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"]
    assert "sunflower" in conv.turns[3].text  # the shared photo's caption is part of the turn
    assert conv.turns[4].ts_us > conv.turns[3].ts_us  # session dates become event times, in order
    assert [q.evidence for q in conv.questions] == [("D1:2",), ("D1:4",), ("D2:1", "D1:3")]  # normalised
    assert all(SENTINEL not in t.text for t in conv.turns)


@pytest.mark.slow  # a benchmark run
def test_bench_finds_the_evidence(tmp_path: Path) -> None:
    _conversation(tmp_path)
    result = run_locomo_bench(tmp_path, k=5)
    assert result["questions"] == 3
    assert result["recall@5"] == 1.0
    assert set(result["by_category"]) == {"single_hop", "multi_hop"}
    assert result["conversations"] == {
        "conv-test": {"questions": 3, "recall@5": 1.0, "recall@10": 1.0, "recall@20": 1.0}
    }
    assert "conv-test       3 questions  recall@5 1.000" in format_report(result)


@pytest.mark.slow
def test_cli_json(tmp_path: Path) -> None:
    _conversation(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "bench", "locomo", "--data", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(out.stdout)
    for key in ("questions", "recall@5", "recall@10", "recall@20", "by_category", "search_ms_p50", "search_ms_p95"):
        assert key in report


@pytest.mark.slow
def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "bench", "locomo", "--data", str(tmp_path / "nope")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "does not exist" in out.stderr


@pytest.mark.slow
def test_cli_set_overrides_a_weight_and_refuses_unknown_names(tmp_path: Path) -> None:
    _conversation(tmp_path)
    base = [sys.executable, "-m", "holon.cli.main", "bench", "locomo", "--data", str(tmp_path), "--json"]
    ok = subprocess.run(
        [*base, "--set", "prev=0", "--set", "next=0"], capture_output=True, text=True, timeout=120, check=False
    )
    assert ok.returncode == 0 and "recall@10" in json.loads(ok.stdout)
    bad = subprocess.run([*base, "--set", "nope=1"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--set takes NAME=NUMBER" in bad.stderr


def _run(per: dict[str, tuple[int, float]]) -> dict[str, object]:
    return {"conversations": {c: {"questions": n, "recall@10": r} for c, (n, r) in per.items()}}


def test_leave_one_out_scores_each_choice_on_the_conversation_it_did_not_see() -> None:
    # "lucky" fits conversations a and b and is worse on c; chosen on a+b it is scored on c.
    runs = {
        "default": _run({"a": (10, 0.5), "b": (10, 0.5), "c": (20, 0.8)}),
        "lucky": _run({"a": (10, 0.9), "b": (10, 0.9), "c": (20, 0.6)}),
    }
    loo = leave_one_out(runs, baseline="default")
    by_held = {f["held_out"]: f for f in loo["folds"]}
    assert by_held["c"]["chosen"] == "lucky" and by_held["c"]["test"] == 0.6
    assert by_held["c"]["test_baseline"] == 0.8
    # held out a: trained on b (0.9 vs 0.5) and c (0.6 vs 0.8), 10+20 questions: 0.7 vs 0.7, a tie
    assert by_held["a"]["chosen"] == "default"  # ties keep the defaults
    assert by_held["b"]["chosen"] == "default"
    assert loo["held_out"] == round((0.5 * 10 + 0.5 * 10 + 0.6 * 20) / 40, 4)
    assert loo["held_out_baseline"] == round((0.5 * 10 + 0.5 * 10 + 0.8 * 20) / 40, 4)


def test_leave_one_out_needs_its_baseline() -> None:
    with pytest.raises(UsageError, match="no run labelled"):
        leave_one_out({"x": _run({"a": (1, 1.0)})}, baseline="default")


@pytest.mark.slow
def test_conversations_select_files_and_a_missing_one_is_named(tmp_path: Path) -> None:
    _conversation(tmp_path)
    (tmp_path / "conv-other.json").write_text(
        (tmp_path / "conv-test.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    result = run_locomo_bench(tmp_path, k=5, conversations="conv-test")
    assert list(result["conversations"]) == ["conv-test"]
    assert result["conversations_run"] == "conv-test"
    with pytest.raises(UsageError, match="conv-44"):
        run_locomo_bench(tmp_path, k=5, conversations="held-out")
