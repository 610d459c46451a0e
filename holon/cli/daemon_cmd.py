"""``holon serve`` (the daemon in the foreground) and ``holon daemon start|stop|restart|status|logs``."""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

import typer

from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit

app = typer.Typer(help="Run the daemon in the background and manage it.", no_args_is_help=True)

HostOpt = Annotated[str | None, typer.Option("--host", help="Address to listen on (default: [api] host).")]
PortOpt = Annotated[int | None, typer.Option("--port", min=0, max=65535, help="Port (default: [api] port).")]
HttpOpt = Annotated[
    bool, typer.Option("--http/--no-http", help="Serve the HTTP API (default: yes).", show_default=False)
]
InitOpt = Annotated[
    bool, typer.Option("--init", help="Create the home first when it does not exist yet (for containers).")
]
NodeOpt = Annotated[
    str | None,
    typer.Option(
        "--node",
        help="Run as node NAME of several sharing a PostgreSQL ledger (default: [node] name; RFC 0008).",
    ),
]
#: Set by ``holon daemon start`` on the daemon it detaches: its log goes to the log file only.
DetachedOpt = Annotated[bool, typer.Option("--detached", hidden=True)]


def _lag(lag: Any) -> str:
    """``evolve 0, projections 0, search 0``: each consumer's events behind the ledger head."""
    if not isinstance(lag, dict):
        return str(lag)
    return ", ".join(f"{name} {behind}" for name, behind in sorted(lag.items())) or "none"


def _settings(c: Ctx) -> Any:
    from holon.config import load_settings

    return load_settings(c.paths)


def serve(
    ctx: typer.Context,
    host: HostOpt = None,
    port: PortOpt = None,
    http: HttpOpt = True,
    init: InitOpt = False,
    node: NodeOpt = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    detached: DetachedOpt = False,
) -> None:
    """Run the daemon in the foreground: host every agent, fire timers, serve the HTTP API.

    Under systemd or Docker (stderr not a terminal) the log also goes to stderr as JSON lines.
    With ``--node NAME`` (or ``[node] name``) it is one node of several sharing a PostgreSQL
    ledger: it owns the agents whose leases it holds and shares the rest (RFC 0008)."""
    import os

    from holon.daemon.process import serve as serve_
    from holon.testing.cpuprofile import install_from_env

    install_from_env(f"node-{node}" if node else "serve")  # HOLON_CPU_PROFILE only
    if node is not None:
        os.environ["HOLON_NODE_NAME"] = node  # the setting, for this process (read with the rest)
    c = ctx_of(ctx, home, json_out)
    from holon.runtime.home import home_exists

    if init and not home_exists(c.paths):
        import sys

        from holon.runtime.home import init_home

        sys.stderr.write(f"holon: creating a new home at {init_home(c.paths).home}\n")
    _exit_now(serve_(c.paths, host=host, port=port, http=http, detached=detached))


def _exit_now(code: int) -> None:
    """End ``holon serve`` after a clean stop without the interpreter's slow teardown.

    By now the daemon has settled its turns, closed the ledger and written ``stopped``; tearing
    down the modules litellm and its kin loaded still took 1.5-2.5 s (in C, no Python frame), most
    of an idle daemon's stop. Exit handlers (a local model server's ``stop``, log handlers) still
    run, explicitly; only the teardown is skipped. Only the CLI command does this, never ``serve``.
    """
    import atexit
    import logging
    import os
    import sys

    try:
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _describe(info: dict[str, Any]) -> str:
    if not info.get("running"):
        return "daemon: not running"
    status = info.get("status") or {}
    lines = [
        f"daemon: {info.get('state')} (pid {info.get('pid')}), api: {info.get('api') or 'none'}",
    ]
    if storage_error := status.get("storage_error"):  # the database lost mid-run (RFC 0008 section 6)
        return "\n".join([*lines, f"  {storage_error} (the daemon reconnects on its own; inputs wait)"])
    lines += [
        f"  ledger head: {status.get('ledger_head')}, projection lag: {_lag(status.get('projection_lag'))}",
    ]
    if warning := (status.get("commands") or {}).get("warning"):
        lines.append(f"  WARNING: {warning}")
    evolve = status.get("evolve") or {}
    if evolve.get("enabled"):
        jobs = evolve.get("jobs") or {}
        dead = f", {jobs.get('dead')} DEAD (see status --json)" if jobs.get("dead") else ""
        lines.append(
            f"  evolve: {jobs.get('queued', 0)} queued, {jobs.get('running', 0)} running, {jobs.get('done', 0)} done{dead}; "
            f"{evolve.get('pending_proposals', 0)} proposals wait for review"
        )
    lines += _cluster_lines(status.get("cluster"))
    from holon.cli.agent_view import daemon_agent_lines

    lines += daemon_agent_lines(status.get("agents", []))
    return "\n".join(lines)


