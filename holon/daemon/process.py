"""Running the daemon as a process: ``serve`` in the foreground, and managing it in the background.

Files under ``<home>/run/``:

* ``daemon.pid``: the serving process's pid while it runs;
* ``daemon.json``: its state, rewritten atomically when it changes (checked every second, and at
  least every ``STATUS_MAX_AGE_S``; rebuilding it reads every agent): ``state`` (``starting``,
  ``running``, ``stopping``, ``stopped``), ``pid``, ``api`` (its URL, or ``null`` without HTTP),
  and the last ``status`` (per-agent status, ledger head, projection lag);
* ``host.lock``: the host lock (``AgentHost.start``): one process runs a home's agents.

``serve`` mounts the HTTP API (``holon.api.app.create_app``, imported lazily) on uvicorn. It refuses
to start when ``[api] token_env`` names a variable that is unset or empty (a configured token that
silently protects nothing is worse than none). Without ``token_env`` the token is the home's
``api.token`` file, made at first start (``holon.api.token``): the API always needs a token, on
loopback too (RFC 0005, "A token by default").
SIGTERM/SIGINT stop it gracefully (the daemon's lifespan ends, with ``[daemon] grace_s``), exit code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holon.config import ApiSettings, HomePaths, load_settings
from holon.daemon.ledger_check import check_ledger
from holon.errors import ConfigError, ConflictError, HolonError, HomeNotFoundError, LedgerError, UsageError
from holon.logs import get_logger
from holon.paths import open_private, private_dir, tighten_tree, write_private

__all__ = [
    "DaemonInfo",
    "Listen",
    "api_token",
    "api_url",
    "check_home",
    "check_ledger",
    "preflight",
    "read_state",
    "serve",
    "start_background",
    "stop_background",
]

log = get_logger("holon.daemon")

STATUS_MAX_AGE_S = 60.0
"""``daemon.json`` is rewritten when the daemon's status may have changed (``Daemon.status_key``),
checked every second, and at least this often (for ``uptime_s`` and evolve job counts)."""


def _run_dir(paths: HomePaths) -> Path:
    return paths.root / "run"


def state_file(paths: HomePaths) -> Path:
    return _run_dir(paths) / "daemon.json"


def pid_file(paths: HomePaths) -> Path:
    return _run_dir(paths) / "daemon.pid"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    private_dir(path.parent)
    write_private(path, json.dumps(data, sort_keys=True), fsync=False)


def api_token(api: ApiSettings) -> str | None:
    """The API token: the value of the variable ``[api] token_env`` names, stripped; ``None`` without one.

    Raises ``ConfigError`` when the variable is unset or blank: the operator asked for a token."""
    if not api.token_env:
        return None
    token = os.environ.get(api.token_env, "").strip()
    if not token:
        raise ConfigError(
            f"[api] token_env names {api.token_env}, which is unset or empty: export {api.token_env}=<token> "
            "before starting the daemon, or remove token_env"
        )
    return token


def api_url(host: str, port: int) -> str:
    """The URL clients use to reach a server listening on ``host:port``.

    A wildcard address (``0.0.0.0``, ``::``) is reached on loopback, and IPv6 hosts are bracketed."""
    connect = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host.strip("[]"), host.strip("[]"))
    return f"http://[{connect}]:{port}" if ":" in connect else f"http://{connect}:{port}"


# --- foreground --------------------------------------------------------------------------------


class _StateWriter:
    def __init__(self, paths: HomePaths, api_url: str | None) -> None:
        self.paths = paths
        self.api_url = api_url
        self.started = time.time()

    def write(self, state: str, status: dict[str, Any] | None = None) -> None:
        _write_json(
            state_file(self.paths),
            {"state": state, "pid": os.getpid(), "api": self.api_url, "started": self.started,
             "updated": time.time(), "status": status},
        )  # fmt: skip


def serve(
    paths: HomePaths, *, host: str | None = None, port: int | None = None, http: bool = True, detached: bool = False
) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT. Returns the exit code.

    ``detached``: started by ``start_background``, its stderr a file beside the log, so the log
    goes to the log file only (a foreground daemon also writes it to stderr for its supervisor,
    ``holon.logs.console_mode``)."""
    import faulthandler

    with contextlib.suppress(ValueError, OSError, AttributeError):  # stderr may be closed or not a file
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: thread stacks to stderr
    # The start-up imports some 700 modules and makes nothing that is garbage: the cyclic collector's
    # passes over that growing heap were ~8% of the start's CPU. Back on once the API listens.
    gc.disable()
    try:
        return asyncio.run(_serve(paths, host=host, port=port, http=http, service=not detached))
    finally:
        gc.enable()


