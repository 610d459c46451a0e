"""``holon daemon logs`` as people read it: one line per record, not raw JSON.

The log file holds structlog JSON lines (``holon.logs``). Pretty, each becomes

    2026-11-25 20:14:12Z  info     daemon.started  pid=30191 head=1 timers=0  [holon.daemon]

time (UTC, to the second), level, event, then the other fields as ``key=value`` (strings with
spaces quoted), and the logger last; an exception follows on indented lines. Colour (level and
event) only when stdout is a terminal. A line that is not a JSON object (``daemon.out``: a crash's
traceback, a half-written line) is printed as it is. ``--json`` prints the raw lines.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["pretty_line"]

_FIXED = ("timestamp", "level", "event", "logger", "exception")
_LEVEL_COLOUR = {"debug": "2", "info": "32", "warning": "33", "error": "31", "critical": "1;31"}


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def _value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if (not value or any(c in value for c in ' \t\n"=')) else value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _when(stamp: Any) -> str:
    """``2026-11-25T20:14:12.315457Z`` -> ``2026-11-25 20:14:12Z`` (anything else as it is)."""
    text = str(stamp or "")
    if len(text) >= 19 and text[10] == "T":
        return f"{text[:10]} {text[11:19]}Z"
    return text or "-"


def _exception(value: Any) -> list[str]:
    """The exception field (a string, or structlog's list of frames and errors) as indented lines."""
    if isinstance(value, str):
        return ["    " + line for line in value.rstrip().splitlines()]
    lines = []
    for exc in value if isinstance(value, list) else [value]:
        if isinstance(exc, dict):
            lines.append(f"    {exc.get('exc_type', 'Error')}: {exc.get('exc_value', '')}".rstrip())
            for frame in exc.get("frames", [])[-3:]:
                if isinstance(frame, dict):
                    lines.append(
                        f"      at {frame.get('filename', '?')}:{frame.get('lineno', '?')} in {frame.get('name', '?')}"
                    )
        else:
            lines.append(f"    {exc}")
    return lines


def pretty_line(line: str, *, colour: bool = False) -> str:
    """One log line for people (with its newline); a line that is not a JSON object, unchanged."""
    text = line.rstrip("\n")
    try:
        record = json.loads(text)
    except ValueError:
        return line if line.endswith("\n") else line + "\n"
    if not isinstance(record, dict):
        return text + "\n"
    level = str(record.get("level", "")).lower()
    head = [
        _when(record.get("timestamp")),
        _paint(f"{level or '-':<8}", _LEVEL_COLOUR.get(level, ""), colour),
        _paint(str(record.get("event", "")), "1", colour),
    ]
    rest = [f"{k}={_value(v)}" for k, v in record.items() if k not in _FIXED]
    if record.get("logger"):
        rest.append(_paint(f"[{record['logger']}]", "2", colour))
    out = "  ".join(head) + ("  " + " ".join(rest) if rest else "")
    if "exception" in record:
        out += "\n" + "\n".join(_exception(record["exception"]))
    return out + "\n"
