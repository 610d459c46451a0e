"""Hypothesis strategies for payload models, derived from their pydantic fields.

``payloads(model)`` fills *every* field (not only the required ones ``st.builds`` would), with
unicode text that is sometimes larger than a small blob threshold, JSON values for ``JSONValue``
fields, and the bounds (``ge``) and patterns the models declare.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue, ValidationError

from holon.ledger.events import BlobRef

INT64 = (-(2**63), 2**63 - 1)

#: Short text: any unicode (no surrogates), including control characters, NUL and emoji.
short_text = st.text(max_size=12)

#: Text that is sometimes far larger than a 256-byte blob threshold (multi-byte characters too).
big_text = st.builds(lambda chunk, n: chunk * n, st.text(min_size=1, max_size=6), st.integers(40, 160))

text = st.one_of(short_text, short_text, big_text)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(*INT64),
    st.floats(allow_nan=False, allow_infinity=False),
    short_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(short_text, inner, max_size=3)),
    max_leaves=8,
)

blob_refs = st.builds(
    BlobRef,
    blob=st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
    size=st.integers(0, 2**40),
    preview=short_text,
)


def _is_json_any(ann: object) -> bool:
    return ann is Any or ann is JsonValue


def for_annotation(ann: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    """A strategy for values of ``ann`` honouring ``ge`` bounds and regex patterns."""
    origin = typing.get_origin(ann)
    if _is_json_any(ann):
        return json_values
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(ann))
    if isinstance(ann, types.UnionType) or origin is typing.Union:
        options = []
        for arg in typing.get_args(ann):
            if arg is type(None):
                options.append(st.none())
            elif arg is BlobRef:
                options.append(blob_refs)
            else:
                options.append(for_annotation(arg, metadata))
        return st.one_of(*options)
    if origin is list:
        (item,) = typing.get_args(ann)
        max_len = next((m.max_length for m in metadata if isinstance(m, annotated_types.MaxLen)), 4)
        return st.lists(for_annotation(item, []), max_size=min(4, max_len))
    if origin is dict:
        _key, value = typing.get_args(ann)
        return st.dictionaries(short_text, for_annotation(value, []), max_size=4)
    ge = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    le = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    min_len = next((m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)), 0)
    max_len = next((m.max_length for m in metadata if isinstance(m, annotated_types.MaxLen)), None)
    pattern = next((getattr(m, "pattern", None) for m in metadata if getattr(m, "pattern", None)), None)
    if ann is bool:
        return st.booleans()
    if ann is int:
        return st.integers(min_value=INT64[0] if ge is None else ge, max_value=INT64[1] if le is None else le)
    if ann is float:
        return st.floats(min_value=ge, max_value=le, allow_nan=False, allow_infinity=False)
    if ann is str:
        if pattern:
            return st.from_regex(pattern, fullmatch=True)
        if min_len or max_len is not None:
            return st.text(min_size=min_len, max_size=min(max_len or 200, 200))
        return text
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return models(ann)
    raise NotImplementedError(f"no strategy for {ann!r}")


def models(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Instances of ``model`` with every field drawn (the ``type`` tag keeps its default)."""
    fields = {
        name: for_annotation(f.annotation, list(f.metadata)) for name, f in model.model_fields.items() if name != "type"
    }
    return st.fixed_dictionaries(fields).map(lambda kw: _build(model, kw)).filter(lambda m: m is not None)


def _build(model: type[BaseModel], kw: dict[str, Any]) -> BaseModel | None:
    """The model, or ``None`` when a model-level rule refuses the values (e.g. secret-looking settings)."""
    try:
        return model(**kw)
    except ValidationError:
        return None


payloads = models
