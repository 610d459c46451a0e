"""Settings as TOML text for people to read (``agent show``, ``config show``): never Python reprs.

Only what settings hold is supported: strings, numbers, booleans, lists of those, and one level
of ``[section]`` tables. TOML has no null, so an unset value is shown as a comment; the output of
``to_toml`` for values that are all set is valid TOML that ``tomllib`` reads back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["to_toml", "toml_value"]


def toml_value(value: Any) -> str:
    """One value as TOML. Strings use JSON's escaping, which is valid TOML basic-string syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _line(key: str, value: Any, note: str = "") -> str:
    text = f"# {key} = (unset)" if value is None else f"{key} = {toml_value(value)}"
    return f"{text}  # {note}" if note else text


def to_toml(data: Mapping[str, Any], notes: Mapping[str, str] | None = None) -> str:
    """Top-level keys first, then one ``[section]`` per mapping value. ``notes``: a comment after
    a key's line, by ``key`` or ``section.key`` (e.g. where the value came from)."""
    notes = notes or {}
    lines = [_line(k, v, notes.get(k, "")) for k, v in data.items() if not isinstance(v, Mapping)]
    for section, table in data.items():
        if not isinstance(table, Mapping):
            continue
        if lines:
            lines.append("")
        lines.append(f"[{section}]")
        lines += [_line(k, v, notes.get(f"{section}.{k}", "")) for k, v in table.items()]
    return "\n".join(lines)
