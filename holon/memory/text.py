"""Text for the search index: normalising documents and turning any string into safe query terms.

SQLite's ``porter unicode61`` tokenizer stems English suffixes and folds case and diacritics, but
it has two gaps that matter for memory search:

* **Unsegmented scripts.** Chinese, Japanese, Thai and similar scripts do not separate words with
  spaces, so ``unicode61`` turns a whole clause into one token and a two-character word inside it
  is never found. ``fold`` rewrites every run of such characters as overlapping bigrams (the
  classic CJK indexing scheme), and queries get the same treatment, so any substring of two or
  more characters matches.
* **Irregular English forms.** Porter maps "painted" to "paint" but not "drew" to "draw" or
  "children" to "child". A small table of irregular verbs and plurals is folded before indexing.

The search engine (``holon.memory.engine``) receives ``index_terms`` of each document and the
same terms of each query as term objects; durable entries still use an FTS5 table. Queries are
never passed to either as syntax. ``plan_query`` extracts words, drops stop words, and
quotes every term, so quotes, ``NEAR``, ``*``, parentheses, column filters and NUL bytes in a query
are just text. That is the only way a string reaches ``MATCH``.

This is also holon's one tokeniser outside FTS5: ``words`` splits any text, ``STOP_WORDS`` is the
one stop-word list, and ``content_words``/``content_terms`` (folded, stop words dropped, lightly
stemmed) are what the context assembler's relevance, durable-memory recall and the evolve
extractor compare texts by. ``CHATTER`` names the conversational words ("please", "thanks") that
relevance also drops but search keeps (a query of only such words must still find something).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import re
from dataclasses import dataclass

__all__ = [
    "CHATTER",
    "STOP_WORDS",
    "WORDS",
    "QueryPlan",
    "content_terms",
    "content_words",
    "engine_term",
    "fold",
    "folded_words",
    "index_terms",
    "is_unsegmented",
    "plan_query",
    "quote",
    "stem",
    "word_count",
    "words",
]

#: Longest query we look at; the rest of a pasted 100 KB string adds nothing to a search.
MAX_QUERY_CHARS = 2_000
#: At most this many distinct terms go into one FTS5 expression.
MAX_TERMS = 24
#: Longer "words" are noise (hashes, base64) and are cut to this length.
MAX_TERM_CHARS = 48

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only or
    other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so
    some such than that that's the their theirs them themselves then there there's these they they'd
    they'll they're they've this those through to too under until up very was wasn't we we'd we'll
    we're we've were weren't what what's when when's where where's which while who who's whom why
    why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
    s t""".split()  # noqa: SIM905  # a word list reads better as text
)
#: Words of conversation that say nothing about a topic. Relevance between texts drops them too;
#: search keeps them ("may" is a month, "like" a verb, and an all-chatter query must find something).
CHATTER = frozenset("also just like may okay one please thank thanks will yes".split())  # noqa: SIM905

