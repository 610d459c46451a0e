"""The API token of a home: ``<home>/api.token`` (mode 0600), made by the daemon at first start.

Every route but health and hooks needs ``Authorization: Bearer <token>``, on loopback too (RFC
0005, "A token by default"): a web page the operator visits can reach 127.0.0.1 but cannot read
this file. When ``[api] token_env`` names a variable, its value is the token and the file is not
used. Clients of the same home (``holon chat``, the REPL, ``holon bench daemon``) read the token
the same way (``client_token``), so nobody has to copy it anywhere.

The file is created without ever being visible half-written or with wider permissions: the token
goes to a private temporary file (``O_EXCL``, 0600), is fsynced, and is ``link``-ed into place, which
fails rather than replaces when another process got there first (then that token wins).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from holon.errors import ConfigError

__all__ = ["TOKEN_FILE", "client_token", "ensure_token", "env_token", "read_token", "token_path"]

TOKEN_FILE = "api.token"


def token_path(root: Path) -> Path:
    """Where the home at ``root`` keeps its API token."""
    return root / TOKEN_FILE


def env_token(token_env: str | None) -> str | None:
    """The value of the variable ``token_env`` names, stripped; ``None`` when unnamed, unset or blank."""
    if token_env and os.environ.get(token_env, "").strip():
        return os.environ[token_env].strip()
    return None


def read_token(root: Path) -> str | None:
    """The token in ``<root>/api.token``, or ``None`` when there is no such file.

    A file others may read is narrowed to 0600 first (the token is a secret). ``ConfigError`` when
    the file exists but holds no token, or is not a regular file (a symlink is never followed)."""
    path = token_path(root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(
            f"cannot read the API token file {path}: {e.strerror or e} (remove it to get a new one)"
        ) from e
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"the API token file {path} is not a regular file (remove it to get a new one)")
        if info.st_mode & 0o077:
            with contextlib.suppress(OSError):
                os.fchmod(fh.fileno(), 0o600)
        token = fh.read(4096).strip()
    if not token or not token.isprintable() or " " in token:
        raise ConfigError(f"the API token file {path} holds no usable token (remove it to get a new one)")
    return token


def ensure_token(root: Path) -> str:
    """The home's token, created (random, 0600, atomically) when the file does not exist yet."""
    existing = read_token(root)
    if existing is not None:
        return existing
    root.mkdir(parents=True, exist_ok=True)
    path = token_path(root)
    token = secrets.token_urlsafe(32)
    tmp = root / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # never replaces: a token another process wrote first wins
        except FileExistsError:
            return read_token(root) or token
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    with contextlib.suppress(OSError):
        dir_fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return token


def client_token(root: Path, token_env: str | None) -> str | None:
    """What a client of the home at ``root`` sends: the ``token_env`` variable's value, else the file's."""
    return env_token(token_env) or read_token(root)
