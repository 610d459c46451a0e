"""Can the API listen where it is asked to? Checked before the daemon's slow start-up.

Stdlib only (no uvicorn, no FastAPI), so that ``holon serve`` and ``holon daemon start`` refuse a
busy port, or listening off loopback without a token, within a second of being run.
``holon.api.server`` re-exports these.
"""

from __future__ import annotations

import ipaddress
import socket

from holon.errors import UsageError

__all__ = ["check_bind", "check_port", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); any other name is not."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token (the one check, for ``holon serve`` too)."""
    if not is_loopback(host) and not token:
        raise UsageError(
            f"refusing to listen on {host} without a token: anyone who can reach it could control your "
            "agents. Put the token in an environment variable and name it in [api] token_env (or "
            "HOLON_API_TOKEN_ENV), or listen on 127.0.0.1"
        )


def check_port(host: str, port: int) -> None:
    """Fail fast, in one line, when ``host:port`` cannot be listened on (most often: it is in use).

    Binds every address ``host`` resolves to, as asyncio's ``create_server`` (uvicorn) will, with
    ``SO_REUSEADDR`` as it sets it, and closes the sockets again. The daemon calls this before its
    slow start-up (agents, model children), so a busy port is named within a second instead of
    after the start-up as a traceback in ``daemon.out``. Port 0 (any free port) is not checked.
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as e:
        raise UsageError(f"cannot listen on {host}:{port}: the host does not resolve ({e})") from e
    for family, kind, proto, _name, addr in dict.fromkeys(infos):
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio does
                sock.bind(addr)
        except OSError as e:
            raise UsageError(_bind_error(host, port, e)) from e


def _bind_error(host: str, port: int, e: OSError) -> str:
    """One line for a failed bind: what went wrong on which address, and how to choose another port."""
    import errno

    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if e.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is already in use (another daemon or program); "
            "pick another with --port N or [api] port in holon.toml"
        )
    reason = e.strerror or str(e)
    return f"cannot listen on {where}: {reason}; pick another address with --host or [api] host, or --port N"
