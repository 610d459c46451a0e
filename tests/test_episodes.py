"""Episodes through a real ``Store``: events appended batch by batch as the turn runner does, the
draft reducer closing drafts at boundaries, and the projector sealing them as ``episode.sealed``.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.ctx_ledger import Script, content_events, sealed
from helpers.props import examples
from hypothesis import event, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings, resolve_home
from holon.context.view import gather
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.episodes import IDLE_GAP_US, TURN_CAP, is_key_point, is_topic_switch

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture
def store(engine: EngineTarget, home: HomePaths, clock: FakeClock) -> Iterator[Store]:
    """The suite's ``store`` over both engines (RFC 0008 step 5): the tests that take it run on
    SQLite and on PostgreSQL; those that open homes of their own (hypothesis) stay on SQLite."""
    with Store.open(home, load_settings(home), clock=clock) as s:
        yield s


IDLE_GAP_S = IDLE_GAP_US / 1_000_000


def payload(e: Event) -> ev.EpisodeSealed:
    assert isinstance(e.payload, ev.EpisodeSealed)
    return e.payload


def assert_sound(store: Store) -> None:
    assert store.ledger.verify().ok
    result = store.replay()
    assert result.ok, result.examples


def assert_contiguous(store: Store, agent_id: str) -> None:
    """Consecutive episodes of the agent tile its history: each starts on one of its events, they
    never overlap, and every content event from the first episode's start up to the open draft
    (or the last episode's end) lies in exactly one episode."""
    episodes = [payload(e) for e in sealed(store, agent_id)]
    mine = {e.seq: e for e in store.ledger.read(agent_id=agent_id)}
    for p in episodes:
        assert p.seq_start in mine and p.seq_start <= p.seq_end, p
        assert p.episode_id == f"ep_{p.seq_start}"
    for a, b in itertools.pairwise(episodes):
        assert a.seq_end < b.seq_start, f"{a.episode_id}..{a.seq_end} overlaps {b.episode_id}"
    drafts = store.state("episode_drafts", agent_id)
    assert getattr(drafts, "ready", []) == [], "every ready draft is sealed in the transaction that readied it"
    if not episodes:
        return
    current = getattr(drafts, "current", None)
    upto = current.seq_start - 1 if current is not None else episodes[-1].seq_end
    if current is not None:
        assert current.seq_start > episodes[-1].seq_end
    for e in content_events(store, agent_id):
        if episodes[0].seq_start <= e.seq <= upto:
            owners = [p.episode_id for p in episodes if p.seq_start <= e.seq <= p.seq_end]
            assert len(owners) == 1, f"event {e.seq} ({e.type}) is in {owners or 'no episode'}"


def sealed_after(s: Script, before: int) -> list[ev.EpisodeSealed]:
    return [payload(e) for e in s.sealed()][before:]


# --- boundaries --------------------------------------------------------------------------------


def test_work_item_completed_ends_the_episode_with_the_completion(store: Store) -> None:
    s = Script(store)
    said = s.say("Please fix the flaky login test")
    s.start()
    s.open_item("wi_login", "Fix flaky login test")
    assert s.sealed() == [], "opening the first work item inside an unsettled turn does not split"
    s.run("pytest tests/test_login.py", 1)
    done = s.complete("wi_login", "fixed")
    completed = next(e for e in done if e.type == "work_item.completed")
    [p] = sealed_after(s, 0)
    assert (p.boundary, p.seq_start, p.seq_end) == ("work_item_completed", said.seq, completed.seq)
    assert p.work_item_id == "wi_login" and p.topic == "Fix flaky login test"
    assert p.objective == "Objective of Fix flaky login test"
    [seal] = s.sealed()
    # Sealed in the very transaction of the completion (right after it), carrying that turn.
    assert seal.seq == done[-1].seq + 1 and seal.turn_id == s.turn_id
    assert seal.work_item_id == "wi_login" and seal.episode_id == p.episode_id
    # The turn goes on after the completion: what it does is the next episode's.
    s.run("git push", 0)
    s.settle("Fixed it and pushed.")
    assert len(s.sealed()) == 1
    s.say("thanks")
    s.start()
    [_, after] = sealed_after(s, 0)
    assert after.seq_start == completed.seq + 1 and after.boundary == "work_switched"
    assert [c["command"] for c in after.commands] == ["git push"] and after.last_reply == "Fixed it and pushed."
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


@pytest.mark.parametrize("how", ["open", "pick"])
def test_switching_work_items_after_a_settled_turn(store: Store, how: str) -> None:
    s = Script(store)
    first = s.say("Start on the billing export; note the docs for later")
    s.start()
    if how == "pick":  # wi_b exists already: opened without activating it (no change of thread)
        s.open_item("wi_b", "Write docs", activate=False)
    s.open_item("wi_a", "Billing export")
    s.run("make export", 0)
    s.settle("Started on the export.")
    assert s.sealed() == [], "adopting the first work item inside a turn does not split"
    ask = s.say("Switch to the docs now")
    started = s.start()
    assert started.work_item_id == "wi_a"
    _ = s.open_item("wi_b", "Write docs") if how == "open" else s.pick("wi_b")
    [p] = sealed_after(s, 0)
    assert p.boundary == "work_switched"
    # The turn that switched starts the next episode (its input is the request for wi_b); this
    # one ends on the event before that turn.
    assert (p.seq_start, p.seq_end) == (first.seq, started.seq - 1)
    assert p.work_item_id == "wi_a" and p.last_reply == "Started on the export."
    assert "Switch to the docs" not in p.summary
    assert s.drafts().current is not None and s.drafts().current.seq_start == started.seq
    assert s.drafts().thread == "wi_b"
    assert next(e for e in s.sealed()).turn_id == s.turn_id
    s.settle("Switched.")
    assert len(s.sealed()) == 1
    s.start()
    s.wait("wait_review")
    [_, docs] = sealed_after(s, 0)
    assert docs.work_item_id == "wi_b" and docs.excerpts == ["Switch to the docs now"]
    assert docs.sources is not None and ask.seq in docs.sources
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_a_registered_wait_ends_the_episode(store: Store) -> None:
    s = Script(store)
    said = s.say("Deploy when the build is green")
    s.start()
    s.run("ci status", 0, "pending")
    events = s.wait("wait_ci")
    registered = next(e for e in events if e.type == "wait.registered")
    [p] = sealed_after(s, 0)
    assert (p.boundary, p.seq_start, p.seq_end) == ("wait_began", said.seq, registered.seq)
    assert s.sealed()[0].turn_id == s.turn_id
    s.settle(None, "waiting")
    s.say("build finished: green", authority="external")
    s.start()
    s.settle("Deployed.")
    assert len(s.sealed()) == 1
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_turn_cap_settled_turns_end_an_episode_in_the_same_thread(store: Store) -> None:
    s = Script(store)
    first = s.say("let us chat")
    s.start()
    s.settle("sure")
    last = None
    for i in range(1, TURN_CAP):
        _said, _started, last = s.exchange(f"question number {i}", f"answer {i}")
        if i < TURN_CAP - 1:
            assert s.sealed() == []
    [p] = sealed_after(s, 0)
    assert last is not None
    assert (p.boundary, p.seq_start, p.seq_end, p.turns) == ("turn_cap", first.seq, last.seq, TURN_CAP)
    assert s.sealed()[0].turn_id == last.turn_id
    assert p.excerpts == ["let us chat", "question number 1", "question number 2"]
    assert p.last_reply == f"answer {TURN_CAP - 1}"
    thread = s.drafts().thread
    s.exchange("and one more")
    assert s.drafts().thread == thread, "a turn cap keeps the conversation thread"
    assert len(s.sealed()) == 1
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_an_operator_message_after_an_idle_gap_starts_a_new_episode(store: Store, clock: FakeClock) -> None:
    s = Script(store)
    first, _, settled = s.exchange("what is the capital of France?", "Paris.")
    clock.advance(seconds=IDLE_GAP_S - 60)
    s.exchange("and of Italy?", "Rome.")
    assert s.sealed() == [], "a pause shorter than the gap does not split"
    thread = s.drafts().thread
    _, _, settled = s.exchange("and of Spain?", "Madrid.")
    clock.advance(seconds=IDLE_GAP_S)
    later = s.say("good morning, anything new?")
    [p] = sealed_after(s, 0)
    assert (p.boundary, p.seq_start, p.seq_end, p.turns) == ("idle_gap", first.seq, later.seq - 1, 3)
    assert settled.seq <= p.seq_end
    assert s.sealed()[0].turn_id is None, "sealed by an operator message outside any turn"
    assert s.drafts().current is not None and s.drafts().current.seq_start == later.seq
    assert s.drafts().thread == f"conv:{later.seq}" != thread
    s.start()
    s.settle("Nothing new.")
    assert len(s.sealed()) == 1
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_an_idle_gap_inside_a_work_item_does_not_split(store: Store, clock: FakeClock) -> None:
    s = Script(store)
    s.say("Start the migration")
    s.start()
    s.open_item("wi_m", "Migration")
    s.settle("Started.")
    clock.advance(seconds=IDLE_GAP_S * 3)
    s.exchange("how is the migration going?", "Halfway.")
    assert s.sealed() == []
    assert s.drafts().thread == "wi_m"
    assert_sound(store)


@pytest.mark.parametrize(
    "text",
    ["New topic: what should we cook tonight?", "new topic - the garden", "换个话题，今天天气怎么样？"],  # noqa: RUF001
)
def test_an_explicit_new_topic_starts_a_new_episode(store: Store, text: str) -> None:
    s = Script(store)
    first, _, settled = s.exchange("summarise the report", "It says sales grew.")
    switch = s.say(text)
    [p] = sealed_after(s, 0)
    assert (p.boundary, p.seq_start, p.seq_end) == ("topic_switched", first.seq, switch.seq - 1)
    assert settled.seq <= p.seq_end
    assert s.drafts().thread == f"conv:{switch.seq}"
    s.start()
    s.settle("ok")
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_topic_markers_only_count_at_the_start_and_after_a_settled_turn(store: Store) -> None:
    assert is_topic_switch("New topic: x") and is_topic_switch("  换个话题") and not is_topic_switch("a new topic")
    s = Script(store)
    s.say("New topic: this is the very first message")
    s.say("New topic: still nothing settled")
    s.start()
    s.settle("hello")
    s.exchange("Let's talk about a new topic later", "sure")
    assert s.sealed() == []
    assert_sound(store)


# --- content -----------------------------------------------------------------------------------


def test_episode_content(store: Store) -> None:
    s = Script(store)
    first = s.say("Please make the test suite pass")
    s.say("The CI bot says: tests failing", authority="external")
    s.start()
    s.open_item("wi_ci", "Green CI")
    s.run("pytest -x", 1, "1 failed")
    s.run("pytest -x --lf", -9, "killed")
    s.run("echo no exit code line", None, "no code here")
    s.call("edit_file", {"path": "src/app.py"}, "edited", emitted=[ev.FileTouched(path="src/app.py")])
    s.call("edit_file", {"path": "tests/test_app.py"}, "edited", emitted=[ev.FileTouched(path="tests/test_app.py")])
    s.call("record_decision", {}, "ok", emitted=[ev.DecisionRecorded(text="skip the flaky network test")])
    s.call("follow_up", {}, "ok", emitted=[ev.FollowUpChanged(follow_up_id="f1", op="add", text="file an issue")])
    s.run("pytest", 0, "all passed")
    s.settle("All green now.")
    s.say("thanks! second message")
    s.say("third operator message")
    s.say("a fourth that is not kept as an excerpt")
    s.start()
    done = s.complete("wi_ci", "CI is green")
    [seal] = s.sealed()
    p = payload(seal)
    assert p.episode_id == f"ep_{first.seq}" == seal.episode_id
    assert p.seq_end == next(e.seq for e in done if e.type == "work_item.completed")
    assert [(c["command"], c["exit_code"]) for c in p.commands] == [
        ("pytest -x", 1),
        ("pytest -x --lf", -9),
        ("echo no exit code line", None),
        ("pytest", 0),
    ]
    assert p.files == ["src/app.py", "tests/test_app.py"]
    assert p.decisions == ["skip the flaky network test"]
    assert p.follow_ups == ["file an issue"]
    assert p.excerpts == ["Please make the test suite pass", "thanks! second message", "third operator message"]
    assert p.last_reply == "All green now."
    assert (p.turns, p.tool_calls, p.work_item_id, p.topic) == (1, 10, "wi_ci", "Green CI")
    for fragment in (
        "pytest -x (exit 1)",
        "pytest -x --lf (exit -9)",
        "pytest (exit 0)",
        "src/app.py",
        "skip the flaky network test",
        "Ended: work item completed.",
        "Last reply: All green now.",
    ):
        assert fragment in p.summary
    assert seal.turn_id == s.turn_id
    assert_sound(store)


def test_background_command_tasks_are_commands_with_their_exit_codes(store: Store) -> None:
    s = Script(store)
    first = s.say("build it in the background")
    s.start()
    s.call(
        "start_task",
        {"command": "make all"},
        "started task_1",
        emitted=[ev.TaskCreated(task_id="task_1", kind="command", title="make", spec={"command": "make all"})],
    )
    s.settle("Building.")
    s.append_new(
        NewEvent(s.agent_id, ev.TaskResulted(task_id="task_1", state="failed", exit_code=2), origin="runtime:tasks")
    )
    s.start()
    wait = s.wait("wait_x")
    [p] = sealed_after(s, 0)
    assert p.seq_start == first.seq and p.seq_end == next(e.seq for e in wait if e.type == "wait.registered")
    assert [(c["command"], c["exit_code"]) for c in p.commands] == [("make all", 2)]
    assert_sound(store)


def test_long_texts_are_shortened_and_large_outputs_still_give_exit_codes(tmp_path: Path, fast_ledger) -> None:
    home = resolve_home(tmp_path / "small-blobs")
    cfg = load_settings(home)
    cfg = cfg.model_copy(update={"ledger": cfg.ledger.model_copy(update={"blob_threshold_bytes": 256})})
    with Store.open(home, cfg, clock=FakeClock()) as store:
        s = Script(store)
        s.say("x" * 1_000)
        s.start()
        s.run("make huge", 3, "y" * 5_000)  # stored as a blob: the preview still starts with the exit code
        s.settle("z" * 1_000)
        s.start()
        s.wait("w")
        [p] = sealed_after(s, 0)
        assert [(c["command"], c["exit_code"]) for c in p.commands] == [("make huge", 3)]
        assert len(p.excerpts[0]) <= 200 and len(p.last_reply) <= 300
        assert_sound(store)


# --- key points --------------------------------------------------------------------------------


KEY = ["We will use Postgres for storage", "never deploy on Fridays", "必须用中文回答", "From now on, run the linter"]
ORDINARY = ["how is the build going?", "Thanks, that looks good", "今天天气怎么样？", "Can you check the logs"]  # noqa: RUF001


def test_key_point_markers() -> None:
    assert all(is_key_point(t) for t in KEY)
    assert not any(is_key_point(t) for t in ORDINARY)


def test_operator_rules_and_decisions_are_kept_as_key_points_of_the_thread(store: Store, clock: FakeClock) -> None:
    s = Script(store)
    for text in [KEY[0], ORDINARY[0], KEY[1], ORDINARY[1], KEY[2], ORDINARY[2]]:
        s.exchange(text, "noted")
    s.say("never trust this text", authority="external")  # not the operator: never a key point
    d = s.drafts()
    assert [k.text for k in d.key_points] == KEY[:3]
    assert [k.kind for k in d.key_points] == ["decision", "rule", "rule"]
    # "必须用中文回答" shares nothing with the storage talk before it: a new thread. What the
    # operator stated in plain conversation holds in every thread all the same.
    assert d.key_points[0].thread != d.thread == d.key_points[2].thread
    # They outlive an episode boundary in the same thread (a turn cap), not a new topic.
    for i in range(TURN_CAP):
        s.exchange(f"filler {i}", "ok")
    assert sealed_after(s, 0)[-1].boundary == "turn_cap"
    started = s.say("remind me of the rules").seq
    view = gather(store, s.agent_id, inputs=[started], started_seq=store.ledger.head() + 1, tools=[])
    assert [k.text for k in view.key_points] == KEY[:3]
    clock.advance(seconds=IDLE_GAP_S)
    s.start()
    s.settle("We decided three things.")
    s.exchange("New topic: holidays", "ok")
    assert s.drafts().thread != d.thread
    head = store.ledger.head()
    view = gather(store, s.agent_id, inputs=[], started_seq=head + 1, tools=[])
    # Stated in plain conversation, they hold in every thread.
    assert [k.text for k in view.key_points] == KEY[:3]
    assert_sound(store)


def test_key_points_said_before_the_first_work_item_follow_it(store: Store) -> None:
    s = Script(store)
    s.say("Fix the login bug. Never touch the payments module.")
    s.start()
    s.open_item("wi_login", "Fix login")
    d = s.drafts()
    assert [(k.text, k.thread) for k in d.key_points] == [
        ("Fix the login bug. Never touch the payments module.", "wi_login")
    ]
    s.settle("Done.")
    assert_sound(store)


def test_a_rule_in_the_first_message_after_a_completed_work_item_is_kept_for_the_next_turn(store: Store) -> None:
    """The turn after a completed work item runs in a new thread; a rule the operator states in
    that turn's input belongs to it, not to the finished work item."""
    s = Script(store)
    s.say("Fix the login bug")
    s.start()
    s.open_item("wi_login", "Fix login")
    s.complete("wi_login")
    s.settle("Fixed.")
    rule = s.say("From now on we will use Postgres for everything")
    started = s.start()
    d = s.drafts()
    assert d.thread != "wi_login"
    assert [(k.seq, k.thread) for k in d.key_points] == [(rule.seq, d.thread)]
    view = gather(store, s.agent_id, inputs=[rule.seq], started_seq=started.seq, tools=[])
    assert [k.text for k in view.key_points] == ["From now on we will use Postgres for everything"]
    s.settle("Noted.")
    assert_sound(store)


def test_key_points_of_a_paused_work_item_stay_with_it(store: Store) -> None:
    s = Script(store)
    s.say("Start the billing export")
    s.start()
    s.open_item("wi_a", "Billing export")
    s.settle("ok")
    s.say("Always write the export as CSV")
    s.start()
    s.settle("ok")
    s.say("Switch to the docs")
    s.start()
    s.open_item("wi_b", "Docs")
    s.settle("ok")
    started = s.say("What are the rules here?").seq
    view = gather(store, s.agent_id, inputs=[started], started_seq=store.ledger.head() + 1, tools=[])
    assert view.thread == "wi_b" and view.key_points == ()
    s.start()
    s.pick("wi_a")
    s.settle("back on A")
    view = gather(store, s.agent_id, inputs=[], started_seq=store.ledger.head() + 1, tools=[])
    assert view.thread == "wi_a"
    assert [k.text for k in view.key_points] == ["Always write the export as CSV"]
    assert_sound(store)


# --- replay under random histories -------------------------------------------------------------


TEXTS = st.sampled_from(
    [
        "hello",
        "we will use Postgres",
        "never deploy on Fridays",
        "New topic: lunch",
        "换个话题",
        "必须用中文回答",
        "what about the previous plan?",
        "好的",
    ]
)


def _actions(agent: str) -> st.SearchStrategy[tuple[str, ...]]:
    items = st.sampled_from([f"wi_{agent}1", f"wi_{agent}2", f"wi_{agent}3"])
    return st.one_of(
        st.tuples(st.just("say"), TEXTS, st.sampled_from(["operator", "operator", "external", "timer"])),
        st.tuples(st.just("start")),
        st.tuples(st.just("settle"), st.sampled_from(["completed", "waiting", "failed"])),
        st.tuples(st.just("run"), st.integers(-2, 3)),
        st.tuples(st.just("open"), items, st.booleans()),
        st.tuples(st.just("pick"), items),
        st.tuples(st.just("complete"), items),
        st.tuples(st.just("wait")),
        st.tuples(st.just("file"), st.sampled_from(["a.py", "b.py"])),
        st.tuples(st.just("decide")),
        st.tuples(st.just("idle")),
    )


def _new_events(agent_id: str, action: tuple[object, ...], n: int) -> list[NewEvent]:
    kind = action[0]
    turn = f"{agent_id}_t{n}"

    def new(p: ev.PayloadBase, authority: str = "agent", **env: object) -> NewEvent:
        return NewEvent(agent_id, p, origin=f"{authority}:x", authority=authority, turn_id=turn, **env)  # type: ignore[arg-type]

    match action:
        case ("say", text, authority):
            return [NewEvent(agent_id, ev.MessageReceived(text=text), origin=f"{authority}:x", authority=authority)]  # type: ignore[arg-type]
        case ("start",):
            return [new(ev.TurnStarted(turn_id=turn, inputs=[]), "runtime")]
        case ("settle", outcome):
            return [new(ev.TurnSettled(turn_id=turn, outcome=outcome, reply="r"), "runtime")]  # type: ignore[arg-type]
        case ("run", code):
            return [
                new(ev.ToolCalled(call_id=f"c{n}", tool="run_command", arguments='{"command": "make"}'), "runtime"),
                new(
                    ev.ToolResulted(call_id=f"c{n}", tool="run_command", status="ok", output=f"exit code: {code}\n"),
                    "tool",
                ),
            ]
        case ("open", wid, activate):
            return [new(ev.WorkItemOpened(work_item_id=wid, title=f"T {wid}", activate=activate), work_item_id=wid)]
        case ("pick", wid):
            return [new(ev.WorkItemPicked(work_item_id=wid), work_item_id=wid)]
        case ("complete", wid):
            return [new(ev.WorkItemCompleted(work_item_id=wid, report="r"), work_item_id=wid)]
        case ("wait",):
            return [new(ev.WaitRegistered(wait_id=f"w{n}", on="timer", recheck_at_us=1))]
        case ("file", path):
            return [new(ev.FileTouched(path=str(path)))]
        case ("decide",):
            return [new(ev.DecisionRecorded(text=f"decision {n}"))]
    raise AssertionError(kind)


@st.composite
def histories(draw: st.DrawFn) -> list[list[tuple[str, tuple[object, ...]]]]:
    agents = ["agt_a", "agt_b"][: draw(st.integers(1, 2))]
    steps = [(a, act) for a in agents for act in draw(st.lists(_actions(a[-1]), min_size=1, max_size=30))]
    order = draw(st.permutations(steps))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=len(order))))
    return [list(order[i:j]) for i, j in zip([0, *cuts], [*cuts, len(order)], strict=False) if order[i:j]]


