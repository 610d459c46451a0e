"""The operator's dashboard, served by the daemon at ``/`` beside the API (RFC 0009).

Server-rendered pages (Jinja2, ``render``) over the same ``DaemonPort`` as the API (``views``),
one small script and one stylesheet shipped in the package (``static/``), live updates by
server-sent events from the ledger (``actions``). Who may see and change what: ``security`` and
``sessions``. ``install_dashboard`` adds it all to the API's app.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from holon.api.dashboard.actions import actions_router
from holon.api.dashboard.context_page import context_router
from holon.api.dashboard.ledger_page import ledger_router
from holon.api.dashboard.memory_page import memory_router
from holon.api.dashboard.pages import local_path, login_router, pages_router
from holon.api.dashboard.proposals_page import proposals_router
from holon.api.dashboard.security import DashboardHeaders, Forbidden, LoginRequired, is_dashboard_path
from holon.api.dashboard.sessions import Sessions
from holon.api.dashboard.traces_page import traces_router
from holon.api.errors import error_response
from holon.api.port import DaemonPort

__all__ = ["STATIC_DIR", "Sessions", "install_dashboard", "is_dashboard_path"]

STATIC_DIR = Path(__file__).parent / "static"


def install_dashboard(app: FastAPI, port: DaemonPort, *, token: str | None, sessions: Sessions | None = None) -> None:
    """Serve the dashboard from ``app``: pages, actions, streams, static files, headers, login.

    ``token``: the API's token (``None``: an open API, so the dashboard needs no login either).
    Call before the API's guards are added (they must stay outermost)."""
    sessions = sessions or Sessions()
    app.state.dashboard_sessions = sessions
    app.state.dashboard_token = token
    app.include_router(login_router(sessions))
    app.include_router(pages_router(port, sessions, token))
    app.include_router(actions_router(port))
    app.include_router(ledger_router(port))
    app.include_router(context_router(port))
    app.include_router(memory_router(port))
    app.include_router(traces_router(port))
    app.include_router(proposals_router(port))
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, exc: LoginRequired) -> Response:
        if request.url.path.startswith("/ui/"):
            return error_response(401, "unauthorized", "no dashboard session: log in again (GET /login)")
        return RedirectResponse(f"/login?next={quote(local_path(exc.next_path))}", status_code=303)

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> Response:
        return error_response(403, "forbidden", str(exc))

    app.add_middleware(DashboardHeaders)
