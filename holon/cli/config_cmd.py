"""``holon config show``: the effective configuration, and where each value came from.

Values come from three layers (``holon.config``): the defaults, the config file (``holon.toml``
or ``$HOLON_CONFIG``) and ``HOLON_<SECTION>_<KEY>`` variables. When a setting does not do what
one expects, the question is which layer won; this answers it for every key at once.

Nothing secret is printed in clear. holon's settings hold the *names* of variables that hold
secrets (``api_key_env``, ``token_env``), never the secrets, and those names are shown. But a
secret can be pasted into the wrong place: a value of a key that sounds like a secret is shown
only when it has the shape of a variable name (upper case words), and a URL's user, password
and query (where tokens travel) are masked.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit

app = typer.Typer(help="Show holon's effective configuration.", no_args_is_help=True)

HIDDEN = "(hidden)"
_SECRET_WORDS = re.compile(r"token|key|secret|password|passwd|auth|credential", re.IGNORECASE)
_VARIABLE_NAME = re.compile(r"^[A-Z][A-Z0-9]{0,30}(?:_[A-Z0-9]{1,30}){0,8}$")


def shown(key: str, value: Any) -> Any:
    """``value`` as ``config show`` may print it (see the module's docstring)."""
    if isinstance(value, list | tuple):
        return [shown(key, v) for v in value]
    if not isinstance(value, str) or not value:
        return value
    if _SECRET_WORDS.search(key):
        return value if _VARIABLE_NAME.match(value) else HIDDEN
    if "://" in value:
        return _masked_url(value)
    return value


def _masked_url(value: str) -> str:
    try:
        url = urlsplit(value)
        host = url.hostname or ""
        port = f":{url.port}" if url.port else ""
    except ValueError:
        return HIDDEN
    netloc = ("***@" if url.username or url.password else "") + (f"[{host}]" if ":" in host else host) + port
    return urlunsplit((url.scheme, netloc, url.path, "***" if url.query else "", ""))


@app.command("show")
def show(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Every setting's effective value and its source: default, the config file, or a HOLON_... variable."""
    from holon.cli.toml_out import to_toml
    from holon.config import config_path, setting_sources

    c = ctx_of(ctx, home, json_out)
    path = config_path(c.paths)
    rows = setting_sources(c.paths)
    settings: dict[str, dict[str, Any]] = {}
    notes: dict[str, str] = {}
    for section, key, value, source in rows:
        plain = list(value) if isinstance(value, tuple) else value
        kind = "default" if source == "default" else ("env" if source.startswith("HOLON_") else "file")
        settings.setdefault(section, {})[key] = {"value": shown(key, plain), "source": kind, "from": source}
        if kind != "default":
            notes[f"{section}.{key}"] = f"from {source}"
    data = {"home": str(c.paths.root), "config_file": str(path), "config_file_exists": path.is_file(),
            "settings": settings}  # fmt: skip
    table = {s: {k: v["value"] for k, v in keys.items()} for s, keys in settings.items()}
    head = [
        f"# holon home:  {c.paths.root}",
        f"# config file: {path}" + ("" if path.is_file() else " (does not exist: defaults apply)"),
        "# Values without a note are defaults; environment variables HOLON_<SECTION>_<KEY> win over the file.",
        "",
    ]
    emit(c, data, "\n".join(head) + "\n" + to_toml(table, notes))
