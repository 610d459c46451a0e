"""Serve the API with uvicorn inside the caller's running event loop (the daemon's).

``serve`` awaits ``uvicorn.Server.serve()``, so the API shares the daemon's loop and store; it
returns when ``server.should_exit`` is set (the daemon's shutdown) or the task is cancelled.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI

from holon.api.bind import check_bind, check_port, is_loopback
from holon.errors import UsageError

__all__ = [
    "BACKLOG",
    "KEEP_ALIVE_S",
    "build_server",
    "check_bind",
    "check_port",
    "free_port",
    "is_loopback",
    "serve",
]


KEEP_ALIVE_S = 65
"""How long an idle keep-alive connection stays open. Longer than any client pool keeps one
(httpx: 5 s, which was also uvicorn's default): with equal timeouts the server closes a connection
just as a client sends on it, and that request fails with a reset it cannot safely retry."""

BACKLOG = 4096
"""Connections the kernel queues before the daemon accepts them (a burst of hundreds of clients)."""


class _Server(uvicorn.Server):
    on_started: Callable[[], None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The daemon owns SIGTERM/SIGINT and stops the server through ``should_exit``.
        yield

    async def startup(self, sockets: Any = None) -> None:  # Any: uvicorn's own (untyped) parameter
        await super().startup(sockets=sockets)
        if self.started and self.on_started is not None:
            self.on_started()


def build_server(
    app: FastAPI, *, host: str, port: int, token: str | None, log_level: str = "warning",
    on_started: Callable[[], None] | None = None,
) -> uvicorn.Server:  # fmt: skip
    """A uvicorn server for ``app`` on ``host:port`` (checked with ``check_bind``); not started.

    Signal handlers stay with the daemon (uvicorn's own are disabled), and its access log is off:
    the daemon logs through structlog. Idle connections outlive any client pool's (``KEEP_ALIVE_S``).
    ``on_started`` is called once it listens.
    """
    check_bind(host, token)
    if not 0 <= port <= 65_535:
        raise UsageError(f"API port must be 0-65535, got {port}")
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off", timeout_graceful_shutdown=2,
        timeout_keep_alive=KEEP_ALIVE_S, backlog=BACKLOG,
    )  # fmt: skip
    server = _Server(config)
    server.on_started = on_started
    return server


async def serve(app: FastAPI, *, host: str, port: int, token: str | None, log_level: str = "warning") -> None:
    """Run the API until cancelled or the server is told to exit. Raises ``UsageError`` on a bad bind."""
    server = build_server(app, host=host, port=port, token=token, log_level=log_level)
    try:
        await server.serve()
    except (OSError, SystemExit) as e:
        # uvicorn logs a failed bind and calls sys.exit; never let that end the daemon.
        raise UsageError(f"cannot listen on {host}:{port} (address in use, or not this machine's)") from e
    if not server.started:
        # uvicorn reports a failed bind by logging and returning; say why in one line.
        raise UsageError(f"cannot listen on {host}:{port} (address in use, or not this machine's)")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (for tests and ``port = 0`` callers that need the number)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
