"""Signs of life in ``holon chat`` (issue 15, item 4), in a real pseudo-terminal against a real
daemon and a ``FakeLLM``: a spinner with the elapsed time while the model has said nothing, the
reply streamed fragment by fragment in order with the spinner gone, and "starting the model
process…" while the model process is still starting (a start slowed by the model process's test
hook), after which ``holon trace stats`` shows that start as a cold start, not model latency.
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from helpers.daemon import chat_home, payloads
from helpers.turn_cli import cli_env, holon, holon_argv
from rich.console import Console

from holon.api.models import EventOut
from holon.api.server import free_port
from holon.repl.render import ReplyView
from holon.runtime.providers.model_process import START_DELAY_ENV

pytestmark = pytest.mark.timeout(120)

PROMPT = "alice>"
SPINNER = r"thinking \d+\.\d s"


def _step(body: dict[str, Any]) -> dict[str, Any]:
    # Silent for a while (the spinner's time), then three fragments with gaps between them.
    return {"content": ["Alpha ", "Beta ", "Gamma."], "delay": 1.5, "chunk_delay": 0.4}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    with chat_home(tmp_path, _step) as home:
        yield home


def _chat(home: Path, **env: str) -> pexpect.spawn:
    argv = holon_argv("--home", home, "chat")
    child = pexpect.spawn(
        argv[0], argv[1:], env=cli_env(HOLON_API_PORT=str(free_port()), PROMPT_TOOLKIT_NO_CPR="1", **env),
        encoding="utf-8", timeout=40, dimensions=(40, 120),
    )  # fmt: skip
    child.logfile_read = sys.stdout  # shown by pytest when the test fails
    return child


@pytest.mark.slow
def test_a_spinner_runs_until_the_reply_streams_in_order(home: Path) -> None:
    child = _chat(home)
    try:
        child.expect(PROMPT)
        child.sendline("Tell me three words")
        child.expect(SPINNER)  # the model is silent: the spinner counts
        child.expect("Alpha")
        child.expect("Beta")
        between = child.before
        child.expect(r"Gamma\.")
        between += child.before
        # Once text streams, the spinner is gone: nothing of it between the fragments.
        assert "thinking" not in between, between
        child.expect(PROMPT)
        child.sendline("/agents")
        child.expect(r"alice\s+│")
        assert not re.search(SPINNER, child.before), "the spinner outlived the turn"
        child.expect(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


@pytest.mark.slow
def test_the_repl_says_the_model_is_starting_and_stats_count_it_as_a_cold_start(home: Path) -> None:
    # The model process takes 10 s longer than usual to become ready (after importing litellm).
    child = _chat(home, **{START_DELAY_ENV: "10"})
    try:
        child.expect(PROMPT)
        child.sendline("hello")
        child.expect("starting the model process…")
        child.expect(r"starting the model process… \d+\.\d s")  # the spinner says it too
        child.expect("Alpha")
        child.expect(r"Gamma\.")
        child.expect(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    r = holon(home, "trace", "stats", "--json")
    assert r.code == 0, r
    stats = r.json()
    [(asked_seq, _, asked_us, _)] = payloads(home, "model.requested")
    [(started_seq, _, _, started)] = payloads(home, "model.started")
    [(_, _, answered_us, _)] = payloads(home, "model.responded")
    assert started["what"] == "model process" and started["duration_ms"] > 0
    assert stats["model_start"] == {"n": 1, "p50_ms": started["duration_ms"], "p95_ms": started["duration_ms"]}
    # Model latency is the call without its wait for the start: the turn's question for the model's
    # window waited for it, before the turn's request (the daemon asks its model process).
    assert started_seq < asked_seq
    latency = stats["agents"]["alice"]["model_latency_ms"]["p50"]
    assert latency == pytest.approx((answered_us - asked_us) / 1000, abs=0.01)


def _event(seq: int, type_: str, **payload: Any) -> EventOut:
    return EventOut.model_validate(
        {"seq": seq, "id": f"evt_{seq}", "agent_id": "agt_a", "type": type_, "version": 1, "ts_us": 1,
         "origin": "o", "hash": "h", "authority": "runtime", "payload": payload}
    )  # fmt: skip


def test_the_spinner_stops_before_any_output_and_stays_off_after_the_final_answer() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    view = ReplyView(console, "alice")
    view.spinner.interval_s = 0.01
    view.begin()
    deadline = time.monotonic() + 10
    while "thinking" not in out.getvalue():
        assert time.monotonic() < deadline, "no spinner on a terminal"
        time.sleep(0.01)
    view.model({"what": "local model", "state": "starting"})
    assert "starting the local model…" in out.getvalue()
    view.delta({"text": "Hel"})
    assert not view.spinner.running
    after = out.getvalue()
    assert after.endswith("Hel") and after.rindex("\r\x1b[K") < after.rindex("Hel")  # erased, then the text
    view.delta({"text": "lo"})
    view.event(_event(2, "model.responded", turn_id="t", round=0, model="m", content="Hello"))
    assert not view.spinner.running  # the final answer: the settle comes next, no spinner in between
    view.event(_event(3, "turn.settled", turn_id="t", outcome="completed"))
    view.close()
    assert not view.spinner.running and out.getvalue().count("Hello") == 1  # streamed, not shown again


def test_no_spinner_when_not_a_terminal() -> None:
    out = io.StringIO()
    view = ReplyView(Console(file=out, force_terminal=False), "alice")
    view.begin()
    assert not view.spinner.running
    view.model({"what": "model process", "state": "starting"})
    view.close()
    assert out.getvalue() == "starting the model process… (a cold start; it stays warm after)\n"
