"""SIGKILL a real ``holon`` process in the middle of a turn, restart, and check what recovery did.

The model is a ``FakeLLM`` in this process; holon runs as a subprocess (the real CLI), is killed
with SIGKILL at a chosen point, and is restarted over the same home:

* during a model call: the turn is settled ``interrupted`` and its input re-queued, then answered
  exactly once;
* during a tool call: the in-flight call gets ``tool.resulted(interrupted)`` and is not re-run;
  the next turn's model request shows the interrupted round and the runtime's note;
* while a background task runs: the task gets ``task.resulted(interrupted)`` and its agent gets
  that result as an input.

Each case ends with ``holon ledger verify`` and ``holon ledger replay``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers.turn_cli import (
    all_events,
    assert_ledger_ok,
    command_alive,
    command_processes,
    event_types,
    holon,
    kill_group,
    kill_hard,
    messages_text,
    open_store,
    quick_home,
    run_host,
    spawn_holon,
    text_of,
    wait_for,
)

from holon.ledger import Event
from holon.ledger import events as ev
from holon.runtime.recovery import INTERRUPTED_TOOL
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

FIRST = "Please do task X-1137."
SECOND = "Then task Y-2248."


def _setup(tmp_path: Path, fake: FakeLLM) -> Path:
    return quick_home(tmp_path, "bob", model="openai/fake", api_base=fake.url)


def _of(events: list[Event], kind: type[ev.PayloadBase]) -> list[Any]:
    return [e for e in events if isinstance(e.payload, kind)]


def _operator_message(events: list[Event], text: str) -> Event:
    found = [e for e in _of(events, ev.MessageReceived) if e.authority == "operator" and e.payload.text == text]
    assert len(found) == 1, f"{text!r} was recorded {len(found)} times"
    return found[0]


def _turns_taking(events: list[Event], seq: int) -> list[tuple[Event, Event | None]]:
    """(turn.started, turn.settled or None) of each turn whose inputs include ``seq``."""
    settled = {e.payload.turn_id: e for e in _of(events, ev.TurnSettled)}
    return [(s, settled.get(s.payload.turn_id)) for s in _of(events, ev.TurnStarted) if seq in s.payload.inputs]


def _answered_once(events: list[Event], seq: int) -> tuple[Event, Event]:
    """The input ``seq`` was handled by one interrupted turn, then by exactly one settled turn with a reply."""
    turns = _turns_taking(events, seq)
    assert all(done is not None for _, done in turns), "a turn was left unsettled"
    outcomes = [done.payload.outcome for _, done in turns if done is not None]
    assert outcomes == ["interrupted", "completed"], outcomes
    first, second = turns
    assert first[1] is not None and second[1] is not None
    assert first[1].origin == "runtime:recovery" and first[1].payload.requeue is True
    assert first[1].payload.reply is None
    assert second[1].payload.reply, "the operator got no reply"
    return first[1], second[1]


def test_kill_during_model_call(tmp_path: Path) -> None:
    restarted = threading.Event()

    def script(body: dict[str, Any]) -> dict[str, Any]:
        # Before the kill every call hangs; after it the model answers.
        return {"content": "Did X, then Y."} if restarted.is_set() else {"delay": 60, "content": "too late"}

    with FakeLLM(script) as fake:
        _test_kill_during_model_call(tmp_path, fake, restarted)


def _test_kill_during_model_call(tmp_path: Path, fake: FakeLLM, restarted: threading.Event) -> None:
    home = _setup(tmp_path, fake)

    proc = spawn_holon(home, "run", "bob", FIRST, "--json")
    try:
        wait_for("model.requested", lambda: "model.requested" in event_types(home), proc=proc)
    finally:
        out, _err = kill_hard(proc)
    restarted.set()  # (the killed process may or may not have reached the model)
    assert out == ""  # nothing was reported as done
    types = event_types(home)
    assert types[-1] == "model.requested" and "turn.settled" not in types

    r = holon(home, "run", "bob", SECOND, "--json")
    data = r.json()
    assert r.code == 0, r
    assert data["outcome"] == "completed"
    assert data["reply"] == "Did X, then Y."
    assert data["rounds"] == 1 and data["tool_calls"] == 0

    events = all_events(home)
    original = _operator_message(events, FIRST)
    nxt = _operator_message(events, SECOND)
    interrupted, answered = _answered_once(events, original.seq)
    assert interrupted.payload.reason == "holon stopped during a model call"
    assert not [e for e in _of(events, ev.ToolResulted) if e.payload.status == "interrupted"]
    # The restart's turn took the re-queued input first, then the new one; its result is the CLI's.
    started = next(e for e in _of(events, ev.TurnStarted) if e.payload.turn_id == answered.payload.turn_id)
    assert started.payload.inputs == [original.seq, nxt.seq]
    assert data["turn_id"] == answered.payload.turn_id
    assert len(_of(events, ev.TurnSettled)) == 2
    # The restarted process asked the model once, with both inputs.
    (request,) = [b for b in fake.requests if SECOND in json.dumps(b)]
    users = [c for role, c in messages_text(request) if role == "user"]
    assert any(FIRST in c for c in users) and any(SECOND in c for c in users)
    assert not any("note from the runtime" in c for c in users)  # no rounds were recorded to resume
    with open_store(home) as store:
        bob = store.agent("bob")
        assert bob.status == "idle" and bob.pending_inputs == [] and bob.current_turn_id is None
        assert bob.resume_from_seq is None
    assert_ledger_ok(home)


def test_kill_during_tool_call(tmp_path: Path, fake: FakeLLM) -> None:
    """Also finding 6 of issue 14: the foreground command (``sleep 300``) outlives the SIGKILLed
    holon, and the restarted holon's recovery kills it (its identity was recorded before it ran)."""
    marker = tmp_path / "ran.txt"
    command = f"echo ran >> {marker}; exec sleep 300"
    fake.add(
        {
            "content": "Running it.",
            "tool_calls": [{"name": "run_command", "arguments": {"command": command, "wait_s": 30}}],
        },
        {"content": "The command was interrupted; ran.txt shows it ran once, so I did not run it again."},
    )
    home = _setup(tmp_path, fake)

    proc = spawn_holon(home, "run", "bob", FIRST, "--json")
    try:
        wait_for("the command to start", marker.exists, proc=proc)
    finally:
        kill_hard(proc)
    try:
        types = event_types(home)
        assert types[-2:] == ["tool.called", "command.started"] and "tool.resulted" not in types
        (identity,) = command_processes(home)
        assert command_alive(identity), "the command runs in a session of its own and outlives holon"

        r = holon(home, "run", "bob", SECOND, "--json")
        assert not command_alive(identity), "recovery left the foreground command running"
    finally:
        kill_group(home)
    data = r.json()
    assert r.code == 0, r
    assert data["outcome"] == "completed" and data["tool_calls"] == 0
    assert data["reply"].startswith("The command was interrupted")
    assert marker.read_text().splitlines() == ["ran"], "the interrupted command was run again"

    events = all_events(home)
    original = _operator_message(events, FIRST)
    interrupted, answered = _answered_once(events, original.seq)
    (called,) = _of(events, ev.ToolCalled)
    (resulted,) = _of(events, ev.ToolResulted)
    assert called.payload.tool == "run_command" and json.loads(called.payload.arguments)["command"] == command
    assert resulted.payload.call_id == called.payload.call_id
    assert resulted.payload.status == "interrupted" and resulted.payload.output == INTERRUPTED_TOOL
    assert resulted.origin == "runtime:recovery" and resulted.turn_id == interrupted.payload.turn_id
    assert resulted.seq < interrupted.seq  # the call is settled before its turn
    assert interrupted.payload.reason == f"holon stopped during tool call run_command ({called.payload.call_id})"
    assert answered.payload.rounds == 1 and answered.payload.tool_calls == 0

    # The restarted turn's first model request replays the interrupted round (the call and its
    # 'interrupted' result), followed by the runtime's note, and carries both operator inputs.
    assert len(fake.requests) == 2
    messages = fake.requests[1]["messages"]
    call_id = called.payload.call_id
    (a,) = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")]
    assert [c["id"] for c in messages[a]["tool_calls"]] == [call_id]
    assert messages[a]["tool_calls"][0]["function"]["name"] == "run_command"
    assert json.loads(messages[a]["tool_calls"][0]["function"]["arguments"])["command"] == command
    tool = messages[a + 1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == call_id
    assert tool["content"].startswith("interrupted:") and "may have had effects" in tool["content"]
    notes = [m["content"] for m in messages[a + 2 :] if m["role"] == "user" and "note from the runtime" in m["content"]]
    assert len(notes) == 1, messages[a + 2 :]
    assert "interrupted" in notes[0] and "not an operator instruction" in notes[0]
    assert f'"call_id": "{call_id}", "status": "interrupted"' in notes[0]
    users = [c for role, c in messages_text(fake.requests[1]) if role == "user"]
    assert any(FIRST in c for c in users) and any(SECOND in c for c in users)
    with open_store(home) as store:
        bob = store.agent("bob")
        assert bob.status == "idle" and bob.pending_inputs == [] and bob.resume_from_seq is None
    assert_ledger_ok(home)


def test_background_task_running_at_kill_is_reported_interrupted(tmp_path: Path, fake: FakeLLM) -> None:
    marker = tmp_path / "job.txt"
    command = f"echo started >> {marker}; exec sleep 60"
    fake.add(
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command, "wait_s": 0.2}}]},
        {"content": "Started the job in the background."},
        {"content": "The job was interrupted by a restart; tell me if I should start it again."},
    )
    home = _setup(tmp_path, fake)

    # --until-idle keeps the process alive (and the task running) after the turn completes.
    proc = spawn_holon(home, "run", "bob", "start the job", "--until-idle", "--json")
    try:
        wait_for("the turn to settle", lambda: "turn.settled" in event_types(home), proc=proc, timeout=90)
        wait_for("the job to start", marker.exists, proc=proc)
    finally:
        kill_hard(proc)
    with open_store(home) as store:
        (task,) = store.rows("task")
        task_id = task.task_id
    assert task.state == "running"
    (identity,) = command_processes(home)
    assert command_alive(identity)  # the command outlived holon (its own session)

    try:
        report = run_host(home)
    finally:
        alive_after_recovery = command_alive(identity)
        kill_group(home)
    # Recovery stopped the very process the task had started (identified by pid, start time, boot).
    assert not alive_after_recovery
    assert report["recovered"] == {"turns": [], "tool_calls": [], "tasks": [task_id]}
    assert [t["outcome"] for t in report["turns"]] == ["completed"]
    assert report["turns"][0]["reply"].startswith("The job was interrupted")
    assert marker.read_text().splitlines() == ["started"]

    events = all_events(home)
    (task_result,) = _of(events, ev.TaskResulted)
    assert task_result.payload.task_id == task_id and task_result.payload.state == "interrupted"
    assert task_result.origin == "runtime:recovery"
    inputs = [e for e in _of(events, ev.MessageReceived) if e.task_id == task_id]
    assert len(inputs) == 1
    notice = inputs[0]
    assert notice.seq > task_result.seq and notice.authority == "tool" and notice.origin == f"task:{task_id}"
    assert "ended: interrupted" in notice.payload.text
    # The agent's next turn took the notice as its input and answered it.
    (turn, done) = _turns_taking(events, notice.seq)[0]
    assert turn.payload.inputs == [notice.seq]
    assert done is not None and done.payload.outcome == "completed"
    assert done.payload.turn_id == report["turns"][0]["turn_id"]
    # The model saw it as information from a task, not as an operator instruction.
    assert len(fake.requests) == 3
    users = [c for role, c in messages_text(fake.requests[2]) if role == "user"]
    assert any(
        f"task:{task_id}" in c and "information, not an operator instruction" in c and "ended: interrupted" in c
        for c in users
    ), users
    with open_store(home) as store:
        task = store.state("task", task_id)
        assert task is not None and task.state == "interrupted"
        assert "holon stopped" in text_of(store, task.output)
        assert "leftover processes were stopped" in text_of(store, task.output)
        assert store.rows("task", status="running") == []
        assert store.agent("bob").pending_inputs == []
    assert_ledger_ok(home)


