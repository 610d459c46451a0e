"""The chaos bench's accounting: what became of every acknowledged input, read from the ledger.

Every input the bench posts starts with a marker naming its idempotency key (``[chaos:KEY] ...``),
so the ledger says, without trusting the daemon's own bookkeeping, which stored inputs belong to
which request, including copies stored by a retry the daemon did not recognise as a retry.

For one acknowledged key (the acknowledgement named the input's ledger ``seq``):

* ``lost``: the acknowledged ``seq`` holds no input carrying the key (never stored, or gone; an
  acknowledgement without a seq, ``UNKNOWN_SEQ``, is lost when no input carries the key);
* ``answered_once`` / ``answered_twice``: the inputs stored for the key were taken by turns that
  produced a final answer exactly once / more than once (a turn is *answered* when the model gave
  a final reply in it, a ``model.responded`` with content and no tool call or error, or when it
  settled ``completed`` with a reply; a turn interrupted after its final reply and run again
  counts twice, which is the double answer a client sees);
* ``rejected``: no answer, but the input was settled with an explicit, visible rejection (its
  seq in the ``rejected`` list of a ``turn.settled``: the turn loop's admission, RFC 0002);
* ``unanswered``: stored, never answered, never rejected.

The classification is a pure function of the rows (``classify``), so it can be tested on a
hand-built ledger without a daemon.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from holon.ledger import EventQuery
from holon.projections import Store

__all__ = ["MARKER", "UNKNOWN_SEQ", "Accounting", "account", "classify", "key_of", "marked"]

MARKER = "[chaos:{}] "
UNKNOWN_SEQ = -1
"""The seq of an acknowledgement whose body named none: the input is then looked up by its key."""
_KEY = re.compile(r"^\[chaos:([A-Za-z0-9_.:-]{1,128})\] ")

# Event payloads are free-form JSON objects here (any event type, old or new), hence Any.
Payload = dict[str, Any]


def marked(key: str, body: str) -> str:
    """The text the bench posts for ``key``: the marker, then the body."""
    return MARKER.format(key) + body


def key_of(text: object) -> str | None:
    """The key a stored input's text carries: ``text`` is a string or a blob reference (its preview)."""
    if isinstance(text, dict):
        text = text.get("preview")
    if not isinstance(text, str):
        return None
    found = _KEY.match(text)
    return found.group(1) if found else None


@dataclass
class Accounting:
    """Counts per outcome, plus what the ledger holds that no acknowledgement accounts for."""

    acknowledged: int = 0
    answered_once: int = 0
    answered_twice: int = 0
    rejected: int = 0
    unanswered: int = 0
    unanswered_queued: int = 0
    """Of ``unanswered``: still queued at the end (a stalled agent), not consumed by a turn."""
    lost: int = 0
    duplicate_inputs: int = 0
    """Inputs stored more than once for one key (a retry the daemon did not recognise)."""
    unacknowledged_stored: int = 0
    """Keys the bench never got an acknowledgement for, stored all the same."""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """A few keys per bad outcome, for whoever reads the report."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "acknowledged": self.acknowledged,
            "answered_once": self.answered_once,
            "answered_twice": self.answered_twice,
            "rejected": self.rejected,
            "unanswered": self.unanswered,
            "unanswered_queued": self.unanswered_queued,
            "lost": self.lost,
            "duplicate_inputs": self.duplicate_inputs,
            "unacknowledged_stored": self.unacknowledged_stored,
            "examples": self.examples,
        }


def _answered_turns(responded: Iterable[Payload], settled: Iterable[Payload]) -> set[str]:
    turns = {
        p["turn_id"]
        for p in responded
        if "turn_id" in p and p.get("content") is not None and not p.get("tool_calls") and not p.get("error")
    }
    turns |= {p["turn_id"] for p in settled if p.get("outcome") == "completed" and p.get("reply") is not None}
    return turns


def _ints(value: object) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _rejected_seqs(settled: Iterable[Payload]) -> set[int]:
    return {seq for p in settled for seq in _ints(p.get("rejected"))}


def classify(
    acks: Mapping[str, int],
    inputs: Mapping[int, object],
    started: Iterable[Payload],
    responded: Iterable[Payload],
    settled: Iterable[Payload],
    queued: Collection[int] = (),
) -> Accounting:
    """Classify every acknowledged key (``acks``: key -> the seq its acknowledgement named).

    ``inputs`` maps each ``message.received`` seq to its text (a string or a blob reference);
    ``queued``: the seqs still in some agent's queue at the end."""
    settled = list(settled)
    answered = _answered_turns(responded, settled)
    turns_of: dict[int, list[str]] = defaultdict(list)
    inputs_of_turn: dict[str, list[int]] = {}
    for p in started:
        seqs = _ints(p.get("inputs"))
        inputs_of_turn[p.get("turn_id", "")] = seqs
        for seq in seqs:
            turns_of[seq].append(p.get("turn_id", ""))
    rejected = _rejected_seqs(settled)
    stored: dict[str, list[int]] = defaultdict(list)
    for seq, text in inputs.items():
        key = key_of(text)
        if key is not None:
            stored[key].append(seq)
    out = Accounting(acknowledged=len(acks))
    out.duplicate_inputs = sum(len(seqs) - 1 for seqs in stored.values())
    out.unacknowledged_stored = sum(1 for key in stored if key not in acks)
    for key, seq in acks.items():
        outcome = _outcome(key, seq, stored.get(key, []), turns_of, answered, rejected)
        setattr(out, outcome, getattr(out, outcome) + 1)
        if outcome == "unanswered" and any(s in queued for s in stored.get(key, [])):
            out.unanswered_queued += 1
        if outcome != "answered_once":
            examples = out.examples.setdefault(outcome, [])
            if len(examples) < 5:
                examples.append(f"{key} (seq {seq})")
    return out


def _outcome(
    key: str, seq: int, seqs: list[int], turns_of: Mapping[int, list[str]], answered: set[str], rejected: set[int]
) -> str:
    if seq not in seqs and not (seq == UNKNOWN_SEQ and seqs):
        return "lost"
    answers = sum(1 for s in seqs for turn in turns_of.get(s, []) if turn in answered)
    if answers == 1:
        return "answered_once"
    if answers > 1:
        return "answered_twice"
    if any(s in rejected for s in seqs):
        return "rejected"
    return "unanswered"


def _payloads(store: Store, type_: str) -> list[Payload]:
    """The payloads of every event of ``type_`` as JSON values (decoded and upcast by the ledger)."""
    return [e.payload.model_dump(mode="json") for e in store.ledger.find(EventQuery(types=(type_,)))]


def account(store: Store, acks: Mapping[str, int]) -> Accounting:
    """``classify`` over the ledger of ``store`` (open it once the daemon has stopped)."""
    inputs = {
        e.seq: e.payload.model_dump(mode="json").get("text")
        for e in store.ledger.find(EventQuery(types=("message.received",)))
    }
    return classify(
        acks,
        inputs,
        started=_payloads(store, "turn.started"),
        responded=_payloads(store, "model.responded"),
        settled=_payloads(store, "turn.settled"),
        queued={seq for agent in store.agents() for seq in agent.pending_inputs},
    )
