"""Conversation structure without a model (holon.projections.dialogue): where an operator message
belongs and what it settles, in English and Chinese, with and without marker words."""

from __future__ import annotations

import math
import random
import re

from helpers.props import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from holon.projections import dialogue as d

INVOICE = d.terms(
    "Please prepare the ACME invoice for the March consulting work. I will send the ACME invoice "
    "tomorrow morning once the hours are confirmed. The hours are 42, rate 100 EUR."
)
OFFSITE = d.terms("Let's plan the agenda for the team offsite in Lisbon. How many days is the offsite?")


def test_short_replies_stay_whatever_their_language() -> None:
    for text in ["yes", "option B", "that one", "the second one", "对，就这样", "好的", "ok, do it"]:  # noqa: RUF001
        assert d.is_reply(text), text
        assert d.next_move(text, OFFSITE, [("conv:1", INVOICE)], "Which option do you prefer?").kind == "stay"
    assert not d.is_reply("What expiry did the cache get?")  # short, but it names its subject


def test_a_new_subject_switches_without_a_marker() -> None:
    for text in [
        "Let's start on the quarterly report.",
        "Help me plan the agenda for the team offsite in Lisbon.",
        "接下来帮我写季度报告。",
        "The staging database keeps running out of disk space overnight.",
    ]:
        move = d.next_move(text, INVOICE, [], "Noted: 42 hours at 100 EUR.")
        assert move.kind == "switch", (text, move)


def test_a_follow_up_that_shares_the_subject_stays() -> None:
    assert d.next_move("Two days, twelve people, mostly engineers.", OFFSITE, [], "How many days?").kind == "stay"
    # An answer to the assistant's question may use words of its own.
    assert d.next_move("About 5000 euros, flexible.", OFFSITE, [], "What is the budget?").kind == "stay"
    # Few new words and no opening: a false switch would hide the recent turns, so it stays.
    assert d.next_move("never deploy on Fridays", INVOICE, [], "noted").kind == "stay"


def test_a_return_to_an_earlier_thread_needs_no_marker() -> None:
    for text in ["ok, the invoice again — where were we?", "Did the hours for ACME get confirmed?", "回到发票的事"]:
        zh = d.terms("请准备ACME的发票") if "发票" in text else frozenset()
        move = d.next_move(text, OFFSITE, [("conv:1", INVOICE | zh)], "Then a hack day works well.")
        assert (move.kind, move.target) == ("return", "conv:1"), (text, move)


def test_words_every_thread_uses_do_not_decide_a_return() -> None:
    deploy = d.terms("deploy server nginx")
    report = d.terms("deploy report quarterly")
    # "deploy" is in both threads; "quarterly" is only in the report thread.
    move = d.next_move("Where is the quarterly deploy summary?", deploy, [("conv:9", report)], None)
    assert (move.kind, move.target) == ("return", "conv:9")
    assert d.next_move("Restart the deploy now please", deploy, [("conv:9", report)], None).kind == "stay"


def test_one_shared_word_does_not_return_a_message_with_a_subject_of_its_own() -> None:
    incident = d.terms("Draft the incident report for last week's payment outage: 47 minutes, an expired API key.")
    filler = d.terms("alpha bravo charlie delta echo foxtrot golf hotel")
    # "report" is all it shares with the incident thread: the sales report is a subject of its own.
    move = d.next_move("Prepare the monthly sales report for May: 312 orders, revenue up 8%.", filler,
                       [("conv:4", incident)], "hotel golf")  # fmt: skip
    assert move.kind == "switch", move
    # Two shared words, or asking to change what is there, still return.
    move = d.next_move("Is the incident report for the payment outage done?", filler, [("conv:4", incident)], None)
    assert (move.kind, move.target) == ("return", "conv:4"), move
    job = d.terms("Can you draft the job posting for the data engineer role?")
    move = d.next_move("Mention that the role is remote-friendly and the salary band.", filler, [("conv:9", job)], None)
    assert (move.kind, move.target) == ("return", "conv:9"), move
    # Chinese: a shared word is a shared bigram, and two of them hold.
    branch = d.terms("分支命名采用feature/<工单号>-<简称>，并保护main分支。")  # noqa: RUF001
    move = d.next_move("我开始做112号工单，设置页面。我的分支该叫什么？", filler, [("conv:3", branch)], None)  # noqa: RUF001
    assert (move.kind, move.target) == ("return", "conv:3"), move


def test_an_ok_before_an_instruction_about_the_reply_keeps_the_thread() -> None:
    repo = d.terms("给新的移动团队建好代码仓库。分支命名采用feature/<工单号>-<简称>，并保护main分支。")  # noqa: RUF001
    for text in ["好，再加上拉取请求的CI流程。", "Good, and add the CI workflow for pull requests."]:  # noqa: RUF001
        assert d.next_move(text, repo, [], "分支命名采用feature/<工单号>-<简称>。").kind == "stay", text