@dataclass(frozen=True, slots=True)
class Listen:
    """Where the API will listen, and the operator's token (``None``: the home's ``api.token``)."""

    host: str
    port: int
    token: str | None


def preflight(paths: HomePaths, *, host: str | None, port: int | None, http: bool) -> Listen | None:
    """Everything that can refuse a start before the slow part (the runtime's imports, the ledger,
    the agents, the model children), in that order: the home (there, writable), its configuration,
    and with HTTP the token and the address. Each refusal is one ``HolonError`` line, so
    ``holon serve`` names its cause within a second, and ``holon daemon start`` too, without even
    starting a process. Returns where to listen (``None`` without HTTP)."""
    check_home(paths)
    api = load_settings(paths).api
    if not http:
        return None
    from holon.api.bind import check_bind, check_port

    listen = Listen(host or api.host, api.port if port is None else port, api_token(api))
    # Beyond this machine only with a token the operator chose (the home's file is for loopback).
    check_bind(listen.host, listen.token)
    check_port(listen.host, listen.port)  # a busy port, named now, not after the slow start-up
    return listen


async def _serve(paths: HomePaths, *, host: str | None, port: int | None, http: bool, service: bool = False) -> int:
    """``holon serve``: the checks, then the daemon's lifespan (``holon.daemon.lifespan``) with the
    HTTP server inside it, on one ``AsyncExitStack``: everything started is stopped in reverse,
    also when the start fails half-way."""
    listen = preflight(paths, host=host, port=port, http=http)
    from holon.runtime.home import open_home

    tighten_tree(paths.root)  # a home made before homes were private: 0700 directories, 0600 files
    store = open_home(paths, service=service)
    pages = check_ledger(store)  # the page walk runs in a thread, beside the imports that follow
    from holon.daemon.core import Daemon

    api = store.settings.api
    listen_host = listen.host if listen else host or api.host
    listen_port = listen.port if listen else api.port if port is None else port
    if http:
        _load_web_stack()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(store.close)
        pages.settle()  # a small ledger is walked before the daemon appends anything
        token = None
        if listen is not None:
            from holon.api.token import ensure_token

            token = listen.token or ensure_token(paths.root)
        daemon = Daemon(store)
        writer = _StateWriter(paths, api_url(listen_host, listen_port) if http else None)
        stop = asyncio.Event()  # set by SIGTERM/SIGINT, also during start-up (then we stop right after)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        writer.write("starting")
        stack.callback(writer.write, "stopped")
        wrote_pid: list[Path] = []
        stack.callback(_unlink, wrote_pid)  # once the daemon has stopped (the stack unwinds in reverse)
        listening = asyncio.Event()  # the background imports wait for it: health first (``Warmth``)
        await stack.enter_async_context(daemon.running(warm_after=listening))
        write_private(pid_file(paths), str(os.getpid()), fsync=False)
        wrote_pid.append(pid_file(paths))
        server, server_task = None, None
        if http:
            server, server_task = _start_http(
                daemon, listen_host, listen_port, token, api.allowed_hosts, on_started=listening.set
            )
            stack.push_async_callback(_stop_http, server, server_task)
        else:
            listening.set()
        stack.push_async_callback(_cancel, asyncio.create_task(_collect_after(listening, daemon), name="daemon:gc"))
        walk = asyncio.create_task(pages.watch(stop, after=listening), name="daemon:page-check")
        stack.push_async_callback(_cancel, walk)
        await _run_until_stopped(daemon, writer, stop, server, server_task, listen_host, listen_port, listening)
        pages.raise_problem()  # a large ledger's walk found damage: stop as a refusal at start would
    return 0


