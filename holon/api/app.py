"""``create_app``: the HTTP control API over a ``DaemonPort`` (RFC 0005, "HTTP API").

Everything is under ``/v1``, with the OpenAPI document at ``/v1/openapi.json`` and Swagger UI at
``/docs`` (served offline, ``holon.api.docs``), the operator's dashboard at ``/`` (``holon.api.dashboard``,
RFC 0009); ``/v1/chat/completions`` and ``/v1/models`` speak
OpenAI's protocol (``holon.api.openai_compat``). Requests pass
``BrowserGuard`` (Host, Origin, no "simple" cross-site changes), ``BearerAuth`` (when a token is
configured) and then ``BodyLimit`` before any route (``holon.api.guard``); errors are
``{"error": {"code", "message"}}`` (see ``holon.api.errors``; the OpenAI routes use OpenAI's shape). Routes run on the daemon's event
loop (``async def``): the store is synchronous SQLite used from that loop only, like the host.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from holon import __version__
from holon.api.agents import agent_router
from holon.api.dashboard import install_dashboard, is_dashboard_path
from holon.api.docs import install_docs
from holon.api.errors import install_error_handlers
from holon.api.events import home_events_router
from holon.api.evolve import evolve_router
from holon.api.guard import BearerAuth, BodyLimit, BrowserGuard, CatchAll
from holon.api.ledger import ledger_router
from holon.api.messages import messages_router
from holon.api.models import ErrorBody, Health
from holon.api.openai_compat import openai_router
from holon.api.port import DaemonPort
from holon.api.stream import events_router
from holon.api.turns import turns_router
from holon.errors import UsageError

__all__ = ["create_app"]

_ERRORS: dict[int | str, dict[str, Any]] = {  # Any: FastAPI's own type for OpenAPI response entries
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "bad request"),
        (401, "missing or wrong bearer token"),
        (403, "a Host or Origin that is not this daemon's (DNS rebinding, another web page)"),
        (404, "no such agent, event or path"),
        (409, "conflict"),
        (413, "request body too large"),
        (415, "a state change that is neither JSON nor carries the token (a form, text/plain)"),
        (422, "invalid request"),
    )
}


def create_app(
    port: DaemonPort, *, token: str | None = None, max_body_bytes: int = 1_000_000, allowed_hosts: tuple[str, ...] = ()
) -> FastAPI:
    """The API app for ``port``. With ``token``, every route but health and hooks needs ``Bearer <token>``
    (the daemon always passes one: RFC 0005, "A token by default"). Requests a web page could send
    are refused whatever the token (``guard.BrowserGuard``); ``allowed_hosts`` are further names
    the daemon may be reached by (``[api] allowed_hosts``)."""
    if token is not None and not token.strip():
        raise UsageError("the API token is empty; set a real token or none")
    if max_body_bytes < 1:
        raise UsageError(f"max_body_bytes must be positive, got {max_body_bytes}")
    app = FastAPI(
        title="holon",
        version=__version__,
        description="Control API of the holon daemon: agents, inputs, event streams, state, memory, ledger.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        responses=_ERRORS,
    )
    install_error_handlers(app)

    @app.get("/v1/health", response_model=Health, tags=["daemon"])
    async def health() -> Health:
        """Liveness; needs no token and says nothing about agents."""
        return Health(version=__version__)

    app.include_router(agent_router(port))
    app.include_router(events_router(port))
    app.include_router(turns_router(port))
    app.include_router(ledger_router(port))
    app.include_router(evolve_router(port))
    app.include_router(messages_router(port))
    app.include_router(openai_router(port))
    app.include_router(home_events_router(port))
    install_docs(app)
    install_dashboard(app, port, token=token)
    # Added last = outermost: refuse browsers, then authenticate, so a refused body is never read;
    # CatchAll outermost of all, so nothing unexpected resets the connection.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if token is not None:
        app.add_middleware(BearerAuth, token=token, exempt=is_dashboard_path)
    app.add_middleware(BrowserGuard, token=token, allowed_hosts=allowed_hosts)
    app.add_middleware(CatchAll)
    app.state.port = port
    return app
