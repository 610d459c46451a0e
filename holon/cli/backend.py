"""The CLI's one way in: the home's running daemon over HTTP when there is one, else in-process.

Only one process should run a home's agents, and the daemon owns the live state (running turns,
timers, hook tokens, its wake-ups). So while a daemon runs, every command that changes or reads an
agent asks it (``holon.repl.client.ApiClient``, the same client as the REPL): its changes are
seen and acted on at once, and ``holon run`` is a turn the daemon runs. Without a daemon the
command opens the home and calls the same functions in this process, as before.

``daemon(c)`` decides: a daemon whose pid is alive and that serves the HTTP API (its URL is in
``<home>/run/daemon.json``) is used, with the token a client of the home sends
(``holon.api.token.client_token``: the ``[api] token_env`` variable, else ``<home>/api.token``).
A daemon started with ``--no-http`` cannot be asked: commands run in-process, as before (``holon
run`` then refuses, since that daemon holds the agents). The command renders the same output from
either source; errors from the daemon arrive as the same ``HolonError`` classes (same exit codes).

Ledger-only reads (``holon ledger``, ``holon trace``) stay direct: SQLite in WAL mode lets any
number of readers work beside the daemon, and they change nothing the daemon must know about.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from holon.cli.common import Ctx

if TYPE_CHECKING:
    from holon.repl.client import ApiClient

__all__ = ["daemon", "daemon_url"]


STARTING_WAIT_S = 10.0
"""How long a command waits for a daemon that is still starting before it asks it anyway."""


def daemon_url(c: Ctx) -> str | None:
    """The API URL of the daemon running for the home, or ``None`` (none runs, or it serves no HTTP).

    A daemon still starting is waited for (up to ``STARTING_WAIT_S``): its API answers once it runs."""
    import time

    from holon.daemon.process import read_state

    if not (c.paths.root / "run" / "daemon.pid").exists():
        return None  # the common case without a daemon costs one stat
    info = read_state(c.paths)
    deadline = time.monotonic() + STARTING_WAIT_S
    while info.get("running") and info.get("state") == "starting" and time.monotonic() < deadline:
        time.sleep(0.05)
        info = read_state(c.paths)
    url = info.get("api") if info.get("running") else None
    return str(url) if url else None


@contextlib.contextmanager
def daemon(c: Ctx, *, timeout_s: float = 30.0) -> Iterator[ApiClient | None]:
    """A client of the home's running daemon, or ``None`` when the command should run in-process."""
    url = daemon_url(c)
    if url is None:
        yield None
        return
    from holon.api.token import client_token
    from holon.config import load_settings
    from holon.repl.client import ApiClient, DaemonUnreachable

    token_env = load_settings(c.paths).api.token_env if c.paths.config.exists() else None
    with ApiClient(url, token=client_token(c.paths.root, token_env), timeout_s=timeout_s) as client:
        try:
            yield client
        except DaemonUnreachable as e:
            raise DaemonUnreachable(
                f"{e}; the daemon for {c.paths.root} may be stopping or hung: see 'holon daemon status'"
            ) from e