async def _collect_after(listening: asyncio.Event, daemon: Any) -> None:
    """Once the API listens: what the start-up made stays for the process's life, so it goes to
    the collector's permanent generation (``gc.freeze``) and the collector comes back on. Again
    once the model library is imported (in the background, after the API listens): its objects
    (litellm's: 71k tracked objects before it, 416k after) live as long, and left in the oldest
    generation every full collection walked them all: 0.23 s here (16 ms before the import), a
    pause in whatever request allocated at that moment (``holon bench dashboard``'s p95)."""
    await listening.wait()
    gc.freeze()
    gc.enable()
    await daemon.rooms.warmth.loaded()
    gc.freeze()


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _run_until_stopped(
    daemon: Any, writer: _StateWriter, stop: asyncio.Event, server: Any, server_task: asyncio.Task[None] | None,
    listen_host: str, listen_port: int, listening: asyncio.Event,
) -> None:  # fmt: skip
    """Keep ``daemon.json`` current until SIGTERM/SIGINT (or the HTTP server dies)."""
    last_key: tuple[Any, ...] | None = None
    last_written = 0.0
    while not stop.is_set():
        if server_task is not None and server_task.done():
            raise HolonError(f"the HTTP server stopped: {server_task.exception() or 'could not listen'}")
        if server is not None and not server.started:
            # Health first: the status (a read of every agent) is written once the API listens.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    await listening.wait()
            continue
        if server is not None and listen_port == 0:
            writer.api_url = api_url(listen_host, _bound_port(server) or 0)
        state = "running"
        key = (state, writer.api_url, daemon.status_key())
        if key != last_key or time.monotonic() - last_written >= STATUS_MAX_AGE_S:
            writer.write(state, daemon.status())
            last_key, last_written = key, time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await stop.wait()
    log.info("daemon.signal", action="stopping")
    writer.write("stopping", daemon.status())


async def _stop_http(server: Any, server_task: asyncio.Task[None]) -> None:
    server.should_exit = True
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await server_task


def _unlink(paths: list[Path]) -> None:
    """Remove the files this process wrote (a failed start wrote none: a running daemon's pid
    file is not ours to remove)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_SQLITE_HEADER = b"SQLite format 3\x00"


def check_home(paths: HomePaths) -> None:
    """Refuse, in one line, a home the daemon cannot run: none there, a ``holon.db`` that is not a
    SQLite file at all, or a home it may not write to.

    Checked before anything else so the cause is named at once (and relayed by ``daemon start``),
    not found later as a permission error on some file deep in the start-up."""
    try:
        exists = paths.db.exists()
    except OSError as e:
        raise HolonError(f"cannot read the holon home {paths.root}: {e.strerror or e}") from e
    if not exists:
        from holon.runtime.home import home_exists

        if not home_exists(paths):
            raise HomeNotFoundError(f"no holon home at {paths.root} (run 'holon init' or pass --home)")
        _check_writable(paths, (paths.root, paths.logs))  # the ledger is remote (PostgreSQL)
        return
    try:
        with paths.db.open("rb") as fh:
            header = fh.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise HolonError(f"cannot read the ledger database {paths.db}: {e.strerror or e}") from e
    if header and header != _SQLITE_HEADER:  # the full check (``check_ledger``) needs the runtime
        raise LedgerError(f"the ledger database {paths.db} is not a SQLite database (damaged, or a foreign file)")
    _check_writable(paths, (paths.root, paths.logs, paths.db))


def _check_writable(paths: HomePaths, files: tuple[Path, ...]) -> None:
    for path in files:
        if path.exists() and not os.access(path, os.W_OK):
            raise HolonError(
                f"cannot write to {path}: the daemon keeps its database, log and run files in the home "
                f"{paths.root}; give your user write access to it, or pick another home with --home"
            )


def _load_web_stack() -> None:
    """Import the HTTP API's modules (FastAPI, uvicorn) before the lifespan starts, beside the
    ledger's page walk (``PageCheck``). The lifespan's background imports (the turn machinery, the
    model library, APScheduler) start only once the API listens (``warm_after``): imports in two
    threads share the GIL and wait on each other's module locks, which delayed health by seconds."""
    import holon.api.app
    import holon.api.server  # noqa: F401


def _start_http(
    daemon: Any, host: str, port: int, token: str | None, allowed_hosts: tuple[str, ...] = (),
    on_started: Any = None,
) -> tuple[Any, asyncio.Task[None]]:  # fmt: skip
    from holon.api.app import create_app
    from holon.api.server import build_server

    app = create_app(daemon, token=token, allowed_hosts=allowed_hosts + _own_name(host))
    server = build_server(app, host=host, port=port, token=token, on_started=on_started)
    return server, asyncio.create_task(server.serve(), name="daemon:http")


