"""ASGI middleware in front of every route: who may call at all, the token, the body limit.

Outermost first:

* ``CatchAll``: an exception no route handled becomes a JSON 500 (``internal``) and the connection
  stays open; the log gets its class and where it happened, never its message (which may hold
  request values such as a secret a client sent).
* ``BrowserGuard``: refuses what a web page could send (RFC 0005, "Browsers"): a ``Host`` that is
  not loopback with the daemon's own port (DNS rebinding) unless ``[api] allowed_hosts`` lists it,
  a foreign ``Origin``, and a state-changing request (POST, PUT, PATCH, DELETE) that is neither
  ``application/json`` nor carries the token: a "simple" cross-site request (a form, text/plain,
  a body-less POST) never changes anything.
* ``BearerAuth``: every route but health, hooks and the docs pages (``GET /docs``, its static
  files, ``GET /v1/openapi.json``) needs ``Authorization: Bearer <token>``; the dashboard's paths
  (``exempt``) check their own session cookie and CSRF token instead (``holon.api.dashboard``).
* ``BodyLimit``: request bodies over the limit get 413.

All are plain ASGI (not ``BaseHTTPMiddleware``) so that they never buffer a response, which would
break server-sent event streams, and so that a refused request never reaches a route.
"""

from __future__ import annotations

import hmac
import ipaddress
import traceback
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from holon.api.errors import error_response
from holon.logs import get_logger

__all__ = ["BearerAuth", "BodyLimit", "BrowserGuard", "CatchAll", "split_host"]

log = get_logger("holon.api")

#: Methods that may change state: each needs JSON or the token (a form or text/plain never will do).
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORT = {"http": 80, "https": 443}


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def _shown(value: bytes | str, limit: int = 100) -> str:
    """A header value as a short, quoted, escaped string for an error message."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def _redacted(path: str) -> str:
    """``path`` for a log line: a hook's path token is a secret."""
    return "/v1/hooks/<token>" if path.startswith("/v1/hooks/") else path[:200]


def split_host(value: str, *, default_port: int | None = None) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``), lower-cased;
    ``None`` when it is not one (userinfo, a path, spaces, a bare IPv6 address, a bad port)."""
    value = value.strip().lower()
    if not value or len(value) > 300 or any(c in value for c in "/\\@?# \t,") or not value.isprintable():
        return None
    port_text: str | None
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[: end + 1], value[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif ":" in value:
        host, _, port_text = value.rpartition(":")
        if ":" in host:
            return None
    else:
        host, port_text = value, None
    if not host or host == "[]":
        return None
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or len(port_text) > 5 or int(port_text) > 65_535:
        return None
    return host, int(port_text)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _is_loopback_name(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, [::1]); never another name."""
    if host in ("localhost", "localhost."):
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


#: Read-only pages a browser opens without a bearer header: the docs page, its static files and the
#: OpenAPI document. They say nothing about agents; every call made from them needs the token.
_PUBLIC_PAGES = ("/docs", "/v1/openapi.json")


def _is_public(path: str, method: str = "GET") -> bool:
    """Health reveals nothing; a hook's path token is its own capability; the docs are read-only pages."""
    if path == "/v1/health" or path.startswith("/v1/hooks/"):
        return True
    return method in ("GET", "HEAD") and (path in _PUBLIC_PAGES or path.startswith("/docs/static/"))


