"""The structure of a conversation, read without a model: questions and answers, proposals and
acceptances, and changes of subject.

The episode reducer (``holon.projections.episodes``) asks this module two things about each
operator message, given what the assistant said last and the vocabulary of recent threads:

* **Where does it belong?** (``next_move``) Structure decides first: a short reply ("yes",
  "option B", "好的") answers the message before it and stays in its thread; an answer to a
  question stays. Otherwise the message's content terms are compared with each recent thread's
  vocabulary, every term weighted by how few threads use it (a word every thread uses says
  nothing about which one this is): the message **returns** to an earlier thread it shares more
  with than with the current one, **switches** to a new thread when it shares nothing with the
  current one and brings content of its own, and stays otherwise. Marker words ("new topic",
  "back to", "换个话题") only settle a tie; they never override what the words show.
* **Does it settle something?** (``settles``) A decision or rule stated by the operator (an
  answer to the assistant's question, a statement with a rule or decision cue), or one the
  assistant proposed and the operator accepted, explicitly ("yes") or by carrying on without
  objecting.

Everything here is a pure function of its arguments: the reducer stays a deterministic fold.
English and Chinese are covered alike; scripts without spaces are compared by character bigrams.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from holon.memory.text import CHATTER, STOP_WORDS, content_words, is_unsegmented, stem, words

__all__ = [
    "TOPIC_MARKERS",
    "Move",
    "Settled",
    "is_question",
    "is_reply",
    "is_short",
    "next_move",
    "proposal_of",
    "question_of",
    "reaction",
    "revises",
    "says_switch",
    "acknowledged",
    "carried_on",
    "settles",
    "supersedes",
    "terms",
]

#: Words of conversation management: they say that the subject changes or continues, not what it is.
DISCOURSE = frozenset(
    """again ago already always answer anyway ask asked back begin bit continue done else ever fine
    first get give go going good got great help keep know last left let lets look make maybe mention
    much must need never now next nice okay question remind right said say second see should
    something start stuff sure talk tell thing things think time today try want way well where work
    yeah yet""".split()  # noqa: SIM905  # a word list reads better as text
)

#: Particles and measure words: a bigram holding one spans two words, and says nothing by itself.
_CJK_PARTICLES = frozenset("的了是在吗呢吧啊和就也都还个这那")
_CJK_DISCOURSE = frozenset("我们 你们 一下 这个 那个 现在 继续 开始 回到 一个 什么 怎么 可以 好的 就这 这样".split())  # noqa: SIM905


def _ascii_term(word: str) -> str:
    """The term an ASCII word (lower case, from ``words``) contributes to ``terms``, or ``""``."""
    if word in STOP_WORDS or word in CHATTER:
        return ""
    w = stem(word)
    if len(w) >= 3 and w not in DISCOURSE and not w.isdigit():
        return w[:-1] if len(w) > 4 and w[-1] == "e" else w
    return ""


class _TermOf(dict[str, str]):
    """word -> ``_ascii_term(word)``, filled on first use: a text's terms are then one lookup per word."""

    def __missing__(self, word: str) -> str:
        term = self[word] = _ascii_term(word)
        return term


_ASCII_TERM = _TermOf()
#: Distinct words remembered before the memo starts over (it only saves time; results are the same).
_ASCII_TERM_LIMIT = 50_000


@functools.lru_cache(maxsize=20_000)
def terms(text: str) -> frozenset[str]:
    """The words that say what ``text`` is about: content words of three letters or more (less
    chatter and conversation management), and bigrams of scripts written without spaces."""
    if text.isascii():  # no script without spaces, nothing to fold: the quick way, word by word
        cache = _ASCII_TERM
        if len(cache) > _ASCII_TERM_LIMIT:
            cache.clear()
        out = set(map(cache.__getitem__, words(text)))
        out.discard("")
        return frozenset(out)
    out = set()
    for w in content_words(text, drop=CHATTER):
        if is_unsegmented(w):
            if len(w) == 2 and w not in _CJK_DISCOURSE and not (set(w) & _CJK_PARTICLES):
                out.add(w)
        elif len(w) >= 3 and w not in DISCOURSE and not w.isdigit():
            # The light stemmer gives "invoices" -> "invoic" but keeps "invoice": a final "e" goes.
            out.add(w[:-1] if len(w) > 4 and w.endswith("e") else w)
    return frozenset(out)