def _own_name(host: str) -> tuple[str, ...]:
    """A DNS name the daemon listens on is one it answers to (``Host`` check); addresses need no entry."""
    from holon.api.guard import split_host

    name = host.strip().lower()
    if not name or name == "localhost" or ":" in name or name.replace(".", "").isdigit():
        return ()
    return (name,) if split_host(name) is not None else ()


def _bound_port(server: Any) -> int | None:
    """The port a started uvicorn server listens on (what ``--port 0`` got)."""
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            return int(sock.getsockname()[1])
    return None


# --- background --------------------------------------------------------------------------------


class DaemonInfo(dict[str, Any]):
    """What ``read_state`` found: the state file plus ``running`` (the pid is alive)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child not yet reaped) counts as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def read_state(paths: HomePaths) -> DaemonInfo:
    info = DaemonInfo()
    with contextlib.suppress(OSError, ValueError):
        info.update(json.loads(state_file(paths).read_text(encoding="utf-8")))
    pid = None
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file(paths).read_text().strip())
    info["pid"] = pid if pid is not None else info.get("pid")
    info["running"] = pid is not None and _alive(pid)
    if not info["running"]:
        info["state"] = "stopped"
    return info


def _healthy(info: DaemonInfo) -> bool:
    if not info.get("running") or info.get("state") != "running":
        return False
    url = info.get("api")
    if not url:
        return True
    try:
        with urllib.request.urlopen(f"{url}/v1/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start_background(
    paths: HomePaths, *, timeout_s: float, host: str | None = None, port: int | None = None, http: bool = True
) -> DaemonInfo:
    """Start ``holon serve`` detached; wait until it reports healthy (or fail with its last words)."""
    current = read_state(paths)
    if current["running"]:
        raise ConflictError(f"a daemon is already running for {paths.root} (pid {current['pid']})")
    preflight(paths, host=host, port=port, http=http)
    private_dir(paths.logs)
    argv = [sys.executable, "-m", "holon.cli.main", "--home", str(paths.root), "serve", "--detached"]
    if host:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    if not http:
        argv.append("--no-http")
    out = os.fdopen(open_private(paths.logs / "daemon.out"), "ab")
    since = out.seek(0, os.SEEK_END)  # what this start writes begins here (the file keeps older runs)
    with contextlib.suppress(FileNotFoundError):
        state_file(paths).unlink()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    out.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _exited(proc.returncode, paths.logs / "daemon.out", since)
        info = read_state(paths)
        if info.get("pid") == proc.pid and _healthy(info):
            return info
        time.sleep(0.1)
    proc.terminate()
    raise HolonError(
        f"the daemon did not report healthy within {timeout_s} s: {_tail(paths.logs / 'daemon.out', since=since)}"
    )


def _exited(code: int, out: Path, since: int = 0) -> HolonError:
    """The error of a daemon that exited at start: its own one-line error (``holon: error: ...``,
    what ``holon serve`` prints for every refusal) with its exit code, else its last words."""
    prefix = "holon: error: "
    last = _tail(out, 1, since=since)
    if last.startswith(prefix):
        for cls in (LedgerError, ConfigError, UsageError, HomeNotFoundError, ConflictError):
            if code == cls.exit_code:
                return cls(last[len(prefix) :])
        err = HolonError(last[len(prefix) :])
        err.exit_code = code if code > 0 else 1
        return err
    return HolonError(f"the daemon exited at start (code {code}): {_tail(out, since=since)}")


def _tail(path: Path, lines: int = 5, *, since: int = 0) -> str:
    """The last ``lines`` lines of ``path`` written after byte ``since``, joined on one line."""
    try:
        with path.open("rb") as fh:
            fh.seek(since)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no output)"
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:]) or "(no output)"


def stop_background(paths: HomePaths, *, timeout_s: float) -> DaemonInfo:
    """SIGTERM the daemon and wait for it to exit. ``running`` is False afterwards unless it hung."""
    info = read_state(paths)
    if not info["running"]:
        return info
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    after = read_state(paths)
    if _alive(pid):
        after["running"] = True
        after["state"] = "stopping"
    return after
