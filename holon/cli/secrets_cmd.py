"""``holon secrets set|list|unset``: API keys kept in the home, so the daemon needs no shell's.

A value is read from a hidden prompt (a terminal) or from stdin (a pipe), never from the command
line, where it would land in the shell's history and in every process listing. It is stored in
``<home>/secrets.json`` (``0600``) and read by each model call (``holon.runtime.secrets``); no
command prints it. The name must be a key variable agents may name (``[model] allowed_key_envs``).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit

__all__ = ["app", "list_", "set_", "unset"]

app = typer.Typer(
    help="Store API keys in the home (a 0600 file) so the daemon does not depend on a shell's environment.",
    no_args_is_help=True,
)

NameArg = Annotated[
    str, typer.Argument(help="The key variable, e.g. OPENAI_API_KEY (agents name it in --api-key-env).")
]


def _read_value(name: str) -> str:
    """The value from a hidden prompt on a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"value for {name} (input hidden): ")
    return sys.stdin.readline()


@app.command("set")
def set_(
    ctx: typer.Context,
    name: NameArg,
    extra: Annotated[list[str] | None, typer.Argument(hidden=True, show_default=False)] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Store a key: typed at a hidden prompt, or piped on stdin (never given as an argument)."""
    from holon.config import load_settings
    from holon.errors import UsageError
    from holon.paths import private_dir
    from holon.runtime.secrets import check_secret_name, secrets_path, set_secret

    if extra:  # refused without echoing it: it is probably the secret
        raise UsageError(
            "holon secrets set takes only the NAME: the value comes from a hidden prompt or stdin, never the "
            "command line (shell history, process listings); nothing was stored"
        )
    c = ctx_of(ctx, home, json_out)
    check_secret_name(name, load_settings(c.paths).model)
    value = _read_value(name)
    private_dir(c.paths.root)
    replaced = set_secret(c.paths.root, name, value)
    path = secrets_path(c.paths.root)
    lines = [f"{'replaced' if replaced else 'stored'} {name} in {path} (read at each model call; no restart needed)"]
    if os.environ.get(name):
        lines.append(f"note: {name} is also set in this shell; a process started with it set uses that value first")
    emit(c, {"name": name, "file": str(path), "replaced": replaced}, "\n".join(lines))


@app.command("list")
def list_(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """The names of the stored keys (never their values)."""
    from holon.runtime.secrets import list_secrets, secrets_path

    c = ctx_of(ctx, home, json_out)
    names = list_secrets(c.paths.root)
    text = "\n".join(names) if names else "no secrets stored (add one with `holon secrets set NAME`)"
    emit(c, {"names": names, "file": str(secrets_path(c.paths.root))}, text)


@app.command("unset")
def unset(ctx: typer.Context, name: NameArg, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Forget a stored key (agents that name it then need it in the environment)."""
    from holon.runtime.secrets import unset_secret

    c = ctx_of(ctx, home, json_out)
    removed = unset_secret(c.paths.root, name)
    emit(c, {"name": name, "removed": removed}, f"removed {name}" if removed else f"{name} was not stored")
