"""Issue 18's cheaper projections give exactly what the plain code gives (replay identity itself is
``test_projections.test_live_projections_equal_replay_and_pure_fold``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
from helpers.props import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from holon.bench import workload
from holon.clock import FakeClock
from holon.config import Settings, resolve_home
from holon.ledger import events as ev
from holon.ledger.envelope import EVENT_FIELDS, Event
from holon.ledger.store import row_to_event
from holon.memory import text as mtext
from holon.projections import Store, dialogue, fold_event
from holon.projections.fold import Key, fold, needs_decoding, state_json
from holon.projections.state import Draft, EpisodeDrafts, KeyPoint, State, ThreadVocabulary

_TEXTS = [
    "Use the blue palette for everything new.",
    "Blue palette, noted. I'll use it from now on.",
    "Shall I set that up? We could ship Thursday evening or Friday morning.",
    "yes",
    "New topic: the invoices' totals don't match",
    "Actually, move the release to Monday instead.",
    "我们决定用蓝色的配色方案。",
    "好的\uff0c记下了。我建议先做安卓版本吗\uff1f",
    "Café déjà vu — İstanbul\u2019s ﬁne print",
    "",
]


def _same(a: BaseModel, b: BaseModel) -> None:
    assert type(a) is type(b)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert a.model_dump_json(exclude_unset=True) == b.model_dump_json(exclude_unset=True)
    assert a == b


def test_state_model_copy_is_pydantics() -> None:
    point = KeyPoint(seq=3, text="x", thread="conv:1")
    drafts = EpisodeDrafts(
        agent_id="a",
        current=Draft(seq_start=1, thread="conv:1", last_us=5),
        key_points=[point],
        vocabularies=[ThreadVocabulary(thread="conv:1", terms=["blue"])],
    )
    for state, update in [
        (drafts, None),
        (drafts, {}),
        (drafts, {"thread": "w1", "key_points": []}),
        (point, {"superseded_by": 9}),
        (drafts.current, {"turns": 2, "thread": "w2"}),
    ]:
        assert state is not None
        mine = state.model_copy(update=update)
        _same(mine, BaseModel.model_copy(state, update=update))
        assert mine is not state
    copied = drafts.model_copy(update={"thread": "t"})
    assert drafts.thread != "t" and "thread" not in drafts.__pydantic_fields_set__  # the original untouched
    _same(drafts.model_copy(deep=True), BaseModel.model_copy(drafts, deep=True))
    assert copied.thread == "t"


def test_row_to_event_is_positional_in_event_fields_order() -> None:
    payload = ev.MessageReceived(text="hi")
    text = orjson.dumps(payload.model_dump(mode="json", exclude={"type"})).decode()
    row = (
        7,
        "id",
        "a",
        "message.received",
        payload.VERSION,
        11,
        "cli",
        "operator",
        "t",
        None,
        None,
        None,
        "k",
        text,
        "h",
    )
    assert len(row) == len(EVENT_FIELDS) and EVENT_FIELDS[-2:] == ("payload", "hash")
    event = row_to_event(row)
    values = dict(zip(EVENT_FIELDS, row, strict=True))
    assert event == Event(**{**values, "payload": event.payload})
    assert event.payload == payload


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.sampled_from(_TEXTS), min_size=1, max_size=4).map(" ".join)
    | st.text(max_size=80)
    | st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEIS '0123.?,", max_size=120)
)
def test_cached_dialogue_functions_equal_the_plain_ones(text: str) -> None:
    for name in ("is_question", "question_of", "is_short", "is_reply", "reaction", "proposal_of", "_signs", "terms"):
        fn = getattr(dialogue, name)
        assert fn(text) == fn.__wrapped__(text), name
    assert mtext.is_unsegmented(text) == bool(mtext._UNSEG_RUN.fullmatch(text))
    generic = []
    for match in mtext._WORD.findall(text):
        w = match.lower().replace("\u2019", "'")
        generic.append(w[:-2] if w.endswith("'s") else w)
    assert mtext.words(text) == generic
    if text.isascii():  # the ASCII path of ``terms`` as it was written before issue 18
        found = [mtext.stem(w) for w in generic if w not in mtext.STOP_WORDS and w not in mtext.CHATTER]
        old = {
            w[:-1] if len(w) > 4 and w.endswith("e") else w
            for w in found
            if len(w) >= 3 and w not in dialogue.DISCOURSE and not w.isdigit()
        }
        assert dialogue.terms(text) == old


_QUESTIONY = "ab ?\uff1f\u5417\u5462\u3002.\n\t\u3000\x1c\u4e00"


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.sampled_from(_TEXTS), min_size=1, max_size=4).map(" ".join)
    | st.text(max_size=80)
    | st.text(alphabet=_QUESTIONY, max_size=12)
    | st.text(alphabet="ab cd, e.f?\u4e00\u597d", max_size=40)
)
def test_issue18_step4_dialogue_shortcuts_equal_their_regexes(text: str) -> None:
    """``is_question`` as an ``endswith`` and ``is_short`` counting at most seven words give the
    answers of the regexes they were written as (issue 18, append step 4)."""
    assert dialogue.is_question.__wrapped__(text) == bool(dialogue._QUESTION_END.search(text.strip()))
    stripped = text.strip()
    old_short = len(stripped) <= 12 if dialogue._CJK.search(stripped) else len(dialogue._WORDS.findall(stripped)) <= 6
    assert dialogue.is_short.__wrapped__(text) == old_short
    assert dialogue.sentences(text) == [x.strip() for x in dialogue._SENTENCE.findall(text) if x.strip()]


def test_rows_replay_leaves_undecoded_would_change_nothing(tmp_path: Path) -> None:
    """Folding only the events ``needs_decoding`` lets through gives every state the full fold gives,
    and it does skip some (tool calls inside an open episode draft)."""
    store = Store.open(resolve_home(tmp_path), Settings(), clock=FakeClock())
    try:
        store.append(*workload.creation_events(2))
        stream = workload.stream(2)
        for _ in range(12):
            store.append(*itertools.islice(stream, 25))
        events = list(store.ledger.read())
    finally:
        store.close()
    full = fold({}, events)
    states: dict[Key, State | None] = {}
    skipped = 0
    for event in events:
        if needs_decoding(states, event.type, event.agent_id):
            fold_event(states, event)
        else:
            skipped += 1
            assert fold_event(dict(states), event) == []  # folding it would change nothing
    assert skipped > 0
    assert {k: state_json(s) for k, s in states.items() if s} == {k: state_json(s) for k, s in full.items() if s}


# --- issue 18, append step 5: the append path's shortcuts build what the plain code builds ------


@settings(max_examples=examples(200), deadline=None)
@given(seq=st.integers(min_value=0, max_value=2**63 - 1), digest=st.binary(min_size=32, max_size=32))
def test_anchor_slot_bytes_are_the_format(seq: int, digest: bytes) -> None:
    from holon.ledger import anchor

    hash_ = digest.hex()
    line = anchor._FORMAT.format(seq=seq, hash=hash_, crc=anchor._crc(seq, hash_)).encode("ascii")
    assert anchor._slot(seq, hash_) == line.ljust(anchor._SLOT, b" ")
    assert anchor._parse(anchor._slot(seq, hash_)) == anchor.AnchorMark(seq, hash_)


def test_new_event_equals_the_dataclass_init() -> None:
    from holon.ledger.envelope import new_event

    values = (7, "evt_x", "a", "message.received", 1, 11, "cli", "operator", "t", None, "w", None, "k")
    payload = ev.MessageReceived(text="hi")
    made, plain = new_event(*values, payload, "h"), Event(*values, payload, "h")
    assert type(made) is Event and made == plain and hash(made) == hash(plain)
    assert [getattr(made, f) for f in EVENT_FIELDS] == [getattr(plain, f) for f in EVENT_FIELDS]


@settings(max_examples=examples(100), deadline=None)
@given(
    turn_id=st.none() | st.text(max_size=8),
    changes=st.dictionaries(
        st.text(max_size=6), st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6), max_size=4
    ),
)
def test_a_delta_built_directly_equals_model_construct(turn_id: str | None, changes: dict[str, object]) -> None:
    from holon.ledger.codec import encode_payload
    from holon.projections.fold import _delta

    mine = _delta(turn_id, changes)  # type: ignore[arg-type]  # JSON values
    plain = ev.WorkingMemoryDelta.model_construct(turn_id=turn_id, changes=changes)
    _same(mine, plain)
    assert list(mine.__dict__) == list(plain.__dict__)
    enc = {"blob_threshold": 16_384, "preview_chars": 400}
    assert encode_payload(mine, **enc).data == encode_payload(plain, **enc).data


def test_new_ids_keep_their_form() -> None:
    import re

    from holon.ids import new_id

    assert re.fullmatch(r"evt_[0-9a-f]{32}", new_id("evt"))
    assert new_id("x", ms=0x0193A5C2D4E1).startswith("x_0193a5c2d4e1")
    assert new_id("x", ms=2**48 + 5).startswith("x_000000000005")  # 48 bits of milliseconds, as before