# base form, then its irregular forms. Forms that are also common other words ("left", "found",
# "saw", "felt"...) are left out on purpose: folding them would hurt more than it helps.
_IRREGULAR = """arise arose arisen|awake awoke awoken|bear bore borne|beat beaten|become became|begin
began begun|bend bent|bite bit bitten|bleed bled|blow blew blown|break broke broken|breed bred|bring
brought|build built|burn burnt|buy bought|catch caught|choose chose chosen|come came|creep crept|deal
dealt|dig dug|do did done|draw drew drawn|dream dreamt|drink drank drunk|drive drove driven|eat ate
eaten|fall fallen|feed fed|fight fought|flee fled|fly flew flown|forbid forbade forbidden|forget forgot
forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten|give gave given|go went gone|grow
grew grown|hang hung|have had|hear heard|hide hid hidden|hold held|keep kept|kneel knelt|know knew
known|lead led|lean leant|leap leapt|learn learnt|lend lent|lose lost|make made|mean meant|meet met|pay
paid|ride rode ridden|ring rang rung|rise risen|run ran|say said|see seen|seek sought|sell sold|send
sent|shake shook shaken|shine shone|shoot shot|show shown|shrink shrank shrunk|sing sang sung|sink sank
sunk|sit sat|sleep slept|slide slid|speak spoke spoken|speed sped|spend spent|spin spun|spring sprang
sprung|stand stood|steal stole stolen|stick stuck|sting stung|strike struck|swear swore sworn|sweep
swept|swim swam swum|swing swung|take took taken|teach taught|tear tore torn|tell told|think
thought|throw threw thrown|understand understood|wake woke woken|wear wore worn|weave wove woven|weep
wept|win won|write wrote written|child children|man men|woman women|person people|mouse mice|foot
feet|tooth teeth|goose geese"""
IRREGULAR: dict[str, str] = {
    form: group.split()[0] for group in _IRREGULAR.replace("\n", " ").split("|") for form in group.split()[1:]
}
_FORMS = frozenset(IRREGULAR)

