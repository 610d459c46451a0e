"""Jinja2, in one module: the dashboard's templates, rendered with autoescape on.

Every value a template shows is escaped (``autoescape`` for all templates, whatever their name), so
text from the ledger (an operator's message, a model's reply, a tool's output) can never become
markup: a message holding ``<script>`` shows as those characters. ``StrictUndefined`` turns a
misspelt name into an error in the tests instead of an empty cell.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from starlette.responses import HTMLResponse

from holon import __version__

if TYPE_CHECKING:
    from jinja2 import Environment

__all__ = ["render", "render_page"]


@functools.cache
def _env() -> Environment:
    """The templates' environment, made on the first page: Jinja2's import (~60 ms) stays out of
    the daemon's start-up, which imports the API before it answers health."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("holon.api.dashboard", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return env


def render(template: str, **values: Any) -> str:  # Any: whatever the template shows
    """``template`` rendered with ``values`` (escaped)."""
    return _env().get_template(template).render(version=__version__, **values)


def render_page(template: str, *, status_code: int = 200, **values: Any) -> HTMLResponse:
    """A whole page as an HTML response."""
    return HTMLResponse(render(template, **values), status_code=status_code)
