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
from holon.memory.text import (
    CHATTER,
    IRREGULAR,
    MAX_TERM_CHARS,
    STOP_WORDS,
    content_terms,
    content_words,
    fold,
    folded_words,
    index_terms,
    is_unsegmented,
    plan_query,
    words,
)


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


def _index_terms_reference(text: str) -> str:
    """``index_terms`` without its ASCII path: the words of ``fold``, one by one, each looked up."""
    out: list[str] = []
    for w in words(fold(text)):
        if is_unsegmented(w):
            out.extend([w, w[0]] if len(w) == 2 else [w])
        else:
            out.append(IRREGULAR.get(w, w)[:MAX_TERM_CHARS])
    return " ".join(out)


# Pieces that meet every branch of the ASCII path: irregular forms in any case, apostrophes
# inside, around and doubled, possessives, digits glued to letters, underscores, control
# characters, over-long words, and a few non-ASCII characters (the general path).
_PIECES = st.one_of(
    st.sampled_from([*sorted(IRREGULAR), "WENT", "Children", "said", "it", "rock"]),
    st.sampled_from(["'", "''", "'s", "s'", "2", "_", " ", "\n", "\x01", "\x7f", "-", ".", "x" * 50]),
    st.sampled_from(["\u2019", "é", "猫", "ǅ", "\u212a"]),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=8),
)


@given(st.lists(_PIECES, max_size=24).map("".join))
def test_the_ascii_path_folds_words_as_fold_does(text: str) -> None:
    assert folded_words(text) == words(fold(text))
    assert index_terms(text) == _index_terms_reference(text)


def test_the_ascii_path_keeps_folds_edge_cases() -> None:
    # A form glued to a digit is folded; one joined by an apostrophe is not, unless the chain
    # of apostrophes makes it a match of its own (``fold`` reads "a'b" then "went"); a
    # possessive is cut after folding ("went's" is no form).
    for text, expected in [
        ("went2 2went went_x", ["go2", "2go", "go", "x"]),
        ("a'went a'b'went 'went' went's children's", ["a'went", "a'b'go", "go", "went", "children"]),
        ("I Drew it'S", ["i", "draw", "it"]),
    ]:
        assert folded_words(text) == words(fold(text)) == expected


def test_a_possessive_of_an_irregular_form_is_indexed_as_a_query_names_it() -> None:
    assert not set(IRREGULAR.values()) & set(IRREGULAR)  # the second lookup changes no base form
    for text in ("The children's drawings", "the people\u2019s choice", "MEN'S shoes"):
        indexed = index_terms(text).split()
        for word in plan_query(text).terms:
            assert word in indexed, (text, word, indexed)
    assert index_terms("the children's drawings") == "the child drawings"


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