def test_what_settles_a_decision_or_a_rule() -> None:
    asked = "Thursday is risky because of the freeze; Friday gives QA a day. Which do you prefer?"
    found = d.settles("The release goes out on Friday then.", asked)
    assert found is not None and (found.kind, found.speaker) == ("decision", "operator")
    found = d.settles("yes", "I suggest PostgreSQL with one append-only table. Shall I set that up?")
    assert found is not None and found.speaker == "assistant" and "PostgreSQL" in found.text
    assert d.settles("no, use SQLite", "I suggest PostgreSQL. Shall I set that up?") is None or (
        d.settles("no, use SQLite", "I suggest PostgreSQL. Shall I set that up?").speaker == "operator"  # type: ignore[union-attr]
    )
    rule = d.settles("以后都用中文回答", None)
    assert rule is not None and rule.kind == "rule"
    assert d.settles("what did we decide?", None) is None
    assert d.settles("how is the build going?", "The build is green.") is None
    carried = d.carried_on("Good. Also the rate limiter needs work.", "I will use Redis with a 5 minute expiry.")
    assert carried is not None and carried.speaker == "assistant" and "Redis" in carried.text
    assert d.carried_on("No, not Redis.", "I will use Redis with a 5 minute expiry.") is None


def test_a_later_statement_on_the_same_subject_supersedes() -> None:
    assert d.supersedes("Actually, move the release to Monday instead.", "The release goes out on Friday then.")
    assert not d.supersedes("Use Redis for the cache.", "The release goes out on Friday then.")
    assert d.revises("Actually, move the release to Monday instead.", ["The release goes out on Friday then."])
    assert not d.revises("Move the meeting to noon.", ["The release goes out on Friday then."])


@given(st.text(max_size=300), st.text(max_size=300))
def test_any_text_gets_an_answer_never_an_error(text: str, reply: str) -> None:
    move = d.next_move(text, INVOICE, [("conv:1", OFFSITE)], reply or None, idle=len(text) % 2 == 0)
    assert move.kind in ("stay", "switch", "return")
    d.settles(text, reply or None)
    d.carried_on(text, reply or None)
    d.supersedes(text, reply)


_CUES = {name: cue for name, cue in vars(d).items() if isinstance(cue, d._Cue)}
# Every literal word of the cue patterns, the needles' words, and words around them, in any case,
# joined by separators that do and do not end a word (apostrophes, underscores, digits, CJK).
_VOCAB = sorted(
    {w for c in _CUES.values() for w in re.findall(r"[A-Za-z]+", c.pattern.pattern)}
    | {"okay", "tokens", "nothingness", "users", "cancelled", "decided", "goes", "plans", "lets", "id"}
)
_SEPARATORS = [" ", "  ", "'", "\u2019", ", ", ". ", "?", "_", "-", "\n", "\t", "1", "x", "好的", "已经取消", ""]


@settings(max_examples=examples(400))
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_VOCAB).flatmap(lambda w: st.sampled_from([w, w.upper(), w.capitalize()])),
            st.sampled_from(_SEPARATORS),
        ),
        max_size=14,
    )
)
def test_a_cue_answers_as_its_pattern(parts: list[str]) -> None:
    text = "".join(parts)
    for name, cue in _CUES.items():
        assert bool(cue.search(text)) == bool(cue.pattern.search(text)), (name, text)


def test_every_cue_alternative_passes_its_needles() -> None:
    """Each cue's own sample phrases, alone and inside a sentence, are found as the pattern finds them."""
    samples = [
        "I'll do it", "we will", "Let's go", "lets", "shall we", "What about it", "my plan", "The plan is",
        "I'd suggest", "id use", "never", "Don't ever", "dont ever", "nothing at all until", "limited to",
        "decided", "we'll go with", "We will use", "let's use", "lets go with", "finally", "then", "not sure anymore", "goes up", "go down", "from now",
        "no", "Nope", "nah", "don't", "hold on", "Wait", "rather than", "OK", "okay", "yes", "Yup", "Done",
        "sounds good", "noted", "canceled", "cancelled", "set up", "noted down", "at least", "budget is",
        "from now on", "the rule is", "no later than", "everything goes to", "not a blocker anymore",
    ]  # fmt: skip
    words = _VOCAB + [w.upper() for w in _VOCAB]
    samples += words + [f"{a} {b}" for a in _VOCAB for b in _VOCAB]
    for sample in samples:
        for text in (sample, f"So, {sample}.", f"x_{sample}", f"{sample}_x", f"({sample})"):
            for name, cue in _CUES.items():
                assert bool(cue.search(text)) == bool(cue.pattern.search(text)), (name, text)


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=2, max_size=30, unique=True), st.randoms())
def test_a_threads_score_does_not_depend_on_the_order_of_its_terms(counts: list[int], rnd: random.Random) -> None:
    """A set's iteration order follows the process's string hashing: the score of the terms two
    threads share must be the same float in any order, or a replay under another PYTHONHASHSEED
    can split a near tie the other way (it did, with a plain ``sum``)."""
    from holon.projections.dialogue import _score

    weight = {f"w{n}": 1.0 / n for n in counts}
    terms = list(weight)
    first = _score(frozenset(terms), weight)
    for _ in range(5):
        rnd.shuffle(terms)
        assert math.fsum(weight[t] for t in terms) == first
        assert _score(frozenset(terms), weight) == first
