"""Ranking weights and a document's prior: what a search multiplies a document's match by before
anything about the query is known (RFC 0004, "Ranking", "Exact top 10").

The prior is a function of the document alone: its kind (files and episodes above raw tool
output), and for a conversation turn its length (turns too short to carry information are
lowered) and whether it is a bare question. The index stores it twice (``holon.memory.engine``):

* ``weight``: the prior under the default weights, as tantivy's ``weight_by_field`` reads it (a
  score times ``log2(2 + weight)``), so that the engine's top-k is exact for BM25 times the prior
  and a search needs few candidates;
* ``features``: kind, question and word count packed in one integer, so that a search with other
  weights (``holon bench locomo --set``) computes its own prior from the engine's fast fields.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

__all__ = [
    "KIND_CODES",
    "WEIGHT_SCALE",
    "RankParams",
    "max_prior_ratio",
    "pack",
    "prior",
    "prior_of",
    "unpack",
    "weight_code",
]


@dataclass(frozen=True, slots=True)
class RankParams:
    """Ranking weights. Defaults are what LoCoMo measurement chose; see RFC 0004."""

    body: float = 1.0
    """Weight of the query's terms in a document's engine ``body``: its text and, for a turn,
    the two turns before it (``holon.memory.index_writer``)."""
    prev: float = 0.0
    """Lift of a turn by the scores of the two turns before it. Only 0 is supported: the turns
    before a turn are indexed with it instead, which LoCoMo prefers (RFC 0004, "Engine")."""
    next: float = 0.2
    """Lift of a turn by the scores of the two turns after it."""
    meta: float = 0.2
    segment: float = 0.3
    sender: float = 0.2
    date: float = 0.3
    short_turn: float = 0.3
    short_words: int = 30
    question: float = 0.1
    phrase: float = 0.3
    """Lift of a document among the best ``PHRASE_OF`` whose own text holds the query's adjacent
    word pairs adjacent (in proportion to the pairs found)."""
    recency: float = 0.05
    dense: float = 0.4
    """Weight of embedding similarity, when an embedder is configured."""
    recency_half_life_days: float = 30.0
    kind_weights: tuple[tuple[str, float], ...] = (
        ("file", 1.15),
        ("episode", 1.1),
        ("decision", 1.1),
        ("work_item", 1.05),
        ("task", 0.9),
        ("tool_result", 0.85),
    )


#: Kinds by code in ``features`` (0: a kind this list does not know, weight 1).
KIND_CODES = ("", "message", "reply", "brief", "tool_result", "episode", "decision", "work_item", "task", "file")
_CODE = {k: i for i, k in enumerate(KIND_CODES)}
_TURNS = frozenset(("message", "reply"))
_WORDS_CAP = 255
#: ``log2(2 + weight)`` is the prior times this: at least 1 for any non-zero default prior (the
#: smallest is about 0.32), at most about 24 (a 25-bit integer); integer weights resolve the
#: prior to about 0.3 %. The resolution costs no exactness (a search reads the weight back), only
#: a little ordering: the bound uses ``max_prior_ratio``.
WEIGHT_SCALE = 20.0
_DEFAULT = RankParams()


def prior(kind: str, words: int, question: bool, p: RankParams = _DEFAULT) -> float:
    """The document's prior under ``p``: its kind's weight, and for a turn the short-turn and
    bare-question factors (0 for a turn without words)."""
    s = dict(p.kind_weights).get(kind, 1.0)
    if kind in _TURNS:
        s *= (min(words, p.short_words) / p.short_words) ** p.short_turn if words > 0 else 0.0
        if question:
            s *= 1 - p.question
    return s


def pack(kind: str, words: int, question: bool) -> int:
    return (_CODE.get(kind, 0) << 9) | (int(question) << 8) | min(max(words, 0), _WORDS_CAP)


def unpack(features: int) -> tuple[str, int, bool]:
    code = features >> 9
    return (KIND_CODES[code] if code < len(KIND_CODES) else ""), features & _WORDS_CAP, bool(features >> 8 & 1)


@functools.lru_cache(maxsize=64)
def _priors(p: RankParams) -> dict[int, float]:
    """Every distinct ``features`` value's prior under ``p`` is computed once (a few hundred)."""
    return {}


def prior_of(features: int, p: RankParams = _DEFAULT) -> float:
    """``prior`` of the document whose packed features are ``features``."""
    cache = _priors(p)
    got = cache.get(features)
    if got is None:
        got = cache[features] = prior(*unpack(features), p)
    return got


def weight_code(kind: str, words: int, question: bool) -> int:
    """The ``weight`` stored for a document: ``log2(2 + weight)`` is ``WEIGHT_SCALE`` times its
    default prior (at least 1, tantivy's floor: a prior of 0 is stored as 0)."""
    w = WEIGHT_SCALE * prior(kind, words, question)
    return 0 if w <= 1 else round(2.0**w - 2)


@functools.lru_cache(maxsize=64)
def max_prior_ratio(p: RankParams) -> float:
    """The largest ``prior(p) / log2(2 + weight)`` over every document (the engine's score times
    it bounds BM25 times the prior of any document the engine has not returned). Every kind, word
    count and question flag is enumerated, so it holds whatever ``p`` is."""
    words = range(0, max(p.short_words, _DEFAULT.short_words) + 2)
    return max(
        prior(kind, n, q, p) / math.log2(2 + weight_code(kind, n, q))
        for kind in KIND_CODES
        for n in words
        for q in (False, True)
    )