_SENTENCE = re.compile("[^.!?\u3002\uff01\uff1f\n]+[.!?\u3002\uff01\uff1f]*")
_QUESTION_END = re.compile("(\\?|\uff1f|\u5417[\u3002.]?|\u5462[\u3002.]?)\\s*$")  # ?, the full-width ?, 吗, 呢


def sentences(text: str) -> list[str]:
    return list(_sentences(text))


@functools.lru_cache(maxsize=1024)  # pure: a reply is split by ``proposal_of``, ``question_of`` and ``settles``
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in _SENTENCE.findall(text) if s.strip())


#: What ``_QUESTION_END`` matches at the end of a stripped text: the same test as one ``endswith``.
_QUESTION_ENDINGS = ("?", "\uff1f", "\u5417", "\u5417\u3002", "\u5417.", "\u5462", "\u5462\u3002", "\u5462.")


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def is_question(text: str) -> bool:
    # ``_QUESTION_END.search`` tries every position of the text; on a stripped text (no trailing
    # whitespace, so ``\s*$`` is the end) its matches are exactly these endings.
    return text.strip().endswith(_QUESTION_ENDINGS)


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def question_of(reply: str) -> str | None:
    """The last question the assistant asked in ``reply``, if any."""
    asked = [s for s in _sentences(reply) if is_question(s)]
    return asked[-1] if asked else None


_WORDS = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
SHORT_WORDS = 6
# Possessive and anchored at a word start: linear in the text, whatever its words.
_LONGER = re.compile(rf"\b\w++(?:\W++\w++){{{SHORT_WORDS}}}", re.UNICODE)


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def is_short(text: str) -> bool:
    """Too short to stand on its own ("yes", "the second one", "好的"): it answers what came before."""
    text = text.strip()
    if not text.isascii() and _CJK.search(text):  # the CJK ranges hold no ASCII character
        return len(text) <= 12
    # More than ``SHORT_WORDS`` runs of ``\w`` exist exactly when one search finds that many + 1
    # separated by non-word characters: the answer of counting every word, without the list.
    return _LONGER.search(text) is None


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def is_reply(text: str) -> bool:
    """A short reply that only answers what came before ("yes", "option B", "that one",
    "好的"): short, with at most one content term of its own."""
    return is_short(text) and len(terms(text)) <= 1


# Cue patterns are searched in every operator message and reply a projection folds, and a regex
# of many ``\b(...)\b`` alternatives tries each at every position of the text. ``_Cue`` first asks
# whether the text can hold a match at all: in ASCII text (where ignoring case is lower-casing),
# every match contains one of a few literal needles, looked for in ``_cue_key`` form (lower case,
# each non-word character a space, led by one, so a needle " ok" stands for ``\bok``). A text with
# none of them is not searched; any other text is, so the answer is always the pattern's own.
_CUE_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 or c == 95 else 32 for c in range(256)
)


@functools.lru_cache(maxsize=256)  # pure: several cues look at the same text
def _cue_key(text: str) -> bytes | None:
    """An ASCII ``text`` lower-cased, every non-word character a space, led by a space (``None``
    for other text: case folding beyond ASCII is left to the pattern)."""
    return b" " + text.encode("ascii").translate(_CUE_TABLE) if text.isascii() else None


class _Cue:
    """A case-insensitive cue pattern with needles: ``|``-separated literals in ``_cue_key`` form,
    one of which every match in ASCII text contains (``tests/test_dialogue.py`` checks them)."""

    __slots__ = ("_quick", "needles", "pattern")

    def __init__(self, pattern: str, *, needles: str) -> None:
        self.pattern = re.compile(pattern, re.IGNORECASE)
        self.needles = tuple(n.encode("ascii") for n in needles.split("|"))
        # One search for all needles: a few times faster than a loop of ``in`` over them.
        self._quick = re.compile(b"|".join(map(re.escape, self.needles)))

    def search(self, text: str) -> re.Match[str] | None:
        key = _cue_key(text)
        if key is not None and self._quick.search(key) is None:
            return None
        return self.pattern.search(text)


