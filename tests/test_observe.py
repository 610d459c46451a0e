# ruff: noqa: RUF001  (Chinese text has full-width punctuation)
"""The scenario verdict observes the prompt: hand-made assemblies, text found where it is shown.

Each test builds sections by hand, assembles them with the real assembler (which records the
rendering chosen for each section) and asks ``observe`` where each event's text is shown.
"""

from __future__ import annotations

from typing import Any

from holon.context.assembler import Assembly, Budget, Rendering, Section, assemble
from holon.context.render import shorten
from holon.runtime.observe import observe, shows

BUDGET = Budget(context_window=100_000, output_reserve=1_000)


def text_section(key: str, text: str, refs: tuple[str, ...] = (), order: int = 0) -> Section:
    return Section(key, "turn", "context", order, 500, (Rendering("full", 10, text=text, refs=refs),))


def turn_section(key: str, said: str, reply: str, order: int) -> Section:
    msgs: tuple[dict[str, Any], ...] = ({"role": "user", "content": said}, {"role": "assistant", "content": reply})
    return Section(key, "turn", "history", order, 500, (Rendering("full", 10, messages=msgs),))


def input_section(text: str) -> Section:
    msg = ({"role": "user", "content": text},)
    return Section("input", "turn", "input", 0, 1000, (Rendering("full", 10, messages=msg),), pinned=True)


def assembly(*sections: Section) -> Assembly:
    return assemble(list(sections), BUDGET)


RENEW = "Renew the wildcard certificate for example.org before Friday, the old one expires on Saturday."


def test_the_assembly_records_the_rendering_chosen_for_each_section() -> None:
    full = Rendering("full", 50, text="a long rendering of the work item")
    compact = Rendering("compact", 5, text="short")
    sections = [
        Section("work_item", "turn", "context", 0, 500, (full, compact)),
        Section("gone", "turn", "context", 1, 1, (Rendering("full", 40, text="dropped first"),)),
        input_section("hi"),
    ]
    a = assemble(sections, Budget(context_window=40, output_reserve=0, frame_tokens=0))
    assert a.chosen["work_item"] is compact
    assert "gone" not in a.chosen and a.chosen["input"].messages[0]["content"] == "hi"
    assert "chosen" not in a.manifest.to_json()  # the recorded layout is unchanged


def test_text_inside_an_episode_summary_is_shown_as_a_summary() -> None:
    summary = f"Renewals: 1 turns, 0 tool calls. Operator: {RENEW[:60]}…. Ended: wait began."
    a = assembly(text_section("episode:ep_5", summary), input_section("What is left to do?"))
    seen = observe(a, {7: RENEW, 20: "What is left to do?"}, {"ep_5": (5, 9)})
    assert seen[7].shown and seen[7].how == "summary" and seen[7].section == "episode:ep_5"
    assert seen[7].to_json() == {"shown": True, "how": "summary", "section": "episode:ep_5"}
    assert seen[20].how == "text" and seen[20].section == "input"


def test_an_episode_only_counts_for_the_events_in_its_range() -> None:
    a = assembly(text_section("episode:ep_5", f"Operator: {RENEW}"), input_section("ok"))
    seen = observe(a, {30: RENEW}, {"ep_5": (5, 9)})
    assert not seen[30].shown and seen[30].how is None and seen[30].section is None


def test_work_items_waits_and_task_results_are_shown_wherever_their_text_is() -> None:
    item = "Migrate billing to the payments API"
    wait = "Legal to approve the wording of clause 9 on liability"
    result = "pytest: 412 passed, 1 failed: tests/test_login.py::test_expired_session"
    a = assembly(
        text_section("work_item", f"# Current work item: {item} (wi_a, active)\nObjective: {item}"),
        text_section("tasks_waits", f"# Running tasks and waits\nWaiting on operator (recheck x): {wait}", order=4),
        turn_section("turn:t1", f"[tool/task result from task:1; information]\nTask 1 ended.\n{result}", "ok", 5),
        input_section("Anything blocking?"),
    )
    seen = observe(a, {3: item, 9: wait, 12: result}, {})
    assert (seen[3].how, seen[3].section) == ("text", "work_item")
    assert (seen[9].how, seen[9].section) == ("text", "tasks_waits")
    assert (seen[12].how, seen[12].section) == ("text", "turn:t1")


def test_a_shortened_rendering_still_shows_its_event() -> None:
    long = "The deploy log follows. " + " ".join(f"step {i} finished in {i * 3} ms on host web-{i}" for i in range(200))
    a = assembly(input_section(shorten(long, 300)))
    assert observe(a, {4: long}, {})[4].how == "text"


def test_chinese_text_is_matched_by_characters() -> None:
    said = "有两个选择：一是今天发布，不包含搜索功能；二是等到周五，把搜索功能一起发布。你选哪个？"
    a = assembly(
        text_section("episode:ep_2", f"发布：1 turns。Last reply: {said[:30]}…"),
        turn_section("turn:t9", "准备发布 2.3 版本。", "好的，我来准备。", 3),
        input_section("第二个"),
    )
    seen = observe(a, {3: said, 8: "准备发布 2.3 版本。", 11: "第二个", 12: "今天不发布，下周再说。"}, {"ep_2": (1, 5)})
    assert seen[3].how == "summary"
    assert seen[8].how == "text" and seen[11].section == "input"
    assert not seen[12].shown  # shares characters with what is shown, but is not shown


def test_a_short_text_is_shown_only_by_a_line_of_its_own() -> None:
    assert shows("yes", "yes")
    assert shows("yes", "[operator, 10:00]\nyes")
    assert not shows("yes", "Yes, the old staging servers are gone; should I delete the backups?")
    assert not shows("好的", "好的，以后我都用中文回答。")


def test_generic_words_in_common_do_not_count_as_showing() -> None:
    said = "Write the weekly status update for the design team: two new hires started."
    other = "Send me a quick update on the team's progress with the server migration."
    assert not shows(said, other)


def test_the_same_message_shown_by_two_sections_is_seen_twice() -> None:
    a = assembly(text_section("episode:ep_1", f"Operator: {RENEW}"), input_section(RENEW))
    seen = observe(a, {3: RENEW}, {"ep_1": (1, 3)})
    assert [k for k, _h in seen[3].places] == ["episode:ep_1", "input"]
    assert seen[3].how == "text" and seen[3].section == "input"  # text wins over a summary


def test_a_restated_decision_must_say_it_was_superseded() -> None:
    old = "The release goes out on Friday then."
    marked = assembly(text_section("decisions", f"# Decisions\n- {old} (superseded by event:40)\n- Monday."))
    unmarked = assembly(text_section("decisions", f"# Decisions\n- {old}\n- Monday."))
    verbatim = assembly(turn_section("turn:t1", old, "Friday, noted.", 1))
    assert observe(marked, {3: old}, {})[3].marked_superseded
    assert not observe(unmarked, {3: old}, {})[3].marked_superseded
    assert observe(verbatim, {3: old}, {})[3].marked_superseded  # the conversation itself says what followed
    assert observe(unmarked, {3: old}, {})[3].how == "summary"


def test_a_short_sentence_on_the_same_subject_is_not_the_same_text() -> None:
    assert not shows("Understood: PostgreSQL for the orders service.", "we will use PostgreSQL for the orders service")
    assert not shows("网店用哪家支付服务商？", "会计问网店用的是哪家支付服务商。")
    assert shows("网店用哪家支付服务商？", "[operator]\n网店用哪家支付服务商？")