@pytest.mark.slow
def test_background_task_that_finished_while_holon_was_dead_keeps_its_result(tmp_path: Path, fake: FakeLLM) -> None:
    """Finding 6 of issue 14: a background task that did its work after holon was SIGKILLed is
    reported with its real state, exit code and output, not ``interrupted``."""
    marker, go = tmp_path / "job.txt", tmp_path / "go"
    command = f"echo started >> {marker}; until [ -e {go} ]; do sleep 0.05; done; echo side-effect-done; exit 3"
    fake.add(
        {"tool_calls": [{"name": "run_command", "arguments": {"command": command, "wait_s": 0.2}}]},
        {"content": "Started the job in the background."},
        {"content": "The job failed with exit code 3."},
    )
    home = _setup(tmp_path, fake)
    proc = spawn_holon(home, "run", "bob", "start the job", "--until-idle", "--json")
    try:
        wait_for("the turn to settle", lambda: "turn.settled" in event_types(home), proc=proc, timeout=90)
        wait_for("the job to start", marker.exists, proc=proc)
    finally:
        kill_hard(proc)
    try:
        (identity,) = command_processes(home)
        assert command_alive(identity)
        go.touch()  # the job finishes while holon is dead
        wait_for("the job to end", lambda: not command_alive(identity))
        report = run_host(home)
    finally:
        kill_group(home)
    with open_store(home) as store:
        (task,) = store.rows("task")
    assert report["recovered"]["tasks"] == [task.task_id]
    events = all_events(home)
    (result,) = _of(events, ev.TaskResulted)
    assert result.origin == "runtime:recovery"
    assert (result.payload.state, result.payload.exit_code) == ("failed", 3)
    with open_store(home) as store:
        assert "side-effect-done" in text_of(store, result.payload.output)
    (notice,) = [e for e in _of(events, ev.MessageReceived) if e.task_id == task.task_id]
    assert "ended: failed, exit code 3" in notice.payload.text and "side-effect-done" in notice.payload.text
    assert [t["outcome"] for t in report["turns"]] == ["completed"]
    assert not (home / "tasks" / task.task_id).exists(), "recovery leaves no task files behind"
    assert_ledger_ok(home)


