"""Who may see and change what on the dashboard: its paths, the session cookie, CSRF, headers.

The API's guards run first for every path (``holon.api.guard``): ``BrowserGuard`` refuses a foreign
``Host`` (DNS rebinding) or ``Origin``, and any state-changing request that is not JSON, so a form
or a body-less POST from another site never arrives. ``BearerAuth`` leaves the dashboard's paths
(``is_dashboard_path``) to this module:

* a page needs a session (``page_session``): without one a browser is sent to ``/login``; when the
  daemon runs without a token (an embedding's ``create_app(token=None)``, where the API itself is
  open) a session is opened on first sight, since there is nothing to prove;
* a change needs the session *and* its CSRF token in ``X-Holon-CSRF`` (``write_session``): the
  cookie alone never authorises one.

``DashboardHeaders`` adds to every dashboard response a strict Content-Security-Policy (scripts,
styles and connections from this origin only, no inline script or style, no frames, no plugins),
``nosniff``, ``no-referrer`` (a login code in a URL never leaks) and ``no-store``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from holon.api.dashboard.sessions import Session, Sessions

__all__ = [
    "CSP",
    "CSRF_HEADER",
    "DashboardHeaders",
    "Forbidden",
    "LoginRequired",
    "PageSession",
    "WriteSession",
    "cookie_name",
    "is_dashboard_path",
    "page_session",
    "write_session",
]

CSRF_HEADER = "X-Holon-CSRF"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
_PAGES = ("/", "/login", "/logout", "/agents", "/ledger", "/proposals", "/traces")
_PREFIXES = ("/agents/", "/ledger/", "/ui/")


def is_dashboard_path(path: str) -> bool:
    """The dashboard's pages, actions, streams and static files (everything else is the API's)."""
    return path in _PAGES or path.startswith(_PREFIXES)


def cookie_name(request: Request) -> str:
    """The session cookie's name, with the port: cookies are per host, not per port, so two daemons
    on one machine must not overwrite each other's session."""
    server = request.scope.get("server")
    return f"holon_session_{server[1]}" if server else "holon_session"


class LoginRequired(Exception):
    """A page was asked for without a session: the browser goes to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class Forbidden(Exception):
    """A dashboard change without a session or without its CSRF token (answered 403)."""


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.dashboard_sessions
    return sessions


def page_session(request: Request) -> Session:
    """The browser's session; ``LoginRequired`` without one (a new one when there is no token)."""
    sessions = _sessions(request)
    session = sessions.get(request.cookies.get(cookie_name(request)))
    if session is not None:
        return session
    if request.app.state.dashboard_token is None:
        session = sessions.open()
        request.state.new_session = session  # the page's response sets the cookie
        return session
    raise LoginRequired(request.url.path)


def write_session(
    request: Request, csrf: Annotated[str | None, Header(alias=CSRF_HEADER, max_length=200)] = None
) -> Session:
    """The session of a change: the cookie's session and its CSRF token, both, or ``Forbidden``."""
    session = _sessions(request).get(request.cookies.get(cookie_name(request)))
    if session is None:
        raise Forbidden("no dashboard session: log in again (GET /login)")
    if not Sessions.csrf_ok(session, csrf):
        raise Forbidden(f"missing or wrong {CSRF_HEADER} header: the dashboard's changes carry the page's CSRF token")
    return session


PageSession = Annotated[Session, Depends(page_session)]
WriteSession = Annotated[Session, Depends(write_session)]


class DashboardHeaders:
    """Security headers on every dashboard response (plain ASGI: streams are never buffered)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_dashboard_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in _HEADERS if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
