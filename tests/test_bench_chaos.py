"""``holon bench chaos``: SIGKILLs under mixed-size HTTP load, every acknowledged input accounted for.

The slow test runs a small bench end to end (real daemon, real kills, real HTTP) in a subprocess
and checks the report. The fast tests pin the accounting on hand-built ledger rows: what counts
as lost, answered once, answered twice, rejected or unanswered.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.turn_cli import REPO, cli_env, holon_argv
from hypothesis import given
from hypothesis import strategies as st

from holon.bench.chaos import format_report
from holon.bench.chaos_ledger import UNKNOWN_SEQ, classify, key_of, marked

KEYS = ("acknowledged", "answered_once", "answered_twice", "unanswered", "lost", "rejected", "kills", "retries",
        "wall_s", "ok")  # fmt: skip


# --- the bench end to end ------------------------------------------------------------------------


def _tree(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            for child in (task / "children").read_text().split():
                out |= {int(child), *_tree(int(child))}
    return out


def _alive_as_ours(pid: int) -> bool:
    """Still running and still a process of this test's (not a reused pid): a holon or Python one."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and (b"holon" in cmdline or b"python" in cmdline)


@contextlib.contextmanager
def _bench(home: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``holon bench chaos ARGS`` in a subprocess; it and everything it started are reaped on exit,
    even on failure: SIGTERM first (the bench then stops its daemon and model), then SIGKILL for
    every process ever seen below it (a thread keeps the list while it runs)."""
    proc = subprocess.Popen(
        holon_argv("--home", home, "bench", "chaos", *args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
    )  # fmt: skip
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            seen.update(_tree(proc.pid))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        done.set()
        watcher.join(5)
        for pid in seen:
            if _alive_as_ours(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_bench_chaos_small_run_loses_nothing_acknowledged(tmp_path: Path) -> None:
    keep = tmp_path / "chaos"
    args = ("--kills", "2", "--duration-s", "8", "--agents", "2", "--clients", "2", "--seed", "3",
            "--dir", str(keep), "--json")  # fmt: skip
    with _bench(tmp_path / "unused", *args) as proc:
        out, err = proc.communicate(timeout=300)  # on a timeout, _bench reaps everything
    code = proc.returncode
    assert "Traceback" not in err, err
    report: dict[str, Any] = json.loads(out)
    assert set(KEYS) <= set(report), sorted(report)
    assert report["kills"] == 2 and report["acknowledged"] > 0 and report["retries"] > 0, report
    assert report["lost"] == 0, report
    total = sum(report[k] for k in ("answered_once", "answered_twice", "rejected", "unanswered", "lost"))
    assert total == report["acknowledged"], report  # every acknowledged key is in exactly one class
    assert code == (0 if report["ok"] else 1), (code, report)
    assert not (keep / "home" / "run" / "daemon.pid").exists(), "the final daemon was not stopped"
    assert "lost 0" in format_report(report)
    # Issue 14: idempotent retries, exactly-once answers and admission by size leave nothing twice or unanswered.
    assert report["answered_twice"] == 0 and report["unanswered"] == 0, report
    assert report["duplicate_inputs"] == 0 and report["ok"] is True and code == 0, report


# --- the accounting ------------------------------------------------------------------------------


def _started(turn: str, *seqs: int) -> dict[str, Any]:
    return {"turn_id": turn, "inputs": list(seqs)}


def _final(turn: str) -> dict[str, Any]:
    return {"turn_id": turn, "round": 0, "model": "m", "content": "Done.", "tool_calls": [], "error": None}


def test_each_acknowledged_key_lands_in_exactly_one_class() -> None:
    inputs: dict[int, object] = {
        10: marked("once", "hi"),
        11: marked("twice", "hi"),  # answered, interrupted before the settle, answered again
        12: marked("dup", "hi"),  # stored twice: the retry was not recognised
        13: marked("dup", "hi"),
        14: marked("rejected", "x" * 10),
        15: marked("stuck", "hi"),  # taken by a failed turn that answered nothing
        16: {"blob": "0" * 64, "size": 70_000, "preview": marked("big", "lorem")},
        17: "an input from someone else",
        18: marked("never-acked", "hi"),
    }
    acks = {"once": 10, "twice": 11, "dup": 12, "rejected": 14, "stuck": 15, "big": 16, "gone": 99, "moved": 17}
    started = [_started("t1", 10, 11), _started("t2", 11), _started("t3", 12), _started("t4", 13),
               _started("t5", 14), _started("t6", 15), _started("t7", 16)]  # fmt: skip
    responded = [_final("t1"), _final("t2"), _final("t3"), _final("t4"), _final("t7"),
                 {"turn_id": "t6", "content": None, "tool_calls": [], "error": "context window exceeded"}]  # fmt: skip
    settled = [
        {"turn_id": "t1", "outcome": "interrupted", "requeue": True},
        {"turn_id": "t2", "outcome": "completed", "reply": "Done."},
        {"turn_id": "t5", "outcome": "failed", "reason": "too big for any prompt", "rejected": [14]},
        {"turn_id": "t6", "outcome": "failed"},
    ]
    got = classify(acks, inputs, started, responded, settled, queued={15, 17})
    counts = {k: v for k, v in got.as_dict().items() if k in KEYS}
    assert counts == {"acknowledged": 8, "answered_once": 2, "answered_twice": 2, "rejected": 1, "unanswered": 1,
                      "lost": 2}, got  # fmt: skip
    assert got.duplicate_inputs == 1 and got.unacknowledged_stored == 1 and got.unanswered_queued == 1
    assert set(got.examples) == {"answered_twice", "rejected", "unanswered", "lost"}
    assert any("gone" in e for e in got.examples["lost"]) and any("moved" in e for e in got.examples["lost"])


def test_an_acknowledgement_without_a_seq_is_found_by_its_key() -> None:
    got = classify({"k": UNKNOWN_SEQ, "j": UNKNOWN_SEQ}, {5: marked("k", "hi")}, [_started("t", 5)], [_final("t")], [])
    assert (got.answered_once, got.lost) == (1, 1)


def test_an_input_a_settle_names_as_rejected_counts_as_rejected_not_unanswered() -> None:
    settled = [{"turn_id": "t", "outcome": "failed", "requeue": False, "rejected": [5], "reason": "too big"}]
    got = classify({"k": 5}, {5: marked("k", "hi")}, [_started("t", 5)], [], settled)
    assert got.rejected == 1 and got.unanswered == 0


def test_a_turn_that_settles_completed_with_a_reply_answers_even_without_model_rows() -> None:
    got = classify({"k": 5}, {5: marked("k", "hi")}, [_started("t", 5)], [],
                   [{"turn_id": "t", "outcome": "completed", "reply": "ok"}])  # fmt: skip
    assert got.answered_once == 1


def test_tool_calls_and_errors_are_not_final_answers() -> None:
    responded = [
        {"turn_id": "t", "content": "let me look", "tool_calls": [{"name": "x"}], "error": None},
        {"turn_id": "t", "content": None, "tool_calls": [], "error": "boom"},
    ]
    got = classify(
        {"k": 5}, {5: marked("k", "hi")}, [_started("t", 5)], responded, [{"turn_id": "t", "outcome": "failed"}]
    )
    assert got.unanswered == 1


@given(st.one_of(st.text(), st.none(), st.integers(), st.dictionaries(st.text(), st.text())))
def test_key_of_never_raises_on_any_stored_text(text: object) -> None:
    key = key_of(text)
    assert key is None or isinstance(key, str)


@given(st.from_regex(r"[A-Za-z0-9_.:-]{1,128}", fullmatch=True), st.text())
def test_marked_text_gives_its_key_back(key: str, body: str) -> None:
    assert key_of(marked(key, body)) == key
    assert key_of({"preview": marked(key, body)[:200]}) == key
