"""The codec: payload <-> canonical JSON, blob externalisation, upcasting, and ledger round trips."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import orjson
import pytest
from helpers.props import examples
from helpers.strategies import payloads
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from holon.clock import FakeClock
from holon.errors import EventValidationError
from holon.ledger import Database, Ledger, NewEvent, codec
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json, decode_payload, encode_payload
from holon.ledger.events import PAYLOAD_TYPES, BlobRef

THRESHOLD = 256
PREVIEW = 20
TAGS = sorted(PAYLOAD_TYPES)
LARGE_FIELDS = {tag: codec._LARGE_FIELDS[tag] for tag in TAGS}


def _check_round_trip(payload: ev.PayloadBase, enc: codec.EncodedPayload) -> None:
    tag = payload.type  # type: ignore[attr-defined]
    decoded = decode_payload(tag, type(payload).VERSION, enc.text)
    assert type(decoded) is type(payload)
    assert decoded == enc.payload
    assert "type" not in orjson.loads(enc.text)
    # The stored text is canonical: re-encoding the stored form gives the very same bytes.
    assert canonical_json(orjson.loads(enc.text)).decode() == enc.text
    bodies = {b.hash: b.data for b in enc.blobs}
    for b in enc.blobs:
        assert hashlib.sha256(b.data).hexdigest() == b.hash
    externalised = 0
    for name in type(payload).model_fields:
        original, stored = getattr(payload, name), getattr(enc.payload, name)
        if isinstance(stored, BlobRef) and isinstance(original, str):
            externalised += 1
            assert name in LARGE_FIELDS[tag]
            body = original.encode("utf-8")
            assert len(body) > THRESHOLD
            assert stored.blob == hashlib.sha256(body).hexdigest()
            assert stored.size == len(body)
            assert stored.preview == original[:PREVIEW]
            assert bodies[stored.blob] == body
        else:
            assert stored == original, name
            if isinstance(original, str) and name in LARGE_FIELDS[tag]:
                assert len(original.encode("utf-8")) <= THRESHOLD
    assert externalised == len(enc.blobs) or len(bodies) < len(enc.blobs)  # equal bodies may repeat
    if not enc.blobs:
        assert decoded == payload


@pytest.mark.parametrize("tag", TAGS)
@settings(max_examples=examples(40))
@given(data=st.data())
def test_encode_decode_round_trip(tag: str, data: st.DataObject) -> None:
    payload = data.draw(payloads(PAYLOAD_TYPES[tag]), label="payload")
    enc = encode_payload(payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW)
    _check_round_trip(payload, enc)
    # Encoding is deterministic, and encoding the stored form again changes nothing.
    assert encode_payload(payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW) == enc
    again = encode_payload(enc.payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW)
    assert again.text == enc.text
    assert again.blobs == ()


@pytest.mark.parametrize("tag", [t for t in TAGS if LARGE_FIELDS[t]])
@settings(max_examples=examples(5))
@given(data=st.data())
def test_large_fields_go_to_blobs(tag: str, data: st.DataObject) -> None:
    """Every LargeText field above the threshold is externalised; at the threshold it is not."""
    model = PAYLOAD_TYPES[tag]
    base = data.draw(payloads(model))
    for name in LARGE_FIELDS[tag]:
        big = "é" * (THRESHOLD // 2) + "x"  # THRESHOLD + 1 bytes, only THRESHOLD // 2 + 1 characters
        exact = "é" * (THRESHOLD // 2)  # exactly THRESHOLD bytes: stays inline
        for value, blobbed in ((big, True), (exact, False)):
            payload = model.model_validate({**base.model_dump(), name: value})
            enc = encode_payload(payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW)
            assert isinstance(getattr(enc.payload, name), BlobRef) is blobbed
            _check_round_trip(payload, enc)


def test_large_fields_are_the_large_text_ones() -> None:
    assert LARGE_FIELDS["tool.resulted"] == ("output",)
    assert LARGE_FIELDS["message.received"] == ("text",)
    assert set(LARGE_FIELDS["model.responded"]) == {"content"}
    assert LARGE_FIELDS["agent.created"] == ()


def test_canonical_json_is_sorted_and_compact() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é"}]}) == '{"a":[1,{"c":"é","d":null}],"b":1}'.encode()


# --- upcasting --------------------------------------------------------------------------------


def _rename_body_to_text(data: dict) -> dict:
    out = dict(data)
    out["text"] = out.pop("body")
    return out


def test_upcaster_brings_old_versions_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev.MessageReceived, "VERSION", 2)
    monkeypatch.setitem(codec.UPCASTERS, ("message.received", 1), _rename_body_to_text)
    old = '{"body":"hello","channel":"cli","in_reply_to":null,"sender":"operator"}'
    decoded = decode_payload("message.received", 1, old)
    assert decoded == ev.MessageReceived(text="hello")
    # Rows at the current version are taken as they are.
    assert decode_payload("message.received", 2, '{"text":"hi"}') == ev.MessageReceived(text="hi")


def test_upcasters_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev.MessageReceived, "VERSION", 3)
    monkeypatch.setitem(codec.UPCASTERS, ("message.received", 1), _rename_body_to_text)
    monkeypatch.setitem(codec.UPCASTERS, ("message.received", 2), lambda d: {**d, "sender": d["sender"].upper()})
    decoded = decode_payload("message.received", 1, '{"body":"x","sender":"bob"}')
    assert decoded == ev.MessageReceived(text="x", sender="BOB")


def test_missing_upcaster_is_an_event_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev.MessageReceived, "VERSION", 3)
    monkeypatch.setitem(codec.UPCASTERS, ("message.received", 1), _rename_body_to_text)
    with pytest.raises(EventValidationError, match=r"no upcaster for message.received v2"):
        decode_payload("message.received", 1, '{"body":"x"}')


def test_unknown_type_newer_version_and_bad_payload_are_refused() -> None:
    with pytest.raises(EventValidationError, match="unknown event type"):
        decode_payload("nope.never", 1, "{}")
    with pytest.raises(EventValidationError, match="newer than this holon"):
        decode_payload("message.received", 2, '{"text":"x"}')
    with pytest.raises(EventValidationError, match="does not validate"):
        decode_payload("message.received", 1, '{"text":"x","surprise":1}')
    with pytest.raises(EventValidationError, match="does not validate"):
        decode_payload("turn.settled", 1, '{"turn_id":"t","outcome":"exploded"}')


def test_payloads_refuse_values_without_a_json_form() -> None:
    """NaN/inf have no canonical JSON form: refused when the payload is built, not silently nulled."""
    for bad in (float("nan"), float("inf"), [1.0, {"x": float("-inf")}]):
        with pytest.raises(ValidationError):
            ev.AgentConfigured(changes={"k": bad})
        with pytest.raises(ValidationError):
            ev.TaskCreated(task_id="t", title="t", spec={"k": bad})
    with pytest.raises(ValidationError):
        ev.ModelResponded(turn_id="t", round=0, model="m", cost_usd=float("nan"))


def test_payload_outside_json_range_is_an_event_validation_error() -> None:
    """An integer beyond 64 bits cannot be stored: a HolonError, not a raw orjson TypeError."""
    payload = ev.WaitRegistered(wait_id="w", on="task", recheck_at_us=2**70)
    with pytest.raises(EventValidationError):
        encode_payload(payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW)


# --- through the ledger -----------------------------------------------------------------------


def _bare_ledger(root: Path) -> Ledger:
    return Ledger(Database(root / "holon.db", synchronous="OFF"), clock=FakeClock(), blob_threshold=THRESHOLD)


@pytest.mark.parametrize("tag", TAGS)
def test_every_type_round_trips_through_the_ledger(tag: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ledger = _bare_ledger(Path(tmp))

        @settings(max_examples=examples(20))
        @given(payload=payloads(PAYLOAD_TYPES[tag]))
        def check(payload: ev.PayloadBase) -> None:
            [stored] = ledger.append(NewEvent(agent_id="agt_x", payload=payload, turn_id="turn_1"))
            read = ledger.get(stored.seq)
            assert read == stored
            assert read.type == tag
            assert read.version == type(payload).VERSION
            assert [e.seq for e in ledger.read(stored.seq - 1, limit=1)] == [stored.seq]
            for name in LARGE_FIELDS[tag]:
                original, kept = getattr(payload, name), getattr(read.payload, name)
                if isinstance(kept, BlobRef) and isinstance(original, str):
                    full = ledger.resolve(kept)
                    assert full is not None and not isinstance(full, str)
                    assert full.text == original
                    assert not full.pruned
                elif isinstance(kept, BlobRef):
                    assert kept == original  # a reference the caller passed in is kept as it is
                else:
                    assert ledger.resolve(kept) == original
            if not any(isinstance(getattr(read.payload, n), BlobRef) for n in LARGE_FIELDS[tag]):
                assert read.payload == payload

        check()
        assert ledger.verify().ok
        assert set(ledger.stats().by_type) == {tag}
        ledger.close()


def test_ledger_reads_old_rows_through_upcasters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _bare_ledger(tmp_path)
    [stored] = ledger.append(NewEvent(agent_id="agt_x", payload=ev.MessageReceived(text="hi", channel="cli")))
    assert stored.version == 1
    monkeypatch.setattr(ev.MessageReceived, "VERSION", 2)
    monkeypatch.setitem(codec.UPCASTERS, ("message.received", 1), lambda d: {**d, "channel": "old:" + d["channel"]})
    read = ledger.get(stored.seq)
    assert read.version == 1  # the stored row is never rewritten
    assert read.payload == ev.MessageReceived(text="hi", channel="old:cli")
    assert ledger.verify().ok
    [new] = ledger.append(NewEvent(agent_id="agt_x", payload=ev.MessageReceived(text="v2")))
    assert new.version == 2
    assert ledger.get(new.seq).payload == ev.MessageReceived(text="v2")
    ledger.close()


def test_catalog_is_derived_from_the_union() -> None:
    """``Payload`` is the one list of event types: every payload model is in it, once, under its tag."""
    assert set(PAYLOAD_TYPES.values()) == set(ev.PayloadBase.__subclasses__())
    for tag, model in PAYLOAD_TYPES.items():
        assert model.model_fields["type"].default == tag
    assert ev.tags_of(ev.TaskCreated | ev.TaskResulted) == {"task.created", "task.resulted"}
    assert ev.tags_of(ev.TimerFired) == {"timer.fired"}


@given(data=st.data(), tag=st.sampled_from(TAGS), turn=st.none() | st.text(max_size=8), key=st.none() | st.text())
@settings(max_examples=examples(60), deadline=None)
def test_the_append_path_hashes_the_same_bytes_as_verify(
    data: st.DataObject, tag: str, turn: str | None, key: str | None
) -> None:
    """``header_values`` + ``chain_hash_of`` (the append path: a tuple and payload bytes, encoded
    once) give the hash ``verify`` recomputes from the header dict and the stored text."""
    from holon.ledger.envelope import HEADER_FIELDS, header_of, header_values

    payload = data.draw(payloads(PAYLOAD_TYPES[tag]), label="payload")
    ne = NewEvent("agt_1", payload, turn_id=turn, idempotency_key=key)  # type: ignore[arg-type]
    values = header_values(ne, seq=7, event_id="evt_x", ts_us=123)
    as_dict = header_of(ne, seq=7, event_id="evt_x", ts_us=123)
    assert values == tuple(as_dict[f] for f in HEADER_FIELDS)
    enc = encode_payload(payload, blob_threshold=THRESHOLD, preview_chars=PREVIEW)  # type: ignore[arg-type]
    assert enc.data == enc.text.encode("utf-8")
    if not enc.blobs:
        assert enc.text == canonical_json(payload.model_dump(mode="json", exclude={"type"})).decode()
    prev = "ab" * 32
    assert codec.chain_hash_of(prev, values, enc.data) == codec.chain_hash(
        prev, codec.envelope_header(as_dict), enc.text
    )