# Scripts written without spaces between words: CJK ideographs, kana, Hangul syllables, Thai, Lao,
# Khmer, Myanmar, Tibetan.
_UNSEGMENTED = (
    "\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
)
_UNSEG_RUN = re.compile(f"[{_UNSEGMENTED}]+")
_WORD = re.compile(rf"[{_UNSEGMENTED}]+|[^\W_]+(?:['\u2019][^\W_]+)*", re.UNICODE)
_LATIN_WORD = re.compile(r"[A-Za-z]+(?:['\u2019][A-Za-z]+)?")
#: What counts as a word when holon counts words (priors, snippets).
WORDS = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
# ``folded_words``' ASCII path: runs of letters of lowered text, and ``_LATIN_WORD`` on it, split.
_LETTER_RUN = re.compile(r"[a-z]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
#: Bytes 0-255 -> the byte itself for ``[a-z0-9']``, its lower case for ``[A-Z]``, else a space.
_ASCII_WORD_BYTES = bytes(
    b + 32 if 65 <= b <= 90 else b if 97 <= b <= 122 or 48 <= b <= 57 or b == 39 else 32 for b in range(256)
)
_ODD_CHARS = "0123456789'"
_LOWER_LATIN_SPLIT = re.compile(r"([a-z]+(?:'[a-z]+)?)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def is_unsegmented(token: str) -> bool:
    return not token.isascii() and bool(_UNSEG_RUN.fullmatch(token))


def _bigrams(run: str) -> str:
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def _indexed(run: str) -> str:
    """How the index stores an unsegmented run: its bigrams, plus its last character alone, so
    that every character starts some token and a one-character query (``"猫"*``) finds it."""
    return run if len(run) == 1 else f"{_bigrams(run)} {run[-1]}"


def fold(text: str) -> str:
    """``text`` as the index stores it: irregular forms folded, unsegmented runs as bigrams."""
    text = _CONTROL.sub(" ", text)
    text = _LATIN_WORD.sub(lambda m: IRREGULAR.get(m.group(0).lower(), m.group(0)), text)
    return _UNSEG_RUN.sub(lambda m: f" {_indexed(m.group(0))} ", text)


def index_terms(text: str) -> str:
    """``text`` as the search engine receives it: holon's words, space-separated, in order.

    The words of ``fold(text)`` (irregular forms folded), cut to ``MAX_TERM_CHARS``; an
    unsegmented run gives its bigrams and every single character, so a one-character query finds
    it. Each word is looked up in ``IRREGULAR`` once more, as a query's words are (``_tokens``):
    ``fold`` leaves "children's" whole (no form has an apostrophe) and ``words`` then cuts the
    possessive, so without it "children's" was indexed as "children", which no query names (a
    query's "children" asks for "child"). No base form is itself a form, so the lookup changes
    no other word. The engine only splits on spaces and stems English suffixes (``holon.memory.engine``);
    queries go through the same mapping (``engine_term``, then the engine's ``analyze``).
    """
    if text.isascii():  # no unsegmented run: ``folded_words``, each looked up (most documents)
        found = folded_words(text)
        if not _FORMS.isdisjoint(found):
            found = [IRREGULAR.get(w, w) for w in found]
        if found and max(map(len, found)) > MAX_TERM_CHARS:
            found = [w[:MAX_TERM_CHARS] for w in found]
        return " ".join(found)
    out: list[str] = []
    for w in words(fold(text)):
        if is_unsegmented(w):
            out.append(w)
            if len(w) == 2:
                out.append(w[0])  # fold() already gives the run's last character alone
        else:
            out.append(IRREGULAR.get(w, w)[:MAX_TERM_CHARS])
    return " ".join(out)


def folded_words(text: str) -> list[str]:
    """``words(fold(text))``, computed for ASCII text without ``fold``'s callback per word.

    Every document indexed (the search fold, a compaction's rebuild of the engine) and every text
    compared (the episode reducer's vocabulary, relevance, recall) goes through it, so ASCII text
    has its own path giving the same list, ~3.8x faster (``rfcs/0004/text_path.py``; a property
    test holds the two equal; RFC 0004, "The text path"):

    * one byte translation lowers the text and turns every character that is in no word into a
      space (``fold``'s control characters included: they separate words either way), so the
      words are its ``split()``, except where an apostrophe is not between two word characters;
    * a match of ``_LATIN_WORD`` (what ``fold`` looks up) never crosses a word: it would need an
      apostrophe between letters, which joins them into one word. So the words are folded one by
      one: a word of letters only is one match, folded by a lookup; a word with an apostrophe or
      a digit is cut as ``_WORD`` cuts it, folded by ``split`` (the matches ``sub`` would make in
      it), and loses a possessive ``'s`` as in ``words``.
    """
    if not text.isascii():
        return words(fold(text))
    low = text.encode("ascii").translate(_ASCII_WORD_BYTES).decode("ascii")
    found = low.split()
    if not _FORMS.isdisjoint(found):
        found = [IRREGULAR.get(w, w) for w in found]
    if not any(c in low for c in _ODD_CHARS):
        return found
    out: list[str] = []
    for w in found:
        if w.isalpha():
            out.append(w)
            continue
        for part in _ASCII_WORD.findall(w) if "'" in w else (w,):
            folded = part
            if not _FORMS.isdisjoint(_LETTER_RUN.findall(part)):
                pieces = _LOWER_LATIN_SPLIT.split(part)
                pieces[1::2] = [IRREGULAR.get(p, p) for p in pieces[1::2]]
                folded = "".join(pieces)
            out.append(folded[:-2] if folded.endswith("'s") else folded)
    return out


def engine_term(term: str) -> str:
    """A ``QueryPlan`` term as ``index_terms`` would have written it."""
    return term[:MAX_TERM_CHARS]


def word_count(text: str) -> int:
    """How many words ``text`` has: ``WORDS`` matches, and one per character of unsegmented runs.

    A Chinese sentence has no spaces, so ``WORDS`` sees one word in it; counted that way it would
    look like a content-free one-word turn to the ranking priors.
    """
    chars = sum(len(m.group(0)) for m in _UNSEG_RUN.finditer(text))
    return chars + len(WORDS.findall(_UNSEG_RUN.sub(" ", text) if chars else text))


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (possessive 's dropped); unsegmented runs stay whole."""
    if text.isascii():  # the same matches on the lowered text (ASCII case keeps lengths and classes)
        found = _WORD.findall(text.lower())
        return [w[:-2] if w.endswith("'s") else w for w in found] if "'" in text else found
    out = []
    for match in _WORD.findall(text):
        w = match.lower().replace("\u2019", "'")
        out.append(w[:-2] if w.endswith("'s") else w)
    return out


_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "s", "ly")


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A light stem for matching words in Python (snippets, coverage); the search engine uses
    Snowball, the durable entries' FTS5 table Porter."""
    word = IRREGULAR.get(word, word)
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str, *, drop: frozenset[str] = frozenset()) -> list[str]:
    """The words of ``text`` that carry its meaning, in order: folded as the index folds them
    (irregular forms, unsegmented runs as bigrams), stop words and ``drop`` left out, stemmed."""
    return [stem(w) for w in folded_words(text) if w not in STOP_WORDS and w not in drop]


def content_terms(text: str) -> frozenset[str]:
    """``content_words`` as a set: what two texts are compared by."""
    return frozenset(content_words(text))


_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        "january february march april may june july august september october november december".split()  # noqa: SIM905
    )
}
_MONTH_ABBR = {m[:3]: n for m, n in _MONTHS.items()}
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?"
_DATE_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b")
_DATE_MDY = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b")
_DATE_MY = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b")
_DATE_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def _month(name: str) -> int:
    name = name.lower().rstrip(".")
    return _MONTHS.get(name) or _MONTH_ABBR[name[:3]]


