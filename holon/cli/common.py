"""Options every command accepts, and output helpers shared by the command groups."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.paths import HomePaths, resolve_home

if TYPE_CHECKING:
    from holon.projections import Store

__all__ = ["Ctx", "HomeOpt", "JsonOpt", "ctx_of", "emit", "open_store"]

HomeOpt = Annotated[
    str | None,
    typer.Option("--home", help="holon home directory (default: $HOLON_HOME or ~/.holon).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@dataclass(frozen=True, slots=True)
class Ctx:
    paths: HomePaths
    json: bool


def ctx_of(ctx: typer.Context, home: str | None, json_out: bool) -> Ctx:
    """Merge a command's ``--home``/``--json`` with the ones given before the command name."""
    root: dict[str, Any] = ctx.find_root().obj or {}
    return Ctx(resolve_home(home or root.get("home")), json_out or bool(root.get("json")))


def open_store(c: Ctx) -> Store:
    from holon.runtime.home import open_home

    return open_home(c.paths)


def emit(c: Ctx, data: Any, human: str | None = None) -> None:
    """Print ``data`` as one JSON document with ``--json``, else ``human`` (or ``data``) as text."""
    if c.json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, sort_keys=True) + "\n")
    else:
        sys.stdout.write((human if human is not None else str(data)) + "\n")
