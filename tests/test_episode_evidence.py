"""Issue 17, bugs 3 and 4: what a sealed episode quotes and which thread it is labelled with.

Bug 3: a request the operator sent while a turn ran, pending when that turn registered a wait,
was quoted by the episode the wait sealed, and came back in the next prompt twice (in the episode
summary and as the current input), unseen by the duplicate check. Now an episode quotes only the
inputs of the turns starting in its range, lists what it quotes in ``sources``, and the prompt
declares those events; an episode quoting a current input (an old one, sealed before ``sources``)
is left out of the prompt.

Bug 4: a work item opened before any turn of the open draft had settled relabelled the draft, so
conversation from before the work item existed carried its id and title; and the request that
made the agent open a work item after a settled turn was quoted by the earlier episode. The
labelling rule is in ``holon.projections.episodes.apply_episode_drafts`` and RFC 0003.

Everything runs through a real ``Store`` (SQLite or PostgreSQL, the append path, the projector's derive step).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest
from helpers.ctx_ledger import Script, sealed
from helpers.ctx_views import budget_for, episode, history_turn, inp, make_view
from helpers.props import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_episodes import assert_contiguous, assert_sound, payload

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings, resolve_home
from holon.context.assembler import Assembly, assemble
from holon.context.sections import build_sections, pinned_minimum
from holon.context.tokens import TokenCounter
from holon.context.view import EpisodeLine, gather
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json, decode_payload, encode_payload
from holon.projections import Store
from holon.projections.episodes import IDLE_GAP_US
from holon.projections.state import KeyPoint
from holon.runtime.scenarios import _refs

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture
def store(engine: EngineTarget, home: HomePaths, clock: FakeClock) -> Iterator[Store]:
    """The suite's ``store`` over both engines (RFC 0008 step 5): the tests that take it run on
    SQLite and on PostgreSQL; those that open homes of their own (hypothesis) stay on SQLite."""
    with Store.open(home, load_settings(home), clock=clock) as s:
        yield s


def episodes(s: Script) -> list[ev.EpisodeSealed]:
    return [payload(e) for e in s.sealed()]


def manifest(a: Assembly) -> dict[str, dict[str, object]]:
    return {m["key"]: m for m in a.manifest.to_json()["sections"]}


def operator_opens(s: Script, work_item_id: str, title: str) -> Event:
    """A work item opened outside any turn (as the scenario runner's ``work_item_create`` does)."""
    opened = ev.WorkItemOpened(work_item_id=work_item_id, title=title, objective=f"Objective of {title}")
    [stored] = s.append_new(
        NewEvent(s.agent_id, opened, origin="operator:cli", authority="operator", work_item_id=work_item_id)
    )
    return stored


# --- bug 3: duplicated evidence -----------------------------------------------------------------


def test_a_request_pending_at_a_wait_is_quoted_by_the_episode_of_the_turn_that_takes_it(
    store: Store, counter: TokenCounter
) -> None:
    s = Script(store)
    a = s.say("Deploy the staging build")
    s.start()
    deploy = s.run("make deploy-staging", 0)
    b = s.say("Also bump the version to 2.1")  # sent while the turn runs: pending
    s.wait("wait_ci")
    [first] = episodes(s)
    assert first.boundary == "wait_began" and first.seq_start <= b.seq <= first.seq_end
    assert first.excerpts == ["Deploy the staging build"]
    assert "bump the version" not in first.summary
    called, resulted = (next(e.seq for e in deploy if e.type == t) for t in ("tool.called", "tool.resulted"))
    assert first.sources == [a.seq, called, resulted]
    s.settle(None, "waiting")
    started = s.start()
    assert isinstance(started.payload, ev.TurnStarted) and started.payload.inputs == [b.seq]

    # The next prompt: b is the current input and nothing else shows it.
    view = gather(store, s.agent_id, inputs=[b.seq], started_seq=started.seq, tools=[])
    [ep] = view.episodes
    assert ep.sources == (a.seq, called, resulted)
    sections = build_sections(view, counter)
    refs = {x.key: set(x.renderings[0].refs) for x in sections}
    assert refs[f"episode:{first.episode_id}"] == {
        f"episode:{first.episode_id}",
        f"event:{a.seq}",
        f"event:{called}",
        f"event:{resulted}",
    }
    assembly = assemble(sections, budget_for(50_000))
    seen, duplicate = _refs(assembly)
    assert not duplicate and f"event:{b.seq}" in seen
    assert sum("bump the version" in str(m["content"]) for m in assembly.messages) == 1

    # The turn that took b seals the next episode, which quotes b although b precedes its range.
    s.run("bump-version 2.1", 0)
    s.wait("wait_release")
    second = episodes(s)[1]
    assert second.seq_start > b.seq and second.excerpts == ["Also bump the version to 2.1"]
    assert b.seq in (second.sources or [])
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_an_episode_quoting_a_current_input_is_left_out_and_its_sources_are_declared(counter: TokenCounter) -> None:
    current = inp(95, "Also bump the version to 2.1")
    summary = "Operator: Deploy the staging build / Also bump the version to 2.1."
    old = replace(episode("ep_80", 99, "Deploy", summary), seq_start=80, seq_end=98)  # sealed before sources
    new_quoting = replace(old, episode_id="ep_81", seq=100, sources=(81, 95))
    clean = "Deploy: bumped the version before. Operator: Deploy the staging build."
    new_clean = replace(old, episode_id="ep_82", seq=101, summary=clean, sources=(82, 84))
    view = make_view(inputs=(current,), episodes=(old, new_quoting, new_clean))
    a = assemble(build_sections(view, counter), budget_for(50_000))
    m = manifest(a)
    assert m["episode:ep_80"]["excluded"] and m["episode:ep_80"]["reason"] == "quotes the current input event:95"
    assert m["episode:ep_81"]["excluded"] and m["episode:ep_81"]["reason"] == "quotes the current input event:95"
    assert not m["episode:ep_82"]["excluded"]
    assert set(m["episode:ep_82"]["refs_included"]) == {"episode:ep_82", "event:82", "event:84"}  # type: ignore[arg-type]
    seen, duplicate = _refs(a)
    assert {"event:82", "event:84", "event:95"} <= seen and not duplicate
    # An external input inside an old episode's range was never quoted by it (only operator words were).
    external = inp(95, "build finished", authority="external", origin="external:ci")
    m = manifest(assemble(build_sections(make_view(inputs=(external,), episodes=(old,)), counter), budget_for(50_000)))
    assert "quotes the current input" not in str(m["episode:ep_80"]["reason"])


def test_a_summary_line_a_shown_turn_quotes_is_left_out_and_the_check_sees_no_duplicate(counter: TokenCounter) -> None:
    """An episode whose summary quotes a turn that is also shown: the layout leaves its lines out
    (the turn shows them); at a budget that cuts the turn, the summary stands in for it."""
    turn = history_turn("turn_a", 120, (inp(119, "Deploy the staging build"),), "Deployed.", thread="conv:1")
    lines = (
        EpisodeLine("# Episode ep_10 (Deploy; events 60-125): 1 turns, 0 tool calls; ended: wait began."),
        EpisodeLine("Operator: Deploy the staging build", ("event:119",)),
        EpisodeLine("Last reply: Deployed.", ("event:123",)),
    )
    quoting = replace(
        episode("ep_10", 60, "Deploy", "Operator: Deploy the staging build. Last reply: Deployed."),
        sources=(119, 123), lines=lines, thread="conv:1",
    )  # fmt: skip
    turn = replace(turn, settled_seq=123)
    view = make_view(
        history=(turn,), last_turn=turn, inputs=(inp(130, "Please deploy the staging build again, this time to the second cluster"),), episodes=(quoting,),
        thread="conv:1",
    )  # fmt: skip
    sections = build_sections(view, counter)
    wide = assemble(sections, budget_for(50_000))
    seen, duplicate = _refs(wide)
    assert not duplicate and {"event:119", "event:123"} <= seen
    assert manifest(wide)["episode:ep_10"]["representation"] == "omitted"
    assert sum("Deploy the staging build" in str(m["content"]) for m in wide.messages) == 1  # the turn only
    # Without the turn (cut by a budget, or out of the window), the summary's lines come back.
    alone = assemble(build_sections(replace(view, history=(), last_turn=None), counter), budget_for(50_000))
    assert "Operator: Deploy the staging build" in str(alone.messages) and not _refs(alone)[1]


def test_old_sealed_events_decode_without_sources_and_keep_their_bytes() -> None:
    new = ev.EpisodeSealed(episode_id="ep_3", seq_start=3, seq_end=9, boundary="wait_began", sources=[3, 5])
    text = encode_payload(new, blob_threshold=1 << 20, preview_chars=100).text
    data = orjson.loads(text)
    assert data["sources"] == [3, 5]
    del data["sources"]  # a row written before sources existed
    old_text = canonical_json(data).decode()
    old = decode_payload("episode.sealed", ev.EpisodeSealed.VERSION, old_text)
    assert isinstance(old, ev.EpisodeSealed) and old.sources is None
    assert ev.EpisodeSealed.VERSION == 1, "an optional field: no upcaster, old rows decode as they are"


# --- bug 4: episode labelling -------------------------------------------------------------------


def test_a_conversation_turn_that_never_settled_keeps_its_label_when_a_work_item_opens(store: Store) -> None:
    """Reproduction: a conversation turn started (the process died before it settled), then a work
    item was opened: the draft used to adopt the work item, so the sealed episode gave the work
    item's id and title to the conversation before it."""
    s = Script(store)
    chat = s.say("What's the weather like in Paris?")
    s.start()
    s.run("curl wttr.in/Paris", 0, "sunny")
    s.turn_id = None  # the process dies in this turn: it never settles
    opened = operator_opens(s, "wi_inv", "Prepare the ACME invoice")
    request = s.say("Start with the invoice totals")
    s.start()
    s.run("make totals", 0)
    s.settle("Totals done.")
    s.start()
    s.complete("wi_inv", "invoice sent")
    conversation, work = episodes(s)
    assert (conversation.seq_start, conversation.seq_end) == (chat.seq, opened.seq - 1)
    assert conversation.work_item_id is None and conversation.boundary == "work_switched"
    assert conversation.topic == "What's the weather like in Paris?"
    assert [c["command"] for c in conversation.commands] == ["curl wttr.in/Paris"]
    assert work.work_item_id == "wi_inv" and work.topic == "Prepare the ACME invoice"
    assert work.seq_start == opened.seq and work.excerpts == ["Start with the invoice totals"]
    assert "weather" not in work.summary.lower() and "curl" not in work.summary
    assert request.seq in (work.sources or [])
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


@pytest.mark.parametrize("before", ["settled", "requeued"])
def test_the_request_that_made_the_agent_open_a_work_item_belongs_to_it(store: Store, before: str) -> None:
    s = Script(store)
    chat = s.say("How are you today?")
    s.start()
    if before == "settled":
        s.settle("Fine, thanks.")
        ask = s.say("Please fix the flaky login test")
    else:  # the turn was interrupted: its input goes back to the queue and the next turn takes it
        s.run("uptime", 0)
        s.append(ev.TurnSettled(turn_id=s.turn_id or "", outcome="interrupted", requeue=True))
        s.turn_id = None
        ask = chat
    opener = s.start()
    assert isinstance(opener.payload, ev.TurnStarted) and ask.seq in opener.payload.inputs
    s.run("git status", 0)  # looked around before opening it: part of the work
    s.open_item("wi_login", "Fix flaky login test")
    s.run("pytest tests/test_login.py", 0)
    s.settle("Fixed.")
    s.start()
    s.complete("wi_login")
    conversation, work = episodes(s)
    assert conversation.work_item_id is None and conversation.seq_end == opener.seq - 1
    assert work.work_item_id == "wi_login" and work.topic == "Fix flaky login test"
    assert work.seq_start == opener.seq
    assert work.excerpts == [("Please fix the flaky login test" if before == "settled" else "How are you today?")]
    assert ask.seq in (work.sources or [])
    assert [c["command"] for c in work.commands] == ["git status", "pytest tests/test_login.py"]
    if before == "settled":
        assert conversation.excerpts == ["How are you today?"] and conversation.last_reply == "Fine, thanks."
    else:  # the interrupted turn took nothing for good: its conversation episode quotes no request
        assert conversation.excerpts == [] and conversation.work_item_id is None
        assert [c["command"] for c in conversation.commands] == ["uptime"]
    assert_contiguous(store, s.agent_id)
    assert_sound(store)


def test_messages_heard_before_any_turn_go_with_the_turn_that_takes_them(store: Store) -> None:
    """No turn ran before the work item opened: nothing happened in the draft, it adopts the work
    item, and the pending request is quoted by the work item's first turn, which takes it."""
    s = Script(store)
    ask = s.say("The invoice for ACME is overdue, please send it")
    opened = operator_opens(s, "wi_inv", "Send the ACME invoice")
    s.start()
    s.run("make invoice", 0)
    s.complete("wi_inv")
    [work] = episodes(s)
    assert work.seq_start == ask.seq and work.work_item_id == "wi_inv" and opened.seq <= work.seq_end
    assert work.excerpts == ["The invoice for ACME is overdue, please send it"]
    assert_sound(store)


def test_sealed_episodes_replay_identically(store: Store) -> None:
    """The drafts' new fields fold the same way from scratch (replay compares rows byte for byte)."""
    s = Script(store)
    s.say("hello")
    s.start()
    s.settle("hi")
    s.say("open the docs work")
    s.start()
    s.open_item("wi_docs", "Docs")
    s.settle("opened")
    assert len(sealed(store, s.agent_id)) == 1
    assert_sound(store)


def test_a_decision_an_episode_quotes_is_shown_once_by_the_decisions_list(counter: TokenCounter) -> None:
    """Declaring an episode's sources surfaced a real duplicate: a decision older than the history
    window was listed with the decisions and quoted by the episode it was made in. The decisions
    list outranks episodes, so the episode's line quoting it is left out at layout."""
    said = "We will use PostgreSQL for the orders service"
    decision = KeyPoint(seq=12, text=said, thread="conv:1")
    other = KeyPoint(seq=30, text="Never deploy on Fridays", thread="conv:1", kind="rule")
    lines = (
        EpisodeLine("# Episode ep_10 (orders service; events 10-59): 20 turns, 0 tool calls; ended: turn cap."),
        EpisodeLine(f"Operator: {said}", ("event:12",)),
        EpisodeLine("Files: orders/db.py.", ("event:40",)),
    )
    ep = replace(
        episode("ep_10", 60, "orders service", f"orders service: 20 turns. Operator: {said}."),
        seq_start=10, seq_end=59, sources=(12, 40), lines=lines, thread="conv:1",
    )  # fmt: skip
    view = make_view(
        key_points=(decision, other), episodes=(ep,), inputs=(inp(90, "which database for the orders service?"),),
        thread="conv:1",
    )  # fmt: skip
    sections = {x.key: x for x in build_sections(view, counter)}
    assert sections["decisions"].priority > sections["episode:ep_10"].priority
    assert (
        said in sections["decisions"].renderings[0].text
        and "Never deploy on Fridays" in sections["decisions"].renderings[0].text
    )
    for limit in (pinned_minimum(list(sections.values())) + 120, 50_000):
        a = assemble(list(sections.values()), budget_for(limit))
        assert not _refs(a)[1]
        assert sum(said in str(m["content"]) for m in a.messages) == 1


# --- properties under random histories ------------------------------------------------------------


_ACTIONS = st.one_of(
    st.tuples(st.just("say"), st.sampled_from(["hello", "we will use Postgres", "换个话题", "deploy it"])),
    st.tuples(st.just("hear"), st.sampled_from(["external", "timer"])),
    st.tuples(st.just("start")),
    st.tuples(st.just("settle"), st.sampled_from(["completed", "interrupted", "failed", "waiting"])),
    st.tuples(st.just("run")),
    st.tuples(st.just("open"), st.sampled_from(["wi_1", "wi_2"]), st.booleans()),
    st.tuples(st.just("pick"), st.sampled_from(["wi_1", "wi_2"])),
    st.tuples(st.just("operator_opens"), st.sampled_from(["wi_3", "wi_4"])),
    st.tuples(st.just("complete")),
    st.tuples(st.just("wait")),
    st.tuples(st.just("idle")),
)


def _play(s: Script, clock: FakeClock, action: tuple[object, ...], n: int) -> None:
    active = s.store.working_memory(s.agent_id).get("active_work_item")
    match action:
        case ("say", text):
            s.say(str(text))
        case ("hear", authority):
            s.say(f"{authority} news", authority=authority)  # type: ignore[arg-type]
        case ("start",):
            s.start()  # a turn still running is left unsettled: the process died in it
        case ("settle", outcome) if s.turn_id is not None:
            s.settle("reply", str(outcome))
        case ("run",) if s.turn_id is not None:
            s.run(f"make step{n}", n % 3)
        case ("open", wid, activate) if s.turn_id is not None:
            s.open_item(str(wid), f"Title of {wid}", activate=bool(activate))
        case ("pick", wid) if s.turn_id is not None:
            s.pick(str(wid))
        case ("operator_opens", wid):
            operator_opens(s, str(wid), f"Title of {wid}")
        case ("complete",) if s.turn_id is not None and active:
            s.complete(str(active))
        case ("wait",) if s.turn_id is not None:
            s.wait(f"wait_{n}")
        case ("idle",):
            clock.advance(seconds=IDLE_GAP_US // 1_000_000 + 1)
        case _:
            pass  # needs a running turn (or an active work item): skipped


@settings(max_examples=examples(120), deadline=None)
@given(st.lists(_ACTIONS, min_size=1, max_size=40))
def test_random_histories_quote_only_taken_requests_and_label_by_thread(actions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = resolve_home(Path(tmp) / "home")
        cfg = load_settings(home)
        cfg = cfg.model_copy(update={"ledger": cfg.ledger.model_copy(update={"synchronous": "NORMAL"})})
        clock = FakeClock()
        with Store.open(home, cfg, clock=clock) as store:
            s = Script(store)
            for n, action in enumerate(actions):
                _play(s, clock, action, n)
            mine = {e.seq: e for e in store.ledger.read(agent_id=s.agent_id)}
            for p in episodes(s):
                inside = [mine[q] for q in sorted(mine) if p.seq_start <= q <= p.seq_end]
                starts = [e for e in inside if isinstance(e.payload, ev.TurnStarted)]
                taken = {i for e in starts if isinstance(e.payload, ev.TurnStarted) for i in e.payload.inputs}
                assert p.sources is not None and p.sources == sorted(set(p.sources))
                assert all(q <= p.seq_end and q in mine for q in p.sources)
                quoted = [q for q in p.sources if mine[q].type == "message.received"]
                assert set(quoted) <= taken, "an episode quotes only requests its turns took"
                assert all(mine[q].authority == "operator" for q in quoted)
                if p.work_item_id is None:
                    continue
                # Every turn in a work item's episode ran in it, or is the turn that moved to it.
                moved_by = {
                    e.turn_id
                    for e in inside
                    if isinstance(e.payload, ev.WorkItemOpened | ev.WorkItemPicked)
                    and e.payload.work_item_id == p.work_item_id
                }
                for e in starts:
                    assert e.work_item_id == p.work_item_id or e.turn_id in moved_by, (p, e)
            assert_contiguous(store, s.agent_id)
            assert_sound(store)


def test_a_work_item_opened_for_later_does_not_label_the_conversation(store: Store) -> None:
    s = Script(store)
    s.say("Note the docs work for later, and tell me the time")
    s.start()
    s.open_item("wi_docs", "Write docs", activate=False)
    s.wait("wait_x")
    [p] = episodes(s)
    assert p.work_item_id is None and p.topic == "Note the docs work for later, and tell me the time"
    assert_sound(store)


def test_a_request_its_turn_gave_back_after_the_boundary_keeps_the_episode_out_of_the_prompt(
    store: Store, counter: TokenCounter
) -> None:
    """The turn registered a wait (sealing the episode, which quotes its request), then was
    interrupted: the request went back to the queue and is the next turn's current input. The
    episode cannot know that when sealed, so the prompt leaves it out."""
    s = Script(store)
    ask = s.say("Deploy the staging build")
    s.start()
    s.wait("wait_ci")
    [p] = episodes(s)
    assert p.sources is not None and ask.seq in p.sources
    s.settle(None, "interrupted")
    assert store.agent(s.agent_id).pending_inputs == [ask.seq]
    started = s.start()
    view = gather(store, s.agent_id, inputs=[ask.seq], started_seq=started.seq, tools=[])
    m = manifest(assemble(build_sections(view, counter), budget_for(50_000)))
    assert m[f"episode:{p.episode_id}"]["excluded"]
    assert m[f"episode:{p.episode_id}"]["reason"] == f"quotes the current input event:{ask.seq}"


def test_another_threads_evidence_comes_in_only_for_what_this_thread_does_not_say(counter: TokenCounter) -> None:
    """Issue 17, generic overlap: the incident report and the sales report share "报告"; this thread
    already says it, so the other thread's turn and episode add nothing and stay out. A word only
    the other thread uses still brings it in."""
    incident = history_turn(
        "t_incident", 10, (inp(10, "起草上周支付故障的事故报告：中断47分钟。"),), "事故报告已起草：根因是API密钥过期。",  # noqa: RUF001
        thread="conv:9",
    )  # fmt: skip
    sales = history_turn(
        "t_sales", 28, (inp(28, "准备五月份的月度销售报告：312个订单。"),), "五月销售报告已开始：312个订单。",  # noqa: RUF001
        thread="conv:28",
    )  # fmt: skip
    ep = replace(episode("ep_9", 20, "事故报告", "起草上周支付故障的事故报告：中断47分钟。"), thread="conv:9")  # noqa: RUF001
    for text, shown in [("在报告里加一张每周订单数的图。", False), ("把支付故障的中断时间也写进报告。", True)]:
        view = make_view(history=(incident, sales), episodes=(ep,), inputs=(inp(33, text),), thread="conv:28")
        sections = {x.key: x for x in build_sections(view, counter)}
        assert sections["turn:t_incident"].excluded is not shown, text
        assert sections["episode:ep_9"].excluded is not shown, text


def test_bigrams_nothing_in_the_past_uses_do_not_dilute_what_the_input_asks_for(counter: TokenCounter) -> None:
    """A Chinese question yields bigrams across word boundaries ("哪来", "来着") that no past text
    has: they say nothing about which past is meant, so a paused work item's note the question
    asks for ("wifi密码") comes back as it does in English."""
    note = inp(2, "顺便说一下：办公室的wifi密码写在咖啡机旁边的卡片上。")  # noqa: RUF001
    paused = history_turn(
        "t_refunds", 5, (note, inp(3, "请重构支付模块，把退款拆成单独的服务。")), "退款已放进refund_service.py。",  # noqa: RUF001
        thread="wi_refunds", work_item_id="wi_refunds",
    )  # fmt: skip
    review = history_turn(
        "t_review", 9, (inp(8, "季度权限审查今天到期：谁还有管理员权限？"),), "有七个人有管理员权限。",  # noqa: RUF001
        thread="wi_review", work_item_id="wi_review",
    )  # fmt: skip
    view = make_view(
        history=(paused, review), inputs=(inp(22, "我说过wifi密码在哪来着？"),), thread="wi_review",  # noqa: RUF001
        working_memory={"work_stack": ["wi_refunds"]},
    )  # fmt: skip
    sections = {x.key: x for x in build_sections(view, counter)}
    assert not sections["turn:t_refunds"].excluded
    assert "wifi密码" in str(sections["turn:t_refunds"].renderings[0].messages)


def test_an_accepted_proposal_a_shown_turn_quotes_is_not_repeated_by_the_decisions_list(
    counter: TokenCounter,
) -> None:
    """The decisions list cited the operator's "yes" and the assistant's proposal on one line: with
    the proposal's turn shown and the "yes" turn cut, the line stayed (the "yes" was not shown)
    and the proposal was shown twice. The acceptance and the proposal are now lines of their own."""
    proposal = "I suggest keeping the free tier at 5 projects: it covers most hobby users."
    asked = history_turn("t_asked", 10, (inp(10, "How many projects should the free tier allow?"),), proposal)
    point = KeyPoint(seq=14, text=proposal, thread="conv:1", speaker="assistant", source_seq=13)
    view = make_view(key_points=(point,), history=(asked,), inputs=(inp(40, "Remind me of the free tier limit."),))
    sections = list(build_sections(view, counter))
    a = assemble(sections, budget_for(50_000))
    assert sum(proposal in str(m["content"]) for m in a.messages) == 1
    assert "the operator accepted; event:14" in str(a.messages)
    assert not _refs(a)[1]


def test_what_the_input_asks_for_from_another_thread_outlives_this_threads_unrelated_turns(
    counter: TokenCounter,
) -> None:
    """Structure first, but not blindly: a turn of another thread the input asks for (most of its
    weighted terms) ranks with this thread's turns as relevant as it is, so at a small budget it
    stays and the unrelated recent turns of this thread go first."""
    note = history_turn(
        "t_note", 2, (inp(2, "Quick note: the office wifi password is on the card by the coffee machine."),), "Noted.",
        thread="conv:1",
    )  # fmt: skip
    chatter = tuple(
        history_turn(f"t_{n}", 10 + 4 * n, (inp(10 + 4 * n, f"status line {n} of the nightly batch run"),),
                     "Batch run still going.", thread="conv:9")
        for n in range(6)
    )  # fmt: skip
    view = make_view(
        history=(note, *chatter), inputs=(inp(90, "Where did I say the wifi password is?"),), thread="conv:9"
    )
    sections = {x.key: x for x in build_sections(view, counter)}
    # (t_0 opened this thread: it is kept as the anchor of what is being done, whatever it says)
    assert sections["turn:t_note"].priority > max(sections[f"turn:t_{n}"].priority for n in range(1, 6))


def test_a_turn_shown_from_another_thread_comes_with_the_later_turn_that_revises_it(counter: TokenCounter) -> None:
    """The input's words ("价格", price) are in the old price's turn only; the revision says "涨到59"
    and "改为" (goes up, changed to). Shown alone, the old turn would state a price that no longer
    holds: the revision of its thread comes with it."""
    raise_it = "工作坊门票涨到59欧元，场地变贵了。"  # noqa: RUF001
    hike, ok = "周末去爬山吧。", "好的，周六早上出发。"  # noqa: RUF001
    asked = "我在做报名页面，上面的价格应该写多少？"  # noqa: RUF001
    old = history_turn("t_old", 10, (inp(10, "工作坊门票49欧元。"),), "门票价格：49欧元。", thread="conv:2")  # noqa: RUF001
    new = history_turn("t_new", 60, (inp(60, raise_it),), "门票改为59欧元。", thread="conv:2")
    other = history_turn("t_other", 80, (inp(80, hike),), ok, thread="conv:2")
    view = make_view(history=(old, new, other), inputs=(inp(90, asked),), thread="conv:90")
    sections = {x.key: x for x in build_sections(view, counter)}
    assert not sections["turn:t_old"].excluded and not sections["turn:t_new"].excluded
    assert sections["turn:t_other"].excluded


def test_an_episode_line_quoting_a_superseded_decision_says_so(counter: TokenCounter) -> None:
    """At a small budget an old turn survives as its episode's line: a decision replaced later is
    marked there too, as a shown turn is, never restated as if it held."""
    old = KeyPoint(seq=12, text="The release goes out on Friday then.", thread="conv:1", superseded_by=70)
    new = KeyPoint(seq=70, text="Actually, push the release to Monday.", thread="conv:1")
    lines = (
        EpisodeLine("# Episode ep_10 (release; events 10-59): 20 turns, 0 tool calls; ended: turn cap."),
        EpisodeLine("Operator: The release goes out on Friday then.", ("event:12",)),
        EpisodeLine("Files: release/notes.md.", ("event:40",)),
    )
    ep = replace(
        episode("ep_10", 60, "release", "release: 20 turns."),
        seq_start=10, seq_end=59, sources=(12, 40), lines=lines, thread="conv:1",
    )  # fmt: skip
    view = make_view(key_points=(old, new), episodes=(ep,), inputs=(inp(90, "When is the release?"),), thread="conv:1")
    text = {x.key: x for x in build_sections(view, counter)}["episode:ep_10"].renderings[0].text
    [line] = [x for x in text.splitlines() if "Friday" in x]
    assert "superseded later (event:70)" in line
    assert "superseded" not in text.replace(line, "")