@settings(max_examples=examples(60), deadline=None)
@given(histories())
def test_random_histories_in_random_batches_replay(batches) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = resolve_home(Path(tmp) / "home")
        cfg = load_settings(home)
        cfg = cfg.model_copy(update={"ledger": cfg.ledger.model_copy(update={"synchronous": "NORMAL"})})
        clock = FakeClock()
        with Store.open(home, cfg, clock=clock) as store:
            agents = sorted({a for batch in batches for a, _ in batch})
            store.append(*(NewEvent(a, ev.AgentCreated(name=a.replace("_", "-"), home=f"/h/{a}")) for a in agents))
            n = 0
            for batch in batches:
                new: list[NewEvent] = []
                for agent, action in batch:
                    n += 1
                    if action == ("idle",):
                        clock.advance(seconds=IDLE_GAP_S + 1)
                        continue
                    new += _new_events(agent, action, n)
                if new:
                    store.append(*new)
                for agent in agents:
                    drafts = store.state("episode_drafts", agent)
                    assert getattr(drafts, "ready", []) == []
            for agent in agents:
                episodes = [payload(e) for e in sealed(store, agent)]
                seqs = {e.seq for e in store.ledger.read(agent_id=agent)}
                for p in episodes:
                    assert p.episode_id == f"ep_{p.seq_start}" and p.seq_start <= p.seq_end
                    assert p.seq_start in seqs, "an episode starts on one of its agent's events"
                for a, b in itertools.pairwise(episodes):
                    assert a.seq_end < b.seq_start, "episodes of an agent never overlap"
                assert_contiguous(store, agent)
                event(f"sealed episodes: {min(len(episodes), 3)}{'+' if len(episodes) >= 3 else ''}")
            assert_sound(store)