def _cluster_lines(cluster: Any) -> list[str]:
    """A node of several (RFC 0008): the nodes it sees and which node owns which agent."""
    if not isinstance(cluster, dict):
        return []
    nodes = ", ".join(
        f"{n.get('name')} ({'live' if n.get('live') else 'silent'}, {n.get('agents', 0)} agents, "
        f"pid {n.get('pid')} on {n.get('host')}, seen {n.get('seen_s_ago')} s ago)"
        for n in cluster.get("nodes") or []
    )
    lines = [
        f"  node {cluster.get('node')} (lease {cluster.get('lease_s')} s): owns {cluster.get('owned', 0)} agents; "
        f"nodes: {nodes or 'none seen yet'}"
    ]
    owners = cluster.get("owners") or []
    if owners:
        lines.append(
            "  owners: "
            + ", ".join(
                f"{o.get('agent')} -> {o.get('node')}" + ("" if o.get("live") else " (expired)") for o in owners
            )
        )
    if cluster.get("schema_error"):
        lines.append(f"  node stopped: {cluster['schema_error']}")
    if cluster.get("error"):
        lines.append(f"  node error: {cluster['error']}")
    return lines


@app.command("start")
def start(
    ctx: typer.Context,
    host: HostOpt = None,
    port: PortOpt = None,
    http: HttpOpt = True,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start the daemon in the background and wait until it is healthy."""
    from holon.daemon.process import start_background

    c = ctx_of(ctx, home, json_out)
    from holon.runtime.home import home_exists

    if not home_exists(c.paths):
        from holon.errors import HomeNotFoundError

        raise HomeNotFoundError(f"no holon home at {c.paths.root} (run 'holon init' or pass --home)")
    info = start_background(c.paths, timeout_s=_settings(c).daemon.start_timeout_s, host=host, port=port, http=http)
    emit(c, dict(info), f"daemon started (pid {info['pid']}), api: {info.get('api') or 'none'}")


@app.command("stop")
def stop(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Stop the daemon (SIGTERM: running turns get the grace period) and wait for it to exit."""
    from holon.daemon.process import read_state, stop_background
    from holon.errors import HolonError

    c = ctx_of(ctx, home, json_out)
    before = read_state(c.paths)
    if not before["running"]:
        emit(c, {"stopped": False, "running": False}, "daemon: not running")
        return
    t0 = time.monotonic()
    after = stop_background(c.paths, timeout_s=_settings(c).daemon.grace_s + 15)
    if after["running"]:
        raise HolonError(f"the daemon (pid {before['pid']}) did not exit; it may still be finishing turns")
    took = round(time.monotonic() - t0, 2)
    emit(c, {"stopped": True, "running": False, "pid": before["pid"], "seconds": took},
         f"daemon stopped (pid {before['pid']}, {took} s)")  # fmt: skip


@app.command("restart")
def restart(
    ctx: typer.Context,
    host: HostOpt = None,
    port: PortOpt = None,
    http: HttpOpt = True,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop the daemon if it runs, then start it again."""
    from holon.daemon.process import start_background, stop_background
    from holon.errors import HolonError

    c = ctx_of(ctx, home, json_out)
    settings = _settings(c)
    if stop_background(c.paths, timeout_s=settings.daemon.grace_s + 15)["running"]:
        raise HolonError("the daemon did not exit; not restarting")
    info = start_background(c.paths, timeout_s=settings.daemon.start_timeout_s, host=host, port=port, http=http)
    emit(c, dict(info), f"daemon restarted (pid {info['pid']})")


@app.command("status")
def status(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", help="Also show holon's internal agents (holon diagnose's).")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show whether the daemon runs, and each agent's state. Exit code 3 when it is not running."""
    from holon.daemon.process import read_state
    from holon.runtime.status import without_internal

    c = ctx_of(ctx, home, json_out)
    info = read_state(c.paths)
    if isinstance(info.get("status"), dict):
        info["status"] = without_internal(info["status"], everything=all_)
    emit(c, dict(info), _describe(info))
    if not info["running"]:
        raise typer.Exit(3)


@app.command("install")
def install(
    ctx: typer.Context,
    user: Annotated[bool, typer.Option("--user", help="Install a systemd user unit (the only kind).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the unit instead of writing it.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a systemd user unit running ``holon serve`` for the home (~/.config/systemd/user/holon.service)."""
    import sys

    from holon.daemon.unit import NEXT_STEP, holon_command, render_unit, unit_path
    from holon.errors import HolonError, UsageError
    from holon.paths import write_private

    c = ctx_of(ctx, home, json_out)
    if not user:
        raise UsageError("holon daemon install needs --user: it installs a systemd user unit (no system units)")
    root = c.paths.root.absolute()
    unit = render_unit(holon_command(), root)
    path = unit_path()
    if dry_run:
        sys.stdout.write(unit)
        return
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, unit)
    except OSError as e:
        raise HolonError(f"cannot write {path}: {e.strerror or e}") from e
    lines = [f"{'replaced' if existed else 'wrote'} {path} (home: {root})", f"next: {NEXT_STEP}",
             "to keep it running while you are logged out: loginctl enable-linger $USER"]  # fmt: skip
    from holon.runtime.home import home_exists

    if not home_exists(c.paths):
        lines.append(f"note: there is no holon home at {root} yet: run 'holon init --home {root}' first")
    emit(c, {"unit": str(path), "home": str(root), "replaced": existed, "next": NEXT_STEP}, "\n".join(lines))


@app.command("logs")
def logs(
    ctx: typer.Context,
    lines: Annotated[int, typer.Option("-n", "--lines", min=0, help="How many of the last lines to show.")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    home: HomeOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="The raw JSON lines, as in the file.")] = False,
) -> None:
    """Print the end of ``<home>/logs/holon.log`` and of ``daemon.out`` (the process's own output,
    where a crash's traceback goes), and follow both. One readable line per record (time, level,
    event, key=value; colour on a terminal); --json for the raw lines."""
    import sys

    from holon.cli.logview import pretty_line

    c = ctx_of(ctx, home, False)
    raw = json_out or bool((ctx.find_root().obj or {}).get("json"))
    colour = not raw and sys.stdout.isatty()
    show = (lambda line: line) if raw else (lambda line: pretty_line(line, colour=colour))
    paths = [p for p in (c.paths.logs / "holon.log", c.paths.logs / "daemon.out") if p.exists()]
    if not paths:
        sys.stdout.write(f"no log yet in {c.paths.logs}\n")
        return
    files = [p.open(encoding="utf-8", errors="replace") for p in paths]
    try:
        for path, fh in zip(paths, files, strict=True):
            _print_tail(fh, lines, f"==> {path} <==\n" if len(paths) > 1 else None, show)
        while follow:
            if not _print_new(files, show):
                time.sleep(0.2)
    finally:
        for fh in files:
            fh.close()


def _print_tail(fh: Any, lines: int, header: str | None, show: Any) -> None:
    """The last ``lines`` lines of an open file (leaving it at its end), under ``header``."""
    import collections
    import sys

    tail = collections.deque(fh, maxlen=lines)
    if header is not None:
        sys.stdout.write(header)
    sys.stdout.writelines(show(line) for line in tail)
    sys.stdout.flush()


#: The start of a line ``--follow`` read before its writer finished it, per open file.
_PARTIAL: dict[int, str] = {}


def _print_new(files: list[Any], show: Any) -> bool:
    """Print whatever was appended to any of ``files``; False when nothing was."""
    import sys

    printed = False
    for fh in files:
        while line := fh.readline():
            if not line.endswith("\n"):  # a line still being written: wait for its end
                _PARTIAL[id(fh)] = _PARTIAL.get(id(fh), "") + line
                break
            sys.stdout.write(show(_PARTIAL.pop(id(fh), "") + line))
            printed = True
    sys.stdout.flush()
    return printed
