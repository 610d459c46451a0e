"""The one codec between ledger rows and events, and the only code that knows the JSON layout.

* **Canonical JSON**: ``orjson`` with sorted keys, compact, UTF-8. The same value always gives the
  same bytes, which is what hashing and byte-identical replay rely on.
* **Payload text**: the payload model dumped to JSON *without* its ``type`` (the row's ``type``
  column holds the tag). ``LargeText`` fields above the blob threshold are replaced by a
  ``BlobRef`` and their bodies returned for the blob store.
* **Hash chain**: ``hash = sha256(prev_hash "\n" header "\n" payload_text)`` where ``header`` is the
  canonical JSON list of the envelope fields. The hash covers a blob's *reference* (its sha256),
  not its body, so pruning bodies keeps the chain verifiable.
* **Upcasting**: a row stored at an older ``version`` is brought forward, dict to dict, by the
  functions in ``UPCASTERS`` before validation. Stored rows are never rewritten.
"""

from __future__ import annotations

import hashlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from holon.errors import EventValidationError
from holon.ledger.envelope import HEADER_FIELDS
from holon.ledger.events import PAYLOAD_TYPES, BlobRef, Payload, PayloadBase

__all__ = [
    "UPCASTERS",
    "BlobBody",
    "EncodedPayload",
    "canonical_json",
    "chain_hash",
    "chain_hash_of",
    "decode_payload",
    "encode_payload",
    "envelope_header",
]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _turn_started_v1(data: dict[str, Any]) -> dict[str, Any]:
    """``turn.started`` v1 -> v2: no node was recorded (one process ran every turn)."""
    return {**data, "node": None}


#: (event type, stored version) -> function returning the dict at version + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {("turn.started", 1): _turn_started_v1}

_SORTED = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(value, option=_SORTED)


def _large_fields(model: type[PayloadBase]) -> tuple[str, ...]:
    """Names of the fields that may hold a ``BlobRef`` (those typed ``LargeText``)."""
    names = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        is_union = isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union
        if is_union and BlobRef in typing.get_args(ann):
            names.append(name)
    return tuple(names)


_LARGE_FIELDS: dict[str, tuple[str, ...]] = {tag: _large_fields(m) for tag, m in PAYLOAD_TYPES.items()}


@dataclass(frozen=True, slots=True)
class BlobBody:
    """A body to put in the blob store."""

    hash: str
    data: bytes


class EncodedPayload(NamedTuple):
    """One payload encoded for the ledger (a tuple: made once per append, so cheap to build)."""

    text: str
    """Canonical JSON of the payload, without ``type``."""
    data: bytes
    """``text`` as UTF-8 (what the hash chain covers): encoded once, for the hash and the row."""
    payload: Payload
    """The payload as stored: large fields replaced by ``BlobRef``."""
    blobs: tuple[BlobBody, ...]


_tuple_new = tuple.__new__


def encode_payload(payload: Payload, *, blob_threshold: int, preview_chars: int) -> EncodedPayload:
    tag: str = payload.type
    # ``model_dump(mode="json")`` without its wrapper (a third of an append's encoding time).
    data: dict[str, Any] = payload.__pydantic_serializer__.to_python(payload, mode="json")
    data.pop("type", None)  # the row's ``type`` column holds the tag
    large = _LARGE_FIELDS[tag]
    if not large:  # most payloads: no field can become a blob
        # ``_dumps`` and the named tuple's ``__new__``, inline: this runs for every event appended
        # (0.4 us of 2.2; issue 18, step 5).
        try:
            raw = orjson.dumps(data, option=_SORTED)
        except orjson.JSONEncodeError as e:  # e.g. an integer beyond 64 bits
            raise EventValidationError(f"{tag} payload has no JSON form: {e}") from e
        return _tuple_new(EncodedPayload, (raw.decode("utf-8"), raw, payload, ()))
    blobs: list[BlobBody] = []
    refs: dict[str, BlobRef] = {}
    for name in large:
        value = data.get(name)
        if isinstance(value, str) and len(value) > blob_threshold // 4:
            body = value.encode("utf-8")
            if len(body) > blob_threshold:
                digest = hashlib.sha256(body).hexdigest()
                ref = BlobRef(blob=digest, size=len(body), preview=value[:preview_chars])
                refs[name] = ref
                data[name] = ref.model_dump(mode="json")
                blobs.append(BlobBody(digest, body))
    stored = payload.model_copy(update=refs) if refs else payload
    return EncodedPayload(*_dumps(tag, data), stored, tuple(blobs))


def _dumps(tag: str, data: dict[str, Any]) -> tuple[str, bytes]:
    try:
        raw = orjson.dumps(data, option=_SORTED)
    except orjson.JSONEncodeError as e:  # e.g. an integer beyond 64 bits
        raise EventValidationError(f"{tag} payload has no JSON form: {e}") from e
    return raw.decode("utf-8"), raw


def decode_payload(type_: str, version: int, text: str | bytes) -> Payload:
    """Rebuild a payload model from a stored row, upcasting old versions first."""
    model = PAYLOAD_TYPES.get(type_)
    if model is None:
        raise EventValidationError(f"unknown event type {type_!r}")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as e:  # a damaged row (bytes changed on disk), or not UTF-8
        raise EventValidationError(f"stored {type_} payload is not JSON ({e})") from e
    if not isinstance(data, dict):
        raise EventValidationError(f"stored {type_} payload is not a JSON object")
    while version < model.VERSION:
        up = UPCASTERS.get((type_, version))
        if up is None:
            raise EventValidationError(f"no upcaster for {type_} v{version} -> v{version + 1}")
        data = up(data)
        version += 1
    if version > model.VERSION:
        raise EventValidationError(f"{type_} v{version} is newer than this holon (v{model.VERSION})")
    data["type"] = type_
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise EventValidationError(f"stored {type_} payload does not validate: {e.errors()[0]['msg']}") from e


_header_values = itemgetter(*HEADER_FIELDS)


def envelope_header(envelope: Mapping[str, object]) -> bytes:
    """The hash chain's header: the JSON list of the envelope's ``HEADER_FIELDS``, in their order."""
    return orjson.dumps(_header_values(envelope))  # a tuple is a JSON list, as before


def chain_hash(prev_hash: str, header: bytes, payload_text: str) -> str:
    data = b"\n".join((prev_hash.encode("ascii"), header, payload_text.encode("utf-8")))
    return hashlib.sha256(data).hexdigest()


def chain_hash_of(prev_hash: str, header: tuple[Any, ...], payload: bytes) -> str:
    """``chain_hash`` of a header tuple (``HEADER_FIELDS`` order) and payload bytes (the append path):
    the same bytes are hashed, nothing is encoded twice."""
    return hashlib.sha256(b"\n".join((prev_hash.encode("ascii"), orjson.dumps(header), payload))).hexdigest()
