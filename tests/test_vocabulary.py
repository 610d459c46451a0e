"""The shared vocabulary of issue 16: one tokeniser (``holon.memory.text``) and one
``MemoryGetRequest`` value."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holon.context.sections import _terms
from holon.errors import UsageError
from holon.memory.get import DEFAULT_MAX_CHARS, MemoryGetRequest
from holon.memory.recall import content_terms as recall_terms
from holon.memory.text import CHATTER, STOP_WORDS, content_terms, content_words, plan_query


def test_relevance_terms_are_content_words_without_chatter() -> None:
    text = "Thanks! Please check the children's tests of the deploy script, okay? 我们明天发布"
    terms = _terms(text)
    assert {"check", "child", "test", "deploy", "script"} <= terms
    assert not terms & (CHATTER | STOP_WORDS)
    # Unsegmented runs as bigrams, less those that only manage the conversation ("我们": we).
    assert {"们明", "明天", "天发", "发布"} <= terms and "我们" not in terms
    assert all(len(t) >= 3 or len(t) == 2 for t in terms)


def test_search_keeps_chatter_but_not_stop_words() -> None:
    assert plan_query("please deploy the service in may").terms == ("please", "deploy", "service", "may")
    assert plan_query("the of").terms == ("the", "of")  # nothing else left: the stop words stay


def test_recall_uses_the_same_terms() -> None:
    assert recall_terms is content_terms
    assert content_terms("The children drew pictures") == frozenset({"child", "draw", "pictur"})
    assert content_words("wrote, written, writes", drop=frozenset({"writes"})) == ["write", "write"]


@given(st.text(max_size=200))
def test_any_text_tokenises(text: str) -> None:
    # Relevance terms are content terms (a final "e" dropped, so "invoice" meets "invoices").
    known = content_terms(text)
    assert all(t in known or f"{t}e" in known for t in _terms(text))
    plan_query(text)


def test_memory_get_request_is_checked_once_and_frozen() -> None:
    r = MemoryGetRequest(ref="file:agent/self.md", heading="Role")
    assert r.chosen == "section"
    assert r.params() == {
        "ref": "file:agent/self.md",
        "heading": "Role",
        "expand": False,
        "max_chars": DEFAULT_MAX_CHARS,
    }
    assert MemoryGetRequest(**r.params()) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.mode = "tail"  # type: ignore[misc]
    assert MemoryGetRequest(ref="episode:ep_1", expand=True).expand


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"ref": "nonsense"}, "reference"),
        ({"ref": "file:agent/self.md", "mode": "tail", "heading": "Role"}, "heading goes with mode 'section'"),
        ({"ref": "file:agent/self.md", "max_chars": 10}, "max_chars must be between"),
        ({"ref": "event:3", "expand": True}, "expand applies to episode"),
    ],
)
def test_memory_get_request_refuses_bad_options(options: dict[str, object], problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        MemoryGetRequest(**options)  # type: ignore[arg-type]
