"""Ranking weights and a document's prior: what a search multiplies a document's score by before
anything about the query is known (RFC 0004, "Ranking").

The prior is a function of the document alone: its kind (files and episodes above raw tool
output), and for a conversation turn its length (turns too short to carry information are
lowered) and whether it is a bare question. The engine stores what it is computed from
(``features``: kind, question and word count packed in one integer, a fast field), so a search
reads it with the candidates' scores, under whatever weights it runs with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["KIND_CODES", "RankParams", "max_prior", "pack", "prior", "prior_of", "unpack"]


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


def max_prior(p: RankParams, kinds: tuple[str, ...] = ()) -> float:
    """The largest prior any document (of ``kinds``, if given) can have under ``p``."""
    weights = dict(p.kind_weights)
    return max(weights.get(k, 1.0) for k in (kinds or KIND_CODES))
