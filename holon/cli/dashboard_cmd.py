"""``holon dashboard``: open the daemon's dashboard in a browser, logged in (RFC 0009).

The dashboard is served by the running daemon (``holon serve``) at its API URL. The API needs a
token, and a browser cannot send one when it opens a URL, so this command asks the daemon for a
one-time login code with the home's token (``POST /v1/dashboard/login``) and opens, or with
``--url`` prints, ``<url>/login?code=...``: the code opens one session within two minutes and is
then spent, so the printed URL is no lasting secret.
"""

from __future__ import annotations

from typing import Annotated

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit

__all__ = ["dashboard"]


def dashboard(
    ctx: typer.Context,
    url_only: Annotated[
        bool, typer.Option("--url", help="Only print the URL to open (with a one-time login code).")
    ] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Open the operator's dashboard of the running daemon in your browser."""
    from holon.cli.backend import daemon, daemon_url
    from holon.errors import UsageError

    c = ctx_of(ctx, home, json_out)
    base = daemon_url(c)
    if base is None:
        raise UsageError(
            f"no daemon serves the home {c.paths.root}: start one with 'holon serve' (or 'holon daemon start'), "
            "then run 'holon dashboard' again"
        )
    with daemon(c) as client:
        assert client is not None  # a daemon URL was found just above
        url = base.rstrip("/") + client.dashboard_login()
    if url_only:
        emit(c, {"url": url}, url)
        return
    import webbrowser

    opened = webbrowser.open(url)
    if opened:
        emit(c, {"url": url, "opened": True}, f"opened the dashboard: {url}")
    else:
        emit(
            c,
            {"url": url, "opened": False},
            f"no browser found here; open this URL (valid once, for two minutes):\n{url}",
        )