def dates_in(text: str) -> list[tuple[int, int, int | None]]:
    """Calendar dates a query names, as (year, month, day or None for a whole month)."""
    low = text.lower()
    found: list[tuple[int, int, int | None]] = []
    for m in _DATE_DMY.finditer(low):
        found.append((int(m.group(3)), _month(m.group(2)), int(m.group(1))))
    for m in _DATE_MDY.finditer(low):
        found.append((int(m.group(3)), _month(m.group(1)), int(m.group(2))))
    for m in _DATE_ISO.finditer(low):
        found.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    if not found:
        for m in _DATE_MY.finditer(low):
            found.append((int(m.group(2)), _month(m.group(1)), None))
    valid = []
    for y, mo, d in found:
        try:
            dt.date(y, mo, d or 1)
        except ValueError:
            continue
        valid.append((y, mo, d))
    return list(dict.fromkeys(valid))


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """What a query string means to the index."""

    terms: tuple[str, ...]
    """Distinct normalised words, stop words dropped (kept when nothing else is left)."""
    phrases: tuple[str, ...]
    """Adjacent term pairs of the query, matched as phrases for a proximity bonus."""
    dates: tuple[tuple[int, int, int | None], ...]

    @property
    def empty(self) -> bool:
        return not self.terms

    def expression(self) -> str:
        """The FTS5 MATCH expression: every term and phrase quoted, OR-ed. Never raw syntax."""
        parts = [quote(t) for t in self.terms] + [quote(p) for p in self.phrases]
        return " OR ".join(parts)


def quote(term: str) -> str:
    """``term`` as an FTS5 string (a single unsegmented character as a prefix query)."""
    body = '"' + term.replace('"', '""') + '"'
    return body + "*" if len(term) == 1 and is_unsegmented(term) else body


def _tokens(text: str) -> list[str]:
    out = []
    for w in words(text):
        if is_unsegmented(w):
            out.extend(_bigrams(w).split())
        else:
            out.append(IRREGULAR.get(w, w)[:MAX_TERM_CHARS])
    return out


def plan_query(query: str) -> QueryPlan:
    """Turn any string into a ``QueryPlan``; never raises."""
    text = _CONTROL.sub(" ", query[:MAX_QUERY_CHARS])
    tokens = [t for t in _tokens(text) if t.strip("'")]
    content = [t for t in tokens if t not in STOP_WORDS]
    if not content:
        content = tokens
    terms = tuple(dict.fromkeys(content))[:MAX_TERMS]
    phrases = tuple(dict.fromkeys(f"{a} {b}" for a, b in itertools.pairwise(content) if a != b))
    return QueryPlan(terms, phrases[: MAX_TERMS // 2], tuple(dates_in(text)))