class BearerAuth:
    """Every request but the public ones must carry ``Authorization: Bearer <token>``; paths for
    which ``exempt`` is true authenticate otherwise (the dashboard: a session cookie plus its CSRF
    token)."""

    def __init__(self, app: ASGIApp, *, token: str, exempt: Callable[[str], bool] | None = None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._exempt = exempt or (lambda path: False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or _is_public(path, scope.get("method", "GET").upper()) or self._exempt(path):
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"authorization") or b""
        if not hmac.compare_digest(given, self._expected):
            response = error_response(
                401, "unauthorized", "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, by Content-Length or while reading."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "too_large", f"request body over the limit of {self.max_bytes} bytes")
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            # The body once, then the real channel: streams need it to see the client disconnect.
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class BrowserGuard:
    """Refuse requests a web page could make: foreign ``Host`` or ``Origin``, non-JSON state changes.

    The daemon's own port is the one the connection arrived on (ASGI ``scope["server"]``), so the
    check is right even when the daemon listened on port 0. A ``Host`` that is an IP literal equal
    to the address the connection arrived at is the daemon's own too (a non-loopback bind reached
    by its address: DNS rebinding always uses a name). ``allowed_hosts`` entries (``host`` or
    ``host:port``) add names, for tunnels and proxies.
    """

    def __init__(self, app: ASGIApp, *, token: str | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode() if token else None
        self._allowed = [parsed for entry in allowed_hosts if (parsed := split_host(entry)) is not None]

    def _own(self, host: str, port: int | None, server: tuple[str, int] | None) -> bool:
        """Loopback (or the local address itself) with the port the connection arrived on."""
        if server is None:
            return _is_loopback_name(host)
        local_host, local_port = server[0], server[1]
        if port != local_port:
            return False
        return _is_loopback_name(host) or (_ip(host) is not None and _ip(host) == _ip(str(local_host)))

    def _listed(self, host: str, port: int | None) -> bool:
        return any(host == h and (p is None or p == port) for h, p in self._allowed)

    def _host_ok(self, scope: Scope) -> tuple[bool, str]:
        raw = _header(scope, b"host")
        if raw is None:
            return False, "the request has no Host header"
        parsed = split_host(raw.decode("latin-1"), default_port=80)
        if parsed is not None and (self._own(*parsed, scope.get("server")) or self._listed(*parsed)):
            return True, ""
        return False, (
            f"Host {_shown(raw)} is not this daemon's (loopback with its port): a web page may be trying to reach "
            "it by DNS rebinding. Use http://127.0.0.1:PORT, or add the name to [api] allowed_hosts"
        )

    def _origin_ok(self, scope: Scope) -> tuple[bool, str]:
        raw = _header(scope, b"origin")
        if raw is None:
            return True, ""
        text = raw.decode("latin-1").strip()
        try:
            url = urlsplit(text)
            parsed = split_host(url.netloc, default_port=_DEFAULT_PORT.get(url.scheme))
        except ValueError:
            parsed = None
        ok = (
            parsed is not None
            and url.scheme in _DEFAULT_PORT
            and not url.path
            and not url.query
            and (self._own(*parsed, scope.get("server")) or self._listed(*parsed))
        )
        if ok:
            return True, ""
        return False, (
            f"Origin {_shown(raw)} is not this daemon's: requests from other web pages are refused "
            "(add the name to [api] allowed_hosts if this is your own front end)"
        )

    def _plain_change(self, scope: Scope) -> bool:
        """A state-changing request that is neither JSON nor carries the token (what a form can send)."""
        if scope.get("method", "GET").upper() not in _STATE_CHANGING:
            return False
        media = (_header(scope, b"content-type") or b"").split(b";", 1)[0].strip().lower()
        if media == b"application/json":
            return False
        given = _header(scope, b"authorization")
        return not (self._expected is not None and given is not None and hmac.compare_digest(given, self._expected))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for check in (self._host_ok, self._origin_ok):
            ok, why = check(scope)
            if not ok:
                await error_response(403, "forbidden", why)(scope, receive, send)
                return
        if self._plain_change(scope):
            why = (
                f"{scope.get('method')} needs Content-Type: application/json (or the API token): forms, text/plain "
                "and body-less requests are refused, so that no web page can change anything"
            )
            await error_response(415, "unsupported_media_type", why)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frames (no message: it may hold request values)."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in reversed(frames))


class CatchAll:
    """An unexpected exception becomes a JSON 500 and the connection stays usable.

    Starlette's own last-resort handler answers 500 and then re-raises, and uvicorn closes a
    connection whose application raised: every client with a pooled keep-alive connection then
    saw a reset after each 500. Here the exception ends with the answer (when nothing was sent
    yet; a stream that fails half-way can only be cut)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:
            if started:
                raise
            log.error(
                "unhandled error in api request",
                method=scope.get("method"),
                path=_redacted(scope.get("path", "")),
                kind=type(e).__name__,
                at=_where(e),
            )
            await error_response(500, "internal", "internal error (see the daemon log)")(scope, receive, send)
