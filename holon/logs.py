"""Logging through structlog: JSON lines to ``<home>/logs/holon.log``, readable lines on a TTY.

Where else records go is ``[logging] console`` (``console_mode``): by default readable lines when
stderr is a terminal; under systemd or Docker (``holon serve`` in the foreground, stderr not a
terminal) JSON lines on stderr too, so ``journalctl`` and ``docker logs`` show the daemon's log.

Two rules hold everywhere: tracebacks never carry frame locals (they would leak API keys), and
values under secret-looking keys, or shaped like API keys, are redacted before any renderer
sees them, and so are the inputs pydantic quotes in its error messages (``input_value=...``).
"""

from __future__ import annotations

import io
import logging
import os
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holon.paths import open_private, private_dir

if TYPE_CHECKING:
    import structlog
    from structlog.tracebacks import ExceptionDictTransformer

__all__ = ["FILE_ONLY", "configure_logging", "console_mode", "get_logger", "redact"]

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|cookie)", re.I)
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{12,}|Bearer\s+[A-Za-z0-9._\-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-[A-Za-z0-9\-]{10,})"
)
REDACTED = "[redacted]"
FILE_ONLY = "file_only"
"""A record logged with ``file_only=True`` goes to the log file, never to stderr: e.g. a command's
failure, which the CLI prints on stderr itself as its one ``holon: error:`` line."""
#: pydantic's error text quotes the input it refused (``input_value={'api_key': 'sk-...'}``): the
#: value in the wrong place is exactly the one that may be a secret, so it never reaches a log.
_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]\s*$|$)", re.M | re.S)


def _import_structlog() -> Any:
    """``import structlog`` without rich: structlog imports rich (about 100 ms, a third of the
    logging's start-up) only for its rich traceback formatter and rich-rendered frame locals, and
    holon uses neither (plain tracebacks, ``show_locals=False``). When rich is already loaded
    (the REPL) it is left alone."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        import structlog

        return structlog
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes structlog's ``import rich`` fail
    try:
        import structlog
        import structlog.tracebacks
    finally:
        del sys.modules["rich"]
    return structlog


if not TYPE_CHECKING:
    structlog = _import_structlog()
    from structlog.tracebacks import ExceptionDictTransformer


def _scrub(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, _INPUT_VALUE.sub(f"input_value={REDACTED}", text))


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, dict):
        return {k: (REDACTED if _SECRET_KEY.search(str(k)) else _redact_value(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


def redact(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: hide secrets by key name and by value shape."""
    for key in list(event_dict):
        if key == "exc_info":
            # The exception itself: left intact for the exception renderer, whose output is
            # redacted in turn (a tuple turned into a list here would lose the traceback).
            continue
        if _SECRET_KEY.search(key):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact_value(event_dict[key])
    return event_dict


def _redacted_traceback(sio: Any, exc_info: Any) -> None:
    """structlog's plain traceback with secret-shaped values (e.g. in the message) redacted."""
    buf = io.StringIO()
    structlog.dev.plain_traceback(buf, exc_info)
    sio.write(_scrub(buf.getvalue()))


def console_mode(console: str, *, service: bool = False, tty: bool | None = None) -> str:
    """What ``[logging] console`` means for this process: ``pretty``, ``json`` or ``off``.

    ``auto`` is readable lines on a terminal. Off a terminal it depends on who reads stderr: a
    daemon in the foreground (``service``: ``holon serve``) is run by systemd, Docker or another
    supervisor that collects stderr, so it gets JSON lines there; any other command (and
    ``holon daemon start``'s detached daemon, whose stderr is a file next to the log) stays quiet.
    ``tty`` defaults to whether stderr is a terminal."""
    if console != "auto":
        return console
    if sys.stderr.isatty() if tty is None else tty:
        return "pretty"
    return "json" if service else "off"


class _NotFileOnly(logging.Filter):
    """Keeps ``file_only`` records (``FILE_ONLY``) off the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, dict) and record.msg.get(FILE_ONLY))


def _drop_file_only(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event_dict.pop(FILE_ONLY, None)
    return event_dict


def configure_logging(
    *,
    level: str = "info",
    log_file: Path | None = None,
    console: str = "auto",
    service: bool = False,
) -> None:
    """Configure structlog and the stdlib root logger once per process (``service``: see ``console_mode``)."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(level.upper())
    # HTTP client libraries log every request at INFO: noise in a chat, and URLs may carry tokens.
    for chatty in ("httpx", "httpcore", "uvicorn.access"):
        logging.getLogger(chatty).setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    tracebacks = structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False))
    if log_file is not None:
        private_dir(log_file.parent)
        os.close(open_private(log_file))  # created 0600 (or tightened) before the handler appends
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=shared,
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    _drop_file_only,
                    tracebacks,
                    redact,
                    structlog.processors.JSONRenderer(),
                ],
            )
        )
        root.addHandler(fh)
    mode = console_mode(console, service=service)
    if mode != "off":
        sh = logging.StreamHandler(sys.stderr)
        renderer: Any = (
            structlog.processors.JSONRenderer()
            if mode == "json"
            else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), exception_formatter=_redacted_traceback)
        )
        final = [tracebacks, redact, renderer] if mode == "json" else [redact, renderer]
        sh.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=shared,
                processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
            )
        )
        sh.addFilter(_NotFileOnly())
        root.addHandler(sh)


def get_logger(name: str = "holon") -> Any:
    # structlog's BoundLogger is dynamically typed; Any keeps call sites free of casts.
    return structlog.get_logger(name)