#: Words that say yes, at the start of a message: the operator accepting, the assistant acknowledging.
_YES = (
    r"yes|yeah|yep|yup|sure|ok(ay)?|fine|agreed|sounds good|correct|right|exactly|perfect|great|good|"
    r"好|行|可以|对|是的|没问题"
)
_ACCEPT = re.compile(
    rf"^\s*({_YES}|go ahead|go for it|do it|please do|that works|works for me|absolutely|definitely|deal|"
    r"let'?s do (it|that)|option\b|the (first|second|third|last) one|that one|就这样|同意|嗯|就按|照这个)",
    re.IGNORECASE,
)
_REJECT = _Cue(
    r"^\s*(no\b|nope|nah|not\b|don'?t|do not|never mind|hold on|wait\b|stop\b|instead|rather|"
    r"不\b|不要|不用|不行|别|算了|等等|先别)|\b(instead|rather than)\b|而不是|改成|换成",
    needles=" no| nah| don| do not| never mind| hold on| wait| stop| instead| rather",
)


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def reaction(text: str) -> Literal["accept", "reject", "other"]:
    """How an operator message answers a proposal: accepts, rejects, or neither."""
    if _REJECT.search(text):
        return "reject"
    if _ACCEPT.search(text):
        return "accept"
    return "other"


