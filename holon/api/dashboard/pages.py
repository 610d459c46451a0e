"""The dashboard's pages (``GET``, HTML) and its way in: ``/login``, ``/logout``, ``POST /v1/dashboard/login``.

Deep-linkable: ``/`` (and ``/agents``) is the agents page, ``/agents/{name}`` an agent live. A page
asked for without a session goes to ``/login?next=<path>``, which comes back to it afterwards.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field

from holon.api.agents import AllQ
from holon.api.dashboard.render import render, render_page
from holon.api.dashboard.security import PageSession, WriteSession, cookie_name
from holon.api.dashboard.sessions import SESSION_TTL_S, Session, Sessions
from holon.api.dashboard.views import agent_detail, agent_rows, pending_proposals
from holon.api.errors import error_response
from holon.api.port import DaemonPort
from holon.errors import NotFoundError, UsageError

__all__ = ["LoginCode", "local_path", "login_router", "page", "pages_router"]


MAX_ROWS_ASKED = 200
"""At most this many agents' rows per partial refresh (the page asks for the whole table beyond)."""
AgentsQ = Annotated[list[str] | None, Query(max_length=MAX_ROWS_ASKED + 1)]


class LoginIn(BaseModel):
    token: str = Field(min_length=1, max_length=1_000)
    next: str = Field("/", max_length=2_000)


class LoginCode(BaseModel):
    """A one-time login for the dashboard: open ``path`` on the daemon's URL within two minutes."""

    code: str
    path: str


def local_path(value: str | None) -> str:
    """``value`` when it is a path on this daemon (``/x``, not ``//host`` or a URL), else ``/``: a
    login never sends the browser elsewhere (an open redirect), nor back to itself (a loop)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/login")) or "\\" in value:
        return "/"
    return value if value.isprintable() else "/"


def with_session(response: Response, request: Request, session: Session) -> Response:
    """``response`` setting the session cookie: HttpOnly (no script reads it), SameSite=Strict (no
    other site's page or link sends it), Secure behind https."""
    response.set_cookie(
        cookie_name(request), session.session_id, max_age=int(SESSION_TTL_S), path="/", httponly=True,
        samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip
    return response


def page(request: Request, session: Session, template: str, **values: Any) -> Response:  # Any: template values
    """A whole dashboard page: ``template`` with the session's CSRF token and the proposals badge."""
    port: DaemonPort = request.app.state.port
    response = render_page(template, csrf=session.csrf, proposals=pending_proposals(port), **values)
    new = getattr(request.state, "new_session", None)
    return with_session(response, request, new) if new is not None else response


def pages_router(port: DaemonPort, sessions: Sessions, token: str | None) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/")
    @r.get("/agents")
    async def agents_page(request: Request, session: PageSession, all: AllQ = False) -> Response:
        """Every agent; holon's own (``holon diagnose``'s) too with ``?all=true``."""
        rows = agent_rows(port, everything=all)
        return page(request, session, "agents.html", page="agents", rows=rows, everything=all)

    @r.get("/ui/fragments/agents")
    async def agents_fragment(session: PageSession, all: AllQ = False, agent: AgentsQ = None) -> Response:
        """The agents table's body alone, for the page's live refresh; with ``agent`` (repeated: ids
        or names), only those agents' rows and the rows of the agents whose budget they spend (a
        child's turn changes its owner's "Today"), for the refresh of the rows whose events arrived."""
        if agent is not None and len(agent) > MAX_ROWS_ASKED:
            raise UsageError(f"at most {MAX_ROWS_ASKED} agents per refresh, got {len(agent)}")
        rows = agent_rows(port, everything=all, names=None if agent is None else set(agent))
        return Response(render("agent_rows.html", rows=rows, partial=agent is not None), media_type="text/html")

    @r.get("/agents/{agent}")
    async def agent_page(request: Request, agent: str, session: PageSession) -> Response:
        try:
            detail = agent_detail(port, agent)
        except NotFoundError as e:  # a stale link or a deleted agent: a page, not a JSON error
            return page(request, session, "missing.html", page="missing", message=e.message, status_code=404)
        return page(request, session, "agent.html", page="agent", d=detail)

    @r.get("/ui/fragments/agents/{agent}")
    async def agent_fragment(agent: str, session: PageSession) -> Response:
        """The agent page's side panels alone (state, working memory, work, waits, timers)."""
        return Response(render("agent_side.html", d=agent_detail(port, agent)), media_type="text/html")

    @r.get("/login")
    async def login_page(
        request: Request,
        code: Annotated[str | None, Query(max_length=200)] = None,
        next: Annotated[str | None, Query(max_length=2_000)] = None,
    ) -> Response:
        """With a valid one-time ``code``: a session, and on to ``next``. Else the token form."""
        target = local_path(next)
        if code is not None:
            session = sessions.redeem(code)
            if session is not None:
                return with_session(RedirectResponse(target, status_code=303), request, session)
        if token is None:  # nothing to prove: the page itself opens a session
            return RedirectResponse(target, status_code=303)
        error = "That login link was used or has expired: run 'holon dashboard' again." if code else ""
        return render_page("login.html", page="login", csrf="", proposals=0, next=target, error=error,
                           status_code=401 if code else 200)  # fmt: skip

    @r.post("/login")
    async def login(request: Request, body: LoginIn) -> Response:
        """The token typed into the login page (a browser on another machine) opens a session."""
        if token is not None and not hmac.compare_digest(body.token.strip().encode(), token.encode()):
            return error_response(401, "unauthorized", "wrong token (see <home>/api.token or [api] token_env)")
        response = Response(status_code=204)
        response.headers["Location"] = local_path(body.next)
        return with_session(response, request, sessions.open())

    @r.post("/logout")
    async def logout(request: Request, session: WriteSession) -> Response:
        sessions.close(session.session_id)
        response = Response(status_code=204)
        response.delete_cookie(cookie_name(request), path="/", httponly=True, samesite="strict")
        return response

    return r


def login_router(sessions: Sessions) -> APIRouter:
    """``POST /v1/dashboard/login``: an API call (bearer token) that mints a one-time login link."""
    r = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])

    @r.post("/login", response_model=LoginCode)
    async def new_login() -> LoginCode:
        """A one-time code for the dashboard (``holon dashboard --url``): ``GET <path>`` opens a
        session once, within two minutes."""
        code = sessions.new_code()
        return LoginCode(code=code, path=f"/login?code={code}")

    return r
