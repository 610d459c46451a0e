"""``/docs``: Swagger UI for the API, served offline from the installed package (RFC 0005, "Documentation").

FastAPI's own docs page loads Swagger UI from a CDN, which a daemon without internet (or a
careful operator) cannot use. The Swagger UI files (JavaScript, CSS, favicon) come from the
``fastapi-offline`` package's ``static`` folder, found without importing it, and are served under
``/docs/static``; the page is FastAPI's ``get_swagger_ui_html`` pointed at them, with the online
validator off, so the page makes no request beyond the daemon.

The page, its static files and ``/v1/openapi.json`` are public read-only pages (``GET`` only; see
``guard.is_public``): a browser cannot send a bearer header when it opens a URL, and they say
nothing about agents (the API's shape is in the source anyway). ``BrowserGuard`` still refuses
them to foreign ``Host``s. Every call made from the page needs the token: the OpenAPI document
declares the bearer scheme, so Swagger UI's "Authorize" button takes it (``cat ~/.holon/api.token``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.staticfiles import StaticFiles

from holon.api.errors import error_response
from holon.errors import ConfigError

__all__ = ["DOCS_PATH", "STATIC_PATH", "install_docs", "swagger_static_dir"]

DOCS_PATH = "/docs"
STATIC_PATH = "/docs/static"


def swagger_static_dir() -> Path:
    """The folder with ``swagger-ui-bundle.js``, ``swagger-ui.css`` and ``favicon.png``."""
    spec = importlib.util.find_spec("fastapi_offline")
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        static = Path(folder) / "static"
        if (static / "swagger-ui-bundle.js").is_file():
            return static
    raise ConfigError("the Swagger UI files are missing: reinstall holon (it needs the fastapi-offline package)")


def _with_bearer(app: FastAPI) -> Any:
    """``app.openapi`` plus the bearer scheme every route but health and hooks requires."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes["bearer"] = {
                "type": "http",
                "scheme": "bearer",
                "description": "The daemon's token: <home>/api.token, or the [api] token_env variable.",
            }
            schema["security"] = [{"bearer": []}]
            for path, operations in schema.get("paths", {}).items():
                if path == "/v1/health" or path.startswith("/v1/hooks/"):
                    for operation in operations.values():
                        operation["security"] = []  # public: health says nothing, a hook's path is its capability
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and its static files from this machine. Without the files (a broken
    install) the daemon still runs and ``/docs`` answers 503 saying what is missing."""
    app.openapi = _with_bearer(app)  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    try:
        static = swagger_static_dir()
    except ConfigError as e:
        missing = e.message

        @app.get(DOCS_PATH, include_in_schema=False)
        async def no_docs() -> JSONResponse:
            return error_response(503, "internal", f"{missing}; the API itself works (/v1/openapi.json)")

        return
    app.mount(STATIC_PATH, StaticFiles(directory=static), name="docs-static")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/v1/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
        )
