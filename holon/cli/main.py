"""Entry point of the ``holon`` command: the root app, global options and error handling.

A ``HolonError`` becomes one line on stderr (``holon: error: ...``) and its exit code; nothing a
user types produces a traceback.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from holon import __version__
from holon.cli import (
    agent_cmd,
    bench_cmd,
    chat_cmd,
    config_cmd,
    context_cmd,
    daemon_cmd,
    dashboard_cmd,
    diagnose_cmd,
    ledger_cmd,
    mcp_cmd,
    memory_cmd,
    model_cmd,
    proposals_cmd,
    run_cmd,
    secrets_cmd,
    storage_cmd,
    trace_cmd,
)
from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit
from holon.errors import HolonError
from holon.paths import private_umask

if TYPE_CHECKING:  # checked against the typer installed; both classes offer format_message and exit_code
    from typer import TyperException as _CliError
else:
    try:  # typer >= 0.2x vendors click: its usage errors derive from TyperException, not click's.
        from typer import TyperException as _CliError
    except ImportError:  # pragma: no cover - older typer raises click's own exceptions
        from click import ClickException as _CliError

__all__ = ["app", "main", "run"]

app = typer.Typer(
    name="holon",
    help="holon: a long-lived agent runtime on an append-only ledger.",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
app.add_typer(agent_cmd.app, name="agent")
app.add_typer(ledger_cmd.app, name="ledger")
app.add_typer(bench_cmd.app, name="bench")
app.add_typer(context_cmd.scenario_app, name="scenario")
app.add_typer(context_cmd.context_app, name="context")
app.add_typer(memory_cmd.app, name="memory")
app.add_typer(daemon_cmd.app, name="daemon")
app.add_typer(proposals_cmd.app, name="proposals")
app.add_typer(trace_cmd.app, name="trace")
app.add_typer(model_cmd.app, name="model")
app.add_typer(secrets_cmd.app, name="secrets")
app.add_typer(config_cmd.app, name="config")
app.add_typer(storage_cmd.app, name="storage")
app.command("mcp")(mcp_cmd.mcp)
app.command("diagnose")(diagnose_cmd.diagnose)
app.command("serve")(daemon_cmd.serve)
app.command("dashboard")(dashboard_cmd.dashboard)
app.command("run")(run_cmd.run)
app.command("chat")(chat_cmd.chat)
app.command("transcript")(run_cmd.transcript)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"holon {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    ctx.obj = {"home": home, "json": json_out}


@app.command()
def init(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Create a holon home: database, config file, logs and agents folders (idempotent)."""
    from holon.runtime.home import init_home

    c = ctx_of(ctx, home, json_out)
    result = init_home(c.paths)
    verb = "created" if result.created else "already initialised"
    emit(
        c,
        {"home": result.home, "db": result.db, "config": result.config, "created": result.created},
        f"holon home {verb} at {result.home}\n  database: {result.db}\n  config:   {result.config}",
    )


def _log_error(e: HolonError) -> None:
    """Record a command's failure in the home's log when logging was configured for it."""
    import logging

    if logging.getLogger().handlers:
        from holon.logs import get_logger

        # The log file only: stderr already has it as the ``holon: error:`` line.
        get_logger("holon.cli").warning("command.failed", error=str(e), kind=type(e).__name__, file_only=True)


def _foreign(e: Exception) -> HolonError | None:
    """A foreign exception from the user's files as a one-line error: a damaged database (exit 5),
    a file or directory that cannot be read or written (exit 1). ``None``: a bug, re-raised."""
    if isinstance(e, OSError):
        where = f": {e.filename}" if e.filename else ""
        return HolonError(f"{e.strerror or e}{where}")
    if type(e).__module__.split(".")[0] in ("sqlite3", "sqlalchemy", "psycopg"):
        from holon.ledger.engine import translate

        return translate(e)
    return None


def main(argv: list[str] | None = None) -> int:
    private_umask()  # every file holon creates is the owner's alone (RFC 0001, "Private by default")
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="holon")
    except HolonError as e:
        sys.stderr.write(f"holon: error: {e}\n")
        _log_error(e)
        return e.exit_code
    except typer.Abort:
        sys.stderr.write("holon: aborted\n")
        return 130
    except _CliError as e:
        show = getattr(e, "show", None)
        if show is not None:
            show()
        else:
            sys.stderr.write(f"holon: error: {e.format_message()}\n")
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        err = _foreign(e)
        if err is None:
            raise
        sys.stderr.write(f"holon: error: {err}\n")
        return err.exit_code
    return rv if isinstance(rv, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