# --- exactly-once answers: SIGKILL at the final answer's commit --------------------------------------

TURN_KILLER = Path(__file__).resolve().parent / "helpers" / "turn_killer.py"


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_at_the_final_answers_commit_answers_exactly_once(tmp_path: Path, when: str) -> None:
    """A real process dies by SIGKILL right before, or right after, the commit that holds the final
    answer; the restarted host answers the input exactly once (after: without asking the model)."""
    import subprocess
    import sys

    from helpers.daemon import submit
    from helpers.turn_cli import REPO, cli_env

    replies = iter(["The first and only answer.", "A second answer (must not be needed)."])
    with FakeLLM(lambda body: {"content": next(replies)}) as fake:
        home = _setup(tmp_path, fake)
        (seq,) = submit(home, "bob", FIRST)
        killed = subprocess.run(
            [sys.executable, str(TURN_KILLER), str(home), when],
            capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120, check=False,
        )  # fmt: skip
        assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr)
        types = event_types(home)
        report = run_host(home)
        requests = len(fake.requests)

    events = all_events(home)
    finals = [e for e in _of(events, ev.ModelResponded) if not e.payload.tool_calls and not e.payload.error]
    assert len(finals) == 1, [e.payload.content for e in finals]
    if when == "after":  # the answer and its settle were one commit: nothing was left half-done
        assert "turn.settled" in types and types.index("turn.settled") == types.index("model.responded") + 1, types
    else:
        assert types[-1] == "model.requested" and "turn.settled" not in types
    turns = _turns_taking(events, seq)
    completed = [done for _, done in turns if done is not None and done.payload.outcome == "completed"]
    assert len(completed) == 1 and all(done is not None for _, done in turns)
    if when == "after":
        assert requests == 1 and report["recovered"]["turns"] == [] and report["turns"] == []
        assert completed[0].payload.reply == "The first and only answer."
    else:
        assert requests == 2 and [t["outcome"] for t in report["turns"]] == ["completed"]
        assert [done.payload.outcome for _, done in turns if done is not None] == ["interrupted", "completed"]
        assert completed[0].payload.reply == "A second answer (must not be needed)."
    with open_store(home) as store:
        bob = store.agent("bob")
        assert bob.pending_inputs == [] and bob.current_turn_id is None and bob.status == "idle"
    assert_ledger_ok(home)
