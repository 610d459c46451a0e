"""Logging: JSON lines in the log file, secrets redacted, tracebacks without frame locals."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from holon.logs import REDACTED, configure_logging, get_logger, redact

API_KEY = "sk-proj-THISISASECRETKEY1234567890"
LOCAL_SECRET = "sk-LOCALSECRETVALUE0987654321"
PASSWORD = "hunter2-correct-horse-battery"
GITHUB = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "logs" / "holon.log"
    configure_logging(log_file=path, console="off", level="debug")
    yield path
    for handler in list(logging.getLogger().handlers):
        handler.close()
        logging.getLogger().removeHandler(handler)
    structlog.reset_defaults()


def lines(path: Path) -> list[dict]:
    for handler in logging.getLogger().handlers:
        handler.flush()
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_no_secrets(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for secret in (API_KEY, LOCAL_SECRET, PASSWORD, GITHUB, "THISISASECRET", "LOCALSECRET"):
        assert secret not in text


def call_model() -> None:
    api_key = LOCAL_SECRET  # a local holding a secret, as in a provider client
    password = PASSWORD
    headers = {"Authorization": f"Bearer {api_key}"}
    assert api_key and password and headers
    raise RuntimeError("the provider refused the request")


def test_secret_keyword_arguments_are_redacted(log_file: Path) -> None:
    log = get_logger("holon.test")
    log.info(
        "calling model",
        api_key=API_KEY,
        model="gpt-test",
        headers={"Authorization": f"Bearer {API_KEY}", "Accept": "json"},
        note=f"using key {API_KEY} now",
        tokens=[GITHUB],
        password=PASSWORD,
    )
    [entry] = lines(log_file)
    assert entry["event"] == "calling model"
    assert entry["level"] == "info" and entry["logger"] == "holon.test" and "timestamp" in entry
    assert entry["model"] == "gpt-test"
    assert entry["api_key"] == REDACTED
    assert entry["password"] == REDACTED
    assert entry["headers"] == {"Authorization": REDACTED, "Accept": "json"}
    assert entry["note"] == f"using key {REDACTED} now"
    assert entry["tokens"] == REDACTED
    assert_no_secrets(log_file)


def test_exception_traceback_has_no_locals(log_file: Path) -> None:
    log = get_logger("holon.test")
    try:
        call_model()
    except RuntimeError:
        log.exception("model call failed", api_key=API_KEY)
    [entry] = lines(log_file)
    assert entry["event"] == "model call failed"
    [exc] = entry["exception"]
    assert exc["exc_type"] == "RuntimeError"
    assert exc["exc_value"] == "the provider refused the request"
    assert [f["name"] for f in exc["frames"]][-1] == "call_model"
    assert all("locals" not in f for f in exc["frames"])
    text = log_file.read_text()
    assert '"locals"' not in text
    assert "hunter2" not in text and "Bearer" not in text
    assert_no_secrets(log_file)


def test_secret_in_an_exception_message_is_redacted(log_file: Path) -> None:
    """Provider errors often echo the key back ("Incorrect API key provided: sk-...")."""
    log = get_logger("holon.test")

    def authenticate() -> None:
        raise PermissionError(f"Incorrect API key provided: {API_KEY}")

    try:
        authenticate()
    except PermissionError:
        log.exception("auth failed")
    [entry] = lines(log_file)
    assert entry["exception"][0]["exc_value"] == f"Incorrect API key provided: {REDACTED}"
    assert_no_secrets(log_file)


def test_stdlib_loggers_go_through_the_same_pipeline(log_file: Path) -> None:
    std = logging.getLogger("thirdparty.client")
    std.warning("retrying with key %s", API_KEY)
    try:
        call_model()
    except RuntimeError as e:
        saved = e
    # Logged later, outside the except block, with the exception object.
    std.error("gave up", exc_info=saved)
    first, second = lines(log_file)
    assert first["event"] == f"retrying with key {REDACTED}"
    assert first["logger"] == "thirdparty.client"
    assert second["event"] == "gave up"
    [exc] = second["exception"]
    assert exc["exc_type"] == "RuntimeError"
    assert all("locals" not in f for f in exc["frames"])
    assert_no_secrets(log_file)


def test_level_filters(tmp_path: Path) -> None:
    path = tmp_path / "holon.log"
    configure_logging(log_file=path, console="off", level="warning")
    try:
        log = get_logger("holon.level")
        log.info("quiet")
        log.warning("loud")
        assert [e["event"] for e in lines(path)] == ["loud"]
    finally:
        for handler in list(logging.getLogger().handlers):
            handler.close()
            logging.getLogger().removeHandler(handler)
        structlog.reset_defaults()


def test_console_off_writes_nothing_to_stderr(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    get_logger().info("only in the file", api_key=API_KEY)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert lines(log_file)[0]["event"] == "only in the file"


def test_redact_processor() -> None:
    out = redact(None, "info", {"event": f"key={API_KEY}", "Cookie": "c", "nested": [{"secret": 1}, (GITHUB,)]})
    assert out == {"event": f"key={REDACTED}", "Cookie": REDACTED, "nested": [{"secret": REDACTED}, [REDACTED]]}


@pytest.mark.parametrize("mode", ["json", "pretty"])
def test_console_output_is_redacted_too(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(console=mode)  # binds the (captured) sys.stderr
    try:
        log = get_logger("holon.console")
        log.info("calling", api_key=API_KEY, note=f"with {API_KEY}")
        try:
            raise PermissionError(f"Incorrect API key provided: {API_KEY}")
        except PermissionError:
            log.exception("auth failed")
        try:
            call_model()
        except RuntimeError:
            logging.getLogger("thirdparty").exception("client failed")
        err = capsys.readouterr().err
        assert "calling" in err and "auth failed" in err and "client failed" in err
        assert "PermissionError" in err and "RuntimeError" in err and "call_model" in err
        assert REDACTED in err
        for secret in (API_KEY, LOCAL_SECRET, PASSWORD, "THISISASECRET"):
            assert secret not in err
    finally:
        for handler in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(handler)
        structlog.reset_defaults()


def test_values_pydantic_quotes_in_errors_are_scrubbed(log_file: Path) -> None:
    """A value refused in the wrong place may be a secret of any shape (issue 14): pydantic quotes it
    as ``input_value=...`` in its error text, which must not reach the log from any error path."""
    from pydantic import BaseModel, ValidationError

    class Settings(BaseModel):
        max_rounds: int

    short = "pw-9f8e7d"  # no known secret shape: only the input_value rule catches it
    try:
        Settings.model_validate({"max_rounds": short})
    except ValidationError as e:
        get_logger("holon.test").exception("unhandled error in api request", error=str(e))
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = log_file.read_text(encoding="utf-8")
    assert "input_value=[redacted]" in text and short not in text
