"""holon.memory.markdown.parts: the one markdown splitter (search index documents, outlines)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from holon.memory import markdown

DOC = """intro line

# Title
first
second
third

## Sub ##
```bash
# a shell comment, not a heading
```
#hashtag is text
"""


def test_parts_cut_at_every_heading_outside_fences() -> None:
    got = markdown.parts(DOC)
    assert [p.title for p in got] == ["", "Title", "Sub"]
    assert [p.line for p in got] == ["", "# Title", "## Sub ##"]
    assert got[0].body == ("intro line", "")
    assert got[1].body == ("first", "second", "third", "")
    assert got[2].body == ("```bash", "# a shell comment, not a heading", "```", "#hashtag is text")


def test_text_without_headings_is_one_part() -> None:
    assert markdown.parts("") == [markdown.Part(None, "", ())]
    assert markdown.parts("a\r\nb") == [markdown.Part(None, "", ("a", "b"))]


_LINES = st.lists(
    st.sampled_from(["# H1", "## H2", "### H3 ###", "text", "", "```", "~~~", "#tag", "  # indented", "x\r"]),
    max_size=30,
)


@given(_LINES)
def test_parts_give_back_every_line(lines: list[str]) -> None:
    text = "\n".join(lines)
    got = markdown.parts(text)
    assert len(got) == len(markdown.headings(text)) + 1
    joined = [line for p in got for line in ([p.line] if p.heading is not None else []) + list(p.body)]
    expected = text.split("\n")
    if expected[-1] == "":  # a final line end ends the last line; it starts no new one
        expected.pop()
    assert joined == [line.removesuffix("\r") for line in expected]
    assert all(p.heading is not None for p in got[1:])
