"""Admission by size, and what a failed turn does with its inputs (RFC 0002), over real HTTP.

* A burst of ten 4 KB inputs and one 64 KiB input on an 8k-window model: turns take what fits,
  the 64 KiB one alone and by reference (a preview and the ``memory_get`` call that reads it);
  every acknowledged input is answered exactly once, none is consumed silently or left queued.
* A failed turn never consumes inputs it did not answer: a transient model failure re-queues
  them (and the agent runs again after a backoff, without a new input); every other failure
  settles them ``rejected`` with the reason, visibly (turn.settled, a brief, the agent's state,
  the transcript), and the agent goes on with the inputs still queued.
* A prompt that cannot hold even the pinned minimum rejects its inputs without calling the model,
  one turn each, never in a loop.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any

import pytest
from helpers.props import examples
from helpers.runtime import (
    SleepRecorder,
    assert_sound,
    events,
    fake_settings,
    make_host,
    payloads,
    running,
    text,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.context.assembler import Budget, assemble
from holon.context.sections import build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.ledger import events as ev
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.host import RETRY_BASE_S
from holon.runtime.providers.base import ModelSettings
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.runtime.transcript import transcript_entries
from holon.runtime.turn import TurnLimits
from holon.testing import FakeLLM

pytestmark = pytest.mark.timeout(120)

WORDS = [
    "server",
    "request",
    "latency",
    "queue",
    "backlog",
    "deploy",
    "rollback",
    "metric",
    "alert",
    "threshold",
    "cache",
    "shard",
    "replica",
    "index",
    "migration",
    "schema",
    "column",
    "vacuum",
    "checkpoint",
    "journal",
    "lease",
    "token",
    "budget",
    "window",
    "prompt",
]


def prose(n_chars: int, seed: int, *, line: int = 100) -> str:
    """Deterministic English-like text of ``n_chars`` characters in lines of about ``line``."""
    rng = random.Random(seed)
    out, size, col = [], 0, 0
    while size < n_chars:
        w = rng.choice(WORDS)
        sep = "\n" if col + len(w) > line else " "
        col = 0 if sep == "\n" else col + len(w) + 1
        out.append(w + sep)
        size += len(w) + 1
    return "".join(out)[:n_chars]


def small(settings_: ModelSettings, window: int) -> ModelSettings:
    return ModelSettings(
        model=settings_.model, api_base=settings_.api_base, timeout_s=settings_.timeout_s, context_window=window
    )


def _user_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in request["messages"] if m["role"] == "user")


def _drive(store: Store, clock: FakeClock, model: ModelSettings, texts: list[str], **kw: Any) -> list[Any]:
    async def scenario() -> list[Any]:
        host = make_host(store, LiteLLMProvider(env={}), clock=clock, settings=model, **kw)
        async with running(host):
            for t in texts:
                host.submit("alice", t)
            await host.run_until_idle(timeout_s=60)
            return list(host.finished)

    return asyncio.run(scenario())


def _accounting(store: Store) -> tuple[dict[int, list[str]], dict[int, list[str]], list[int]]:
    """(answered: input -> turns that completed with it, rejected: input -> turns, still pending)."""
    started = {p.turn_id: p.inputs for p in payloads(store, "turn.started")}
    answered: dict[int, list[str]] = {}
    rejected: dict[int, list[str]] = {}
    for p in payloads(store, "turn.settled"):
        if p.outcome == "completed":
            for seq in started[p.turn_id]:
                answered.setdefault(seq, []).append(p.turn_id)
        for seq in p.rejected:
            rejected.setdefault(seq, []).append(p.turn_id)
        if p.outcome == "failed" and not p.requeue:
            assert p.rejected == started[p.turn_id], "a failed turn consumed inputs without rejecting them"
    return answered, rejected, list(store.agent("alice").pending_inputs)


# --- admission by size ------------------------------------------------------------------------------


def test_mixed_burst_on_an_8k_model_answers_every_input_once(store: Store, clock: FakeClock) -> None:
    """Ten 4 KB inputs and a 64 KiB one (multi-line, like a log) on an 8,192-token window."""
    create_agent(store, "alice")
    burst = [prose(4_096, i) for i in range(5)] + [prose(65_536, 99)] + [prose(4_096, i) for i in range(5, 10)]
    big_marker = burst[5][-200:]

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        users = _user_text(body)
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        hint = re.search(r"input (event:\d+) is 65,536 characters", users)
        if hint and not tools:  # read the input shown by reference, once
            return {
                "tool_calls": [{"name": "memory_get", "arguments": {"ref": hint.group(1), "mode": "tail", "lines": 20}}]
            }
        return {"content": f"answered {users.count('server') + users.count('queue')} words"}

    with FakeLLM(answer) as fake:
        finished = _drive(store, clock, small(fake_settings(fake), 8_192), burst)
        requests = list(fake.requests)

    seqs = [e.seq for e in events(store, "message.received")]
    answered, rejected, pending = _accounting(store)
    assert pending == [], "inputs left queued"
    assert rejected == {}, rejected
    assert sorted(answered) == seqs and all(len(t) == 1 for t in answered.values()), answered
    assert all(r.outcome == "completed" for r in finished)
    started = [p.inputs for p in payloads(store, "turn.started")]
    assert 1 < len(started) < len(burst), started  # several inputs per turn, but not all at once
    assert [s for inputs in started for s in inputs] == seqs  # oldest first, each taken once
    big_seq = seqs[5]
    assert any(big_seq in inputs for inputs in started)
    # Every request fitted the window (the assembler's estimate, recorded with each request).
    for p in payloads(store, "context.assembled"):
        assert p.used_tokens <= p.budget_tokens
    # The big input was shown by reference, and the model could read its end through the hint.
    (shown,) = [
        r
        for r in requests
        if f'memory_get {{"ref": "event:{big_seq}"}}' in _user_text(r)
        and not any(m["role"] == "tool" for m in r["messages"])
    ]
    assert burst[5][:200] in _user_text(shown)
    middle = burst[5][32_000:32_300]
    assert not any(middle in _user_text(r) for r in requests), "the 64 KiB input was sent whole"
    reads = [p for p in payloads(store, "tool.resulted") if p.tool == "memory_get"]
    assert reads and reads[0].status == "ok" and big_marker.splitlines()[-1] in text(store, reads[0].output)
    assert_sound(store)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=70_000), min_size=1, max_size=6),
    window=st.sampled_from([1_200, 2_048, 8_192]),
)
def test_any_input_fits_the_prompt_by_reference(sizes: list[int], window: int) -> None:
    """Assembly (no model) over inputs of any size: the pinned minimum always fits a 4k+ window,
    because a long input's leanest form is a preview and a reference."""
    import tempfile

    from holon.config import load_settings, resolve_home

    with tempfile.TemporaryDirectory() as d:
        paths = resolve_home(d)
        st_ = Store.open(paths, load_settings(paths), clock=FakeClock())
        try:
            agent = create_agent(st_, "alice")
            from holon.runtime.inputs import input_events

            seqs = []
            for i, n in enumerate(sizes):
                seqs.append(
                    st_.append(
                        *input_events(
                            st_,
                            agent.agent_id,
                            prose(n, i),
                            origin="operator:test",
                            authority="operator",
                            sender="operator",
                            channel="test",
                        )
                    )[-1].seq
                )
            view = gather(st_, agent.agent_id, inputs=seqs[:1], started_seq=st_.ledger.head() + 1, tools=[])
            assembly = assemble(build_sections(view, TokenCounter("gpt-4o")), Budget(window, min(4_096, window // 4)))
            assert assembly.used_tokens <= Budget(window, min(4_096, window // 4)).limit
        finally:
            st_.close()


# --- failed turns ---------------------------------------------------------------------------------


REJECTING = {
    "context overflow": ({"context_overflow": True}, "model error (context_overflow)"),
    "bad key": ({"error": 401}, "model error (auth)"),
    "bad request": ({"error": 400, "message": "unsupported parameter"}, "model error (bad_request)"),
}


@pytest.mark.parametrize("case", sorted(REJECTING))
def test_a_permanent_model_failure_rejects_its_inputs_visibly_and_the_next_ones_run(
    store: Store, clock: FakeClock, case: str
) -> None:
    create_agent(store, "alice")
    step, why = REJECTING[case]
    calls = {"n": 0}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        return step if calls["n"] == 1 else {"content": "second answered"}

    runtime = store.settings.runtime.model_copy(update={"max_inputs_per_turn": 1})
    store.settings = store.settings.model_copy(update={"runtime": runtime})  # the second input waits
    with FakeLLM(script) as fake:
        finished = _drive(store, clock, fake_settings(fake), ["first question", "second question"])
    first, second = (e.seq for e in events(store, "message.received"))
    assert [r.outcome for r in finished] == ["failed", "completed"], "the agent stalled after a rejection"
    failed = finished[0]
    assert failed.rejected == [first] and not failed.requeued and (failed.reason or "").startswith(why)
    answered, rejected, pending = _accounting(store)
    assert rejected == {first: [failed.turn_id]} and list(answered) == [second] and pending == []
    # Visible: the settle names them, a brief tells the operator (same transaction), the state keeps them.
    settled = next(e for e in events(store, "turn.settled") if e.payload.turn_id == failed.turn_id)
    brief = next(e for e in events(store, "brief.delivered"))
    assert brief.payload.kind == "error" and f"event:{first}" in text(store, brief.payload.text)
    assert brief.seq == settled.seq + 1 and brief.turn_id == failed.turn_id
    alice = store.agent("alice")
    assert alice.rejected_inputs == [first] and alice.status == "idle"
    lines = [e["line"] for e in transcript_entries(store, alice.agent_id, 5)]
    assert any(f"inputs [{first}] rejected" in line for line in lines), lines
    assert_sound(store)


def test_limits_reject_inputs_with_the_reason(store: Store, clock: FakeClock) -> None:
    """Max rounds: the model keeps calling tools; the inputs are rejected, not consumed silently."""
    create_agent(store, "alice")
    loop = {"tool_calls": [{"name": "list_work_items", "arguments": {}}]}
    with FakeLLM(lambda body: loop) as fake:
        finished = _drive(store, clock, fake_settings(fake), ["go round"], limits=TurnLimits(max_rounds=2))
    (result,) = finished
    seq = events(store, "message.received")[0].seq
    assert result.outcome == "failed" and result.rejected == [seq]
    assert result.reason == "no final answer after 2 model rounds"
    assert store.agent("alice").rejected_inputs == [seq] and store.agent("alice").last_error == result.reason


def test_a_window_too_small_for_any_prompt_rejects_each_input_without_a_model_call(
    store: Store, clock: FakeClock
) -> None:
    create_agent(store, "alice")
    with FakeLLM([], strict=True) as fake:
        finished = _drive(store, clock, small(fake_settings(fake), 1_024), ["one", "two " * 3_000])
        assert fake.requests == []
    seqs = [e.seq for e in events(store, "message.received")]
    assert [r.rejected for r in finished] == [[seqs[0]], [seqs[1]]]  # one turn each, then quiet
    assert all("even with long inputs by reference" in (r.reason or "") for r in finished)
    assert store.agent("alice").pending_inputs == []
    assert_sound(store)


def test_a_transient_failure_requeues_and_retries_after_the_backoff_without_a_new_input(
    store: Store, clock: FakeClock
) -> None:
    create_agent(store, "alice")
    script: list[dict[str, Any]] = [{"error": 503}] * 3 + [{"content": "back again"}]
    with FakeLLM(script, strict=True) as fake:

        async def scenario() -> list[Any]:
            host = make_host(
                store, LiteLLMProvider(env={}), clock=clock, settings=fake_settings(fake), sleep=SleepRecorder()
            )
            async with running(host):
                host.submit("alice", "please answer")
                await host.run_until_idle(timeout_s=30)
                assert host.is_stalled(store.agent("alice").agent_id)
                assert host.tick() == 0  # not yet: the backoff holds it back
                clock.advance(seconds=RETRY_BASE_S)
                assert host.tick() == 1  # its retry time came: scheduled again, no new input
                await host.run_until_idle(timeout_s=30)
                return list(host.finished)

        finished = asyncio.run(scenario())
    assert [(r.outcome, r.requeued) for r in finished] == [("failed", True), ("completed", False)]
    seq = events(store, "message.received")[0].seq
    answered, rejected, pending = _accounting(store)
    assert answered == {seq: [finished[1].turn_id]} and rejected == {} and pending == []
    assert store.agent("alice").rejected_inputs == []
    assert_sound(store)


def test_recovery_settles_a_recorded_final_answer_without_asking_the_model(store: Store, clock: FakeClock) -> None:
    """A ledger written by a holon that committed the final answer apart from the settle, and died
    between the two: recovery settles the turn ``completed`` with that answer, no model call."""
    from holon.ledger import NewEvent

    alice = create_agent(store, "alice")
    with FakeLLM([], strict=True) as fake:

        async def scenario() -> None:
            host = make_host(store, LiteLLMProvider(env={}), clock=clock, settings=fake_settings(fake))
            seq = host.submit("alice", "what is 2+2?").seq
            tid = "turn_dead"

            def put(p: ev.PayloadBase) -> None:
                store.append(NewEvent(alice.agent_id, p, origin="runtime:turn", authority="runtime", turn_id=tid))

            put(ev.TurnStarted(turn_id=tid, inputs=[seq]))
            put(ev.ModelRequested(turn_id=tid, round=0, model="openai/fake", messages=2))
            put(
                ev.ModelResponded(
                    turn_id=tid,
                    round=0,
                    model="openai/fake",
                    content="4",
                    usage=ev.Usage(prompt_tokens=9, completion_tokens=1, total_tokens=10),
                )
            )
            async with running(host):
                await host.run_until_idle(timeout_s=10)
            assert host.finished == []

        asyncio.run(scenario())
        assert fake.requests == []
    (settled,) = events(store, "turn.settled")
    p = settled.payload
    assert (p.outcome, p.reply, p.requeue, p.rounds, p.usage.total_tokens) == ("completed", "4", False, 1, 10)
    assert settled.origin == "runtime:recovery"
    state = store.agent("alice")
    assert state.pending_inputs == [] and state.status == "idle" and state.resume_from_seq is None
    assert_sound(store)


def test_an_operator_abort_rejects_the_turns_inputs(store: Store, clock: FakeClock) -> None:
    from holon.ledger import NewEvent
    from holon.runtime.recovery import settle_unfinished_turn

    alice = create_agent(store, "alice")
    from holon.runtime.inputs import input_events

    seq = store.append(
        *input_events(
            store,
            alice.agent_id,
            "long job",
            origin="operator:test",
            authority="operator",
            sender="operator",
            channel="test",
        )
    )[-1].seq
    store.append(NewEvent(alice.agent_id, ev.TurnStarted(turn_id="turn_x", inputs=[seq]), turn_id="turn_x"))
    settle_unfinished_turn(
        store, store.agent("alice"), outcome="failed", reason="aborted by the operator", requeue=False
    )
    (settled,) = payloads(store, "turn.settled")
    assert settled.rejected == [seq] and settled.reason == "aborted by the operator"
    assert store.agent("alice").rejected_inputs == [seq]
    assert json.loads(json.dumps(events(store, "brief.delivered")[0].payload.model_dump()))["kind"] == "error"


def test_a_one_line_64_kib_input_can_be_read_whole_by_parts(store: Store) -> None:
    """The reference an input is shown by reaches all of it, even a 64 KiB hook body on one line
    (longer than the largest read): ``memory_get`` points at line ranges that fit, and the parts
    put together are the body."""
    from holon.memory.get import WRAP_CHARS, MemoryGetRequest, memory_get
    from holon.runtime.inputs import input_events

    alice = create_agent(store, "alice")
    body = json.dumps(
        {
            "event": "push",
            "commits": [{"id": f"{i:040x}", "message": prose(300, i).replace("\n", " ")} for i in range(200)],
        }
    )
    assert len(body) > 64_000 and "\n" not in body
    seq = store.append(
        *input_events(
            store, alice.agent_id, body, origin="external:hook", authority="external", sender="hook", channel="hook"
        )
    )[-1].seq
    ref = f"event:{seq}"
    first = memory_get(store, alice, MemoryGetRequest(ref=ref))
    assert first.content is None
    ranges = [c.arguments for c in first.next_calls if c.arguments.get("mode") == "lines"]
    assert ranges, first.render()
    parts, start = [], ranges[0]["start"]
    while True:
        got = memory_get(store, alice, MemoryGetRequest(ref=ref, mode="lines", start=start, end=start))
        assert got.content is not None, got.render()
        parts.append(got.content.rstrip("\n"))
        if got.content.startswith("[lines longer than"):
            break
        start += 1
    text = "".join(p for p in parts if not p.startswith("[lines longer than"))
    assert body in text and all(len(p) <= WRAP_CHARS for p in parts[:-1])