# Cues of a proposal or a plan in the assistant's words. They pick the sentence to keep; whether it
# became a decision is decided by what the operator did next.
_PROPOSAL = _Cue(
    r"\b(i('ll| will| would| suggest| recommend| propose| plan| can)|we('ll| will| should| could| can)|let'?s|"
    r"shall (i|we)|should (i|we)|how about|what about|my (suggestion|recommendation|plan)|the plan is|"
    r"i'?d (suggest|go|use|recommend))\b|我(建议|会|打算|们可以|们就|来|先)|要不要|不如|那就|可以先",
    needles=" i | id | we | let| shall | should | about| my | the plan is",
)
_OPTIONS = re.compile(r"\b(or|either|option|choose|which)\b|还是|或者|哪个|选", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def proposal_of(reply: str) -> str | None:
    """What the assistant proposed in ``reply``: the last sentence offering a choice or a plan."""
    said = _sentences(reply)
    found = [i for i, s in enumerate(said) if _PROPOSAL.search(s) or (is_question(s) and _OPTIONS.search(s))]
    if not found:
        return None
    last = found[-1]
    if last > 0 and is_question(said[last]) and len(terms(said[last])) <= 2:  # "Shall I set that up?"
        return f"{said[last - 1]} {said[last]}"
    return said[last]


_RULE = _Cue(
    r"(\b(always|never|must|do not|don'?t ever|from now on|the rule is|make sure|i prefer|no more|"
    r"capped|at most|at least|no more than|no later than|maximum|minimum|limit(ed)? to|deadline|budget is|"
    r"nothing \w+( \w+)? until|only after|not before|everything goes to)\b|"
    r"必须|不要|总是|永远|以后都|规则|我更喜欢|一律|务必|不超过|上限|最多|至少|截止|预算是)",
    needles=(
        " always| never| must| do not| don| from now on| the rule is| make sure| i prefer| no more"
        "| capped| at most| at least| no later than| maximum| minimum| limit| deadline| budget is"
        "| nothing| only after| not before| everything goes to"
    ),
)
_DECISION = _Cue(
    r"(\b(decid\w*|decision|we('ll| will) (use|go with)|let'?s (use|go with)|go with|settled|final(ly)?|then)\b|"
    r"决定|定了|就用|就定|那就)",
    needles=" decid| decision| use| go with| settled| final| then",
)
_CHANGE = _Cue(
    r"\b(instead|actually|change|changed|move|moved|switch|no longer|not .* anymore|rather|raise|lower|"
    r"increase|decrease|bump|go(es)? (up|down)|from now)\b|改|换成|不再|改成|推迟|提前|涨|降",
    needles=(
        " instead| actually| change| move| switch| no longer| anymore| rather| raise| lower"
        "| increase| decrease| bump| go up| goes up| go down| goes down| from now"
    ),
)

Kind = Literal["decision", "rule"]


@dataclass(frozen=True, slots=True)
class Settled:
    """A statement that settles something, with who stated it and the text to keep."""

    kind: Kind
    speaker: Literal["operator", "assistant"]
    text: str
    explicit: bool = True
    """Stated or accepted in words (``False``: accepted only by the operator carrying on)."""


def _declarative(text: str) -> bool:
    return not is_question(text) and not is_short(text)


def settles(text: str, last_reply: str | None) -> Settled | None:
    """Whether an operator message (``text``), after the assistant said ``last_reply``, settles
    a decision or a rule: its own statement, or the assistant's proposal it accepts."""
    stripped = text.strip()
    if _RULE.search(stripped) and not is_question(stripped):
        return Settled("rule", "operator", stripped)
    proposal = proposal_of(last_reply) if last_reply else None
    if last_reply and reaction(stripped) == "accept" and is_short(stripped):
        # An explicit yes accepts what the assistant put forward: its proposal, or failing a cue
        # ("Frankfurt looks best to me: ..."), what it said last.
        said = _sentences(last_reply)
        accepted = proposal or (" ".join(said[-2:]) if said else None)
        if accepted:
            return Settled("decision", "assistant", accepted)
    if _DECISION.search(stripped) and not is_question(stripped) and terms(stripped):
        return Settled("decision", "operator", stripped)
    if not _declarative(stripped):
        return None
    asked = question_of(last_reply) if last_reply else None
    if asked is None and proposal is not None and _OPTIONS.search(proposal):
        asked = proposal  # "We could ship Thursday evening or Friday morning."
    if asked is not None and terms(stripped) & terms(asked):
        return Settled("decision", "operator", stripped)  # an answer to the assistant's question
    return None


def revises(text: str, earlier: Sequence[str]) -> bool:
    """An operator message that changes one of the ``earlier`` key points ("Actually, move the
    release to Monday instead"): a change cue, and a subject they share."""
    if is_question(text) or not _CHANGE.search(text):
        return False
    said = terms(text)
    return any(said & terms(k) for k in earlier)


def carried_on(text: str, last_reply: str | None) -> Settled | None:
    """The assistant's proposal the operator accepted by carrying on: the operator's next message
    (``text``) neither rejects it nor asks about it, and it was a plan, not a question."""
    if not last_reply or reaction(text) == "reject":
        return None
    proposal = proposal_of(last_reply)
    if proposal is None or is_question(proposal):
        return None
    return Settled("decision", "assistant", proposal, explicit=False)


# The assistant saying it took a statement ("Blue palette, noted."); that it did what was said is
# ``_DONE``, looked for alongside.
_ACK = _Cue(
    r"\b(noted|got it|understood|will do|roger|agreed|confirmed|sounds good|ok(ay)?|sure)\b|记下|明白|收到|好的|了解|没问题|"
    rf"^\s*({_YES}|done|知道了|已)\b",
    needles=(
        " noted| got it| understood| will do| roger| agreed| confirmed| sounds good| ok| sure| ye"
        "| yup| fine| correct| right| exactly| perfect| great| good| done"
    ),
)


# The assistant reporting that it did what was said ("the Glass Room is reserved for 40").
_DONE = _Cue(
    r"\b(cancel+ed|reserved|booked|scheduled|set up|created|sent|moved|changed|updated|added|removed|fixed|"
    r"renewed|raised|lowered|switched|noted down)\b|已经?(取消|预订|订好|改|加|删|发|安排)",
    needles=(
        " cancel| reserved| booked| scheduled| set up| created| sent| moved| changed| updated"
        "| added| removed| fixed| renewed| raised| lowered| switched| noted down"
    ),
)


@functools.lru_cache(maxsize=4096)  # pure: asked of the same text several times per event
def _signs(text: str) -> frozenset[str]:
    """What a restatement keeps of a text: its content terms, with unsegmented scripts taken a
    character at a time (bigrams would count "先安卓" and "只上安卓" as sharing nothing but one)."""
    if text.isascii():  # no unsegmented script: its terms as they are
        return terms(text)
    out = {w for w in terms(text) if not is_unsegmented(w)}
    out.update(c for c in "".join(_CJK.findall(text)) if c not in _CJK_PARTICLES)
    return frozenset(out)


def acknowledged(said: str, reply: str) -> Settled | None:
    """An operator statement the assistant's reply confirms by restating it ("Use the blue palette
    for everything new." - "Blue palette, noted."): most of its content terms come back."""
    stripped = said.strip()
    if is_question(stripped) or is_short(stripped):
        return None
    asked, answer = _signs(stripped), _signs(reply)
    if len(asked) < 2 or is_question(reply.strip()):
        return None
    shared = asked & answer
    if len(shared) < 2:
        return None  # not restated, whatever the reply says (its regexes are not needed)
    says_so = bool(_ACK.search(reply) or _DONE.search(reply))
    # Most of it restated (two fifths will do when the reply says it took it: "Updated: 59 euros").
    restated = len(shared) >= 2 and (len(shared) * 2 >= len(asked) or (says_so and len(shared) * 5 >= len(asked) * 2))
    confirms = says_so or len(answer - asked) <= 1  # says so, or says nothing else
    return Settled("decision", "operator", stripped) if restated and confirms else None


def supersedes(new: str, old: str) -> bool:
    """A later statement replaces an earlier one on the same subject: they share most of the
    earlier one's terms, or the later one says it changes something they share."""
    a, b = terms(new), terms(old)
    shared = a & b
    if not shared:
        return False
    return len(shared) * 2 >= min(len(a), len(b)) or bool(_CHANGE.search(new))


# --- threads --------------------------------------------------------------------------------------

MoveKind = Literal["stay", "switch", "return"]


@dataclass(frozen=True, slots=True)
class Move:
    kind: MoveKind
    target: str | None = None
    """The thread returned to."""
    why: str = ""


_OPENING = re.compile(
    r"^\s*((ok(ay)?|so|alright|right|now|next)[,.!\s]+)*(let'?s|can we|could we|i (want|need|'d like)|"
    r"help me|please (help|write|draft|prepare|plan|review|check|look|make|create|set)|moving on|on to|"
    r"switching|new|another|different|接下来|现在|开始|我们来|帮我|请帮|来看|换个|另外)"
    r"|^\s*((ok(ay)?|so|alright|right)[,.!\s]+)?(now|next)[,:\s]+(the|to|on|onto|for|about|with)?\s*\w"
    r"|\b(now|next)[.!]?\s*$",
    re.IGNORECASE,
)
# An instruction about what the assistant just produced ("Add that remote work is fine", "把语气改得
# 轻松一点"): it continues the thread whatever words it brings.
_FOLLOW_UP = re.compile(
    r"^\s*((ok(ay)?|good|fine|great|好的?|行|嗯)[,.!\s\uff0c\u3002]*)?(please\s+|also\s+|and\s+)?(add|remove|drop|change|make|put|shorten|lengthen|rewrite|reword|mention|"
    r"include|replace|fix|tweak|cut|expand|trim|translate|format)\b|^\s*((好的?|行|嗯)[,\s\uff0c]*)?(再|也|把|加上|去掉|删掉|改成|改一下)",
    re.IGNORECASE,
)
_SWITCH_WORDS = (
    r"new topic|different topic|change of topic|another (topic|question|thing)|switching (topics?|gears)|"
    r"unrelated|换个话题|另一个问题|换个问题|新话题|说点别的"
)
_MARK_SWITCH = re.compile(rf"^\s*({_SWITCH_WORDS})", re.IGNORECASE)
#: Words that open a message by saying the subject changes or goes back ("New topic:", "Back to").
TOPIC_MARKERS = re.compile(rf"^\s*({_SWITCH_WORDS}|back to|going back to|returning to|回到)", re.IGNORECASE)
_MARK_RETURN = re.compile(r"\b(back to|going back|returning to|again|where were we|as before)\b|回到|再说|刚才", re.I)

#: A return needs at least this much weight of shared terms (one term used by no other thread: 1).
RETURN_MIN = 0.5
#: A message that shares nothing with the thread starts a new one when it opens a subject ("let's",
#: "help me", "接下来") or brings at least this many content terms of its own. Fewer, and it stays:
#: a false switch hides the recent turns, a missed one only keeps a few turns too many.
SWITCH_TERMS = 3


def _weights(others: Sequence[frozenset[str]], current: frozenset[str]) -> dict[str, float]:
    """Each term's weight: 1 / the number of threads whose vocabulary has it."""
    count: dict[str, int] = {}
    for profile in (*others, current):
        for w in profile:
            count[w] = count.get(w, 0) + 1
    return {w: 1.0 / n for w, n in count.items()}


def _score(shared: frozenset[str], weight: dict[str, float]) -> float:
    """The weights of the shared terms, summed exactly (``math.fsum``): a set's order follows the
    process's string hashing, and a plain float sum in that order made near ties between threads
    come out differently under another ``PYTHONHASHSEED`` (a replay in a new process differed)."""
    return math.fsum(weight[w] for w in shared)


def _units(said: frozenset[str]) -> float:
    """How much content ``said`` carries: a word counts 1, a bigram of an unsegmented script half
    (a Chinese clause yields a bigram per character, about two per word)."""
    return sum(0.5 if is_unsegmented(w) else 1.0 for w in said)


def _holds(said: frozenset[str], shared: frozenset[str]) -> bool:
    """Whether a message (its terms ``said``) belongs with a thread it shares ``shared`` with: two
    shared terms (a shared bigram is a word both use), or a third of its words, or too few words of
    its own to make another subject."""
    return len(shared) >= 2 or _units(shared) * 3 >= _units(said) or _units(said - shared) <= SWITCH_TERMS


def says_switch(text: str) -> bool:
    """The operator says outright that the subject changes ("New topic: ...", "换个话题")."""
    return bool(_MARK_SWITCH.search(text))


def next_move(
    text: str,
    current: frozenset[str],
    others: Sequence[tuple[str, frozenset[str]]],
    last_reply: str | None,
    *,
    idle: bool = False,
    decided: Sequence[str] = (),
) -> Move:
    """Where an operator message goes, given the current thread's vocabulary (``current``, the
    assistant's last reply included), recent other threads' (``others``, newest last), what
    the assistant said last, whether a long silence came before it (``idle``: a short
    message then answers nothing, unless the assistant had asked something) and the key points
    in force in the current thread (``decided``)."""
    said = terms(text)
    marked_switch = bool(_MARK_SWITCH.search(text))
    asked = question_of(last_reply) if last_reply else None
    opening = bool(_OPENING.search(text)) or idle
    if (
        is_reply(text)
        and not marked_switch
        and not (opening and said - current)
        and (not idle or asked is not None or said & current)
    ):
        return Move("stay", why="a short reply answers the message before it")
    weight = _weights([p for _t, p in others], current)
    here = _score(said & current, weight)
    best_thread, best, best_shared = None, 0.0, frozenset[str]()
    for thread, profile in others:
        score = _score(said & profile, weight)
        if score >= best:  # the newest thread wins a tie
            best_thread, best, best_shared = thread, score, said & profile
    # An answer to the assistant's question goes back to another thread only on clear evidence:
    # two shared terms, or words that say so ("opening paragraph" is not "opens at noon").
    clear = asked is None or _units(best_shared) >= 2 or bool(_MARK_RETURN.search(text))
    # A return holds the message as staying would: one shared word ("report" in "incident report"
    # and "sales report") does not take a message that brings a subject of its own elsewhere,
    # unless it asks to change what is there ("push the release to Monday", "mention the salary").
    changes = bool(_CHANGE.search(text) or _FOLLOW_UP.search(text))
    if (
        best_thread is not None and best >= RETURN_MIN and clear and (changes or _holds(said, best_shared))
        and (best > here or (best == here and _MARK_RETURN.search(text)))
    ):  # fmt: skip
        return Move(
            "return", best_thread, f"shares more with {best_thread} ({best:.2f}) than with this thread ({here:.2f})"
        )
    shared = said & current
    if asked is not None and said & terms(asked) and not marked_switch:
        return Move("stay", why="answers the assistant's question")
    # One shared word ("job" in "export job" and "job posting") does not hold a message that
    # brings a subject of its own; two shared words, or a third of its words, do. So does a
    # revision of one of this thread's decisions ("move the release to Monday instead").
    holds = _holds(said, shared)
    if opening and _units(shared) < 2:
        holds = False  # "I need a draft of the job ad" after the export job's flaky test
    if here > 0 and not marked_switch and (holds or revises(text, decided)):
        return Move("stay", why=f"continues this thread ({here:.2f})")
    if marked_switch:
        return Move("switch", why="says the subject changes")
    if _FOLLOW_UP.search(text) and last_reply:
        return Move("stay", why="asks for a change to what the assistant just gave")
    if asked is not None and not opening:
        # After a question the next message answers it, in words of its own if need be ("How
        # many are coming?" - "Twelve engineers, two days."), unless it opens a subject.
        return Move("stay", why="answers the assistant's question")
    if said and (_units(said - current) >= SWITCH_TERMS or opening):
        return Move("switch", why="shares little or nothing with this thread and brings a subject of its own")
    return Move("stay", why="nothing says the subject changed")
