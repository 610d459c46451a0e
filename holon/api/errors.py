"""Errors as structured JSON: ``{"error": {"code": "...", "message": "..."}}``.

The code is stable and derived from the ``HolonError`` tree (most specific class first); the
message is the error's one line. Nothing ever answers with a traceback: anything unexpected is
logged here and answered with 500 ``internal``.

    UsageError, ConfigError     400 bad_request
    (missing or bad token)      401 unauthorized
    (foreign Host or Origin)    403 forbidden
    NotFoundError, no route     404 not_found
    (wrong method)              405 method_not_allowed
    ConflictError               409 conflict
    (body over the limit)       413 too_large
    (a form or text/plain
     that would change state)   415 unsupported_media_type
    a body that is not JSON,
    or not valid Unicode        400 bad_request
    request validation,
    EventValidationError        422 invalid
    other LedgerError           500 ledger
    ModelError                  502 model
    StorageUnavailable          503 unavailable, with Retry-After (the database was lost
                                mid-run: nothing was committed; retry, with the same
                                idempotency key; RFC 0008 section 6)
    other HolonError            400 failed
    anything else               500 internal
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from holon.errors import (
    ConfigError,
    ConflictError,
    EventValidationError,
    HolonError,
    LedgerError,
    ModelError,
    NotFoundError,
    StorageUnavailable,
    UsageError,
)
from holon.logs import get_logger

__all__ = ["RETRY_AFTER_S", "BodyTooLarge", "error_response", "install_error_handlers", "status_for"]

RETRY_AFTER_S = 2
"""The ``Retry-After`` of a 503 for a lost database: about the node's first reconnect attempts."""

log = get_logger("holon.api")


class BodyTooLarge(HolonError):
    """A request body over a route's own limit (the app-wide limit is ``guard.BodyLimit``)."""


_BY_CLASS: tuple[tuple[type[HolonError], int, str], ...] = (
    (BodyTooLarge, 413, "too_large"),
    (StorageUnavailable, 503, "unavailable"),
    (UsageError, 400, "bad_request"),
    (ConfigError, 400, "bad_request"),
    (NotFoundError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (EventValidationError, 422, "invalid"),
    (LedgerError, 500, "ledger"),
    (ModelError, 502, "model"),
)

_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    503: "unavailable",
    415: "unsupported_media_type",
    422: "invalid",
}


def status_for(exc: HolonError) -> tuple[int, str]:
    for cls, status, code in _BY_CLASS:
        if isinstance(exc, cls):
            return status, code
    return 400, "failed"


def error_response(status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


#: FastAPI's whole message for a body it could not decode (bytes that are not UTF-8).
_FASTAPI_UNPARSED = "There was an error parsing the body"


def _json_problem(exc: RequestValidationError) -> str | None:
    """What is wrong with a body that is not JSON, or holds a string that is not Unicode, if so."""
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            ctx = error.get("ctx") or {}
            detail = str(ctx.get("error", "") or error.get("msg", ""))[:120]
            where = error.get("loc", ("body", None))
            at = f" at character {where[1]}" if len(where) > 1 and isinstance(where[1], int) else ""
            return f"the request body is not valid JSON{at}: {detail}".rstrip(": ")
        if error.get("type") == "string_unicode":  # pydantic met a lone surrogate ("\ud800") in a string
            where = ".".join(str(p) for p in error.get("loc", ()))
            return (
                f"{where} is not valid Unicode text: it holds a lone surrogate (like \\ud800); "
                "send UTF-8 text, and escape a non-BMP character as a surrogate pair"
            )
    return None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HolonError)
    async def holon_error(request: Request, exc: HolonError) -> JSONResponse:
        status, code = status_for(exc)
        if status >= 500:
            log.error("api request failed", path=request.url.path, error=str(exc), kind=type(exc).__name__)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
        return error_response(status, code, exc.message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        bad_json = _json_problem(exc)
        if bad_json is not None:
            return error_response(400, "bad_request", bad_json)
        return error_response(422, "invalid", _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _BY_STATUS.get(exc.status_code, "internal" if exc.status_code >= 500 else "bad_request")
        detail = str(exc.detail)
        if detail == _FASTAPI_UNPARSED:
            detail = "the request body is not valid JSON: it must be UTF-8 text (bytes that are not were sent)"
        return error_response(exc.status_code, code, detail, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The last resort behind ``guard.CatchAll``; the message may hold request values: not logged.
        path = "/v1/hooks/<token>" if request.url.path.startswith("/v1/hooks/") else request.url.path[:200]
        log.error("unhandled error in api request", path=path, method=request.method, kind=type(exc).__name__)
        return error_response(500, "internal", "internal error (see the daemon log)")
