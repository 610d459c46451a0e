"""API keys kept in the home (``holon secrets set NAME``), and where a model call finds its key.

A daemon started from one shell and restarted from another (systemd, a new terminal) must not
lose its keys with the shell: ``holon secrets set OPENAI_API_KEY`` stores the value in
``<home>/secrets.json``, a ``0600`` file replaced atomically (``write_private``), and every model
call looks its key up at call time (``KeyLookup``): the process environment first, then that file.
An agent names a key only by variable (``api_key_env``), and the name must pass the same
allow-list as in the environment (``[model] allowed_key_envs``, RFC 0002 "Secrets by name").

Values are never printed, never logged and never written anywhere else: ``holon secrets list``
shows names only, and a missing key's message names the variable, the process and the fix.
No heavy imports here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from holon.config import ModelDefaults
from holon.errors import ConfigError, UsageError
from holon.paths import open_private, tighten, write_private

__all__ = [
    "SECRETS_FILE",
    "KeyLookup",
    "check_secret_name",
    "list_secrets",
    "read_secret",
    "secrets_path",
    "set_secret",
    "unset_secret",
]

SECRETS_FILE = "secrets.json"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_MAX_VALUE = 16 * 1024


def secrets_path(home: Path) -> Path:
    """Where the home keeps its secrets."""
    return home / SECRETS_FILE


def check_secret_name(name: str, defaults: ModelDefaults) -> str:
    """``name`` when an agent may name it as ``api_key_env``; else a ``UsageError`` saying how to
    allow it. Storing a value no agent may use would only be a second copy of a secret."""
    if not _NAME.match(name):
        raise UsageError(
            "a secret's name is an environment variable name (letters, digits and '_', e.g. OPENAI_API_KEY)"
        )
    if name != defaults.api_key_env and name not in defaults.allowed_key_envs:
        raise UsageError(
            f"{name} is not a key variable agents may name; add it to [model] allowed_key_envs in holon.toml first"
        )
    return name


def _load(path: Path) -> dict[str, str]:
    """The stored secrets (``{}`` when there is no file). A damaged file is a ``ConfigError``
    naming the file, never its content."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read the secrets file {path}: {e.strerror}") from None
    tighten(path)
    try:
        data = json.loads(raw)
        secrets = data["secrets"]
        if not isinstance(secrets, dict) or not all(isinstance(v, str) for v in secrets.values()):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"the secrets file {path} is damaged; remove it and store the keys again with `holon secrets set NAME`"
        ) from None  # the parse error may quote the content
    return {str(k): v for k, v in secrets.items()}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, str]]:
    """The stored secrets under an exclusive lock (two ``secrets set`` at once keep both), written
    back atomically when the block ends without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_private(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        secrets = _load(path)
        yield secrets
        body = json.dumps({"version": 1, "secrets": dict(sorted(secrets.items()))}, indent=2) + "\n"
        write_private(path, body)
    finally:
        os.close(fd)


def set_secret(home: Path, name: str, value: str) -> bool:
    """Store ``value`` under ``name``; True when it replaced a stored value."""
    value = value.strip("\r\n")
    if not value.strip():
        raise UsageError(f"no value given for {name} (nothing was stored)")
    if len(value) > _MAX_VALUE or any(c in value for c in "\r\n\0"):
        raise UsageError(
            f"the value for {name} must be one line of at most {_MAX_VALUE} characters (nothing was stored)"
        )
    with _locked(secrets_path(home)) as secrets:
        replaced = name in secrets
        secrets[name] = value
    return replaced


def unset_secret(home: Path, name: str) -> bool:
    """Forget ``name``; True when it was stored."""
    if name not in list_secrets(home):
        return False
    with _locked(secrets_path(home)) as secrets:
        return secrets.pop(name, None) is not None


def list_secrets(home: Path) -> list[str]:
    """The names stored, sorted (never the values)."""
    return sorted(_load(secrets_path(home)))


def read_secret(home: Path, name: str) -> str | None:
    """The value stored under ``name``, or ``None``."""
    return _load(secrets_path(home)).get(name) or None


class KeyLookup(Mapping[str, str]):
    """Where a model call finds the value of its ``api_key_env``, at call time: ``environ`` (the
    process environment by default) when set there, else the home's secrets file, read afresh on
    each lookup (``holon secrets set`` takes effect without a restart).

    ``who`` names the process in the message for a key found nowhere (``missing``), so the operator
    learns whose environment was looked at: "the daemon's", or this command's."""

    def __init__(
        self, home: Path | None, *, environ: Mapping[str, str] | None = None, who: str = "this process"
    ) -> None:
        self.home = home
        self._environ = environ
        self.who = who

    def _env(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def __getitem__(self, name: str) -> str:
        value = self._env().get(name)
        if value:
            return value
        if self.home is not None:
            stored = read_secret(self.home, name)
            if stored:
                return stored
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        names = set(self._env())
        if self.home is not None:
            with contextlib.suppress(ConfigError):
                names.update(list_secrets(self.home))
        return iter(sorted(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def missing(self, name: str) -> str:
        """Why ``name`` has no value, and the one command that fixes it."""
        where = f"{self.who}'s environment (pid {os.getpid()})"
        if self.home is None:
            return f"{name} is not set in {where}"
        return f"{name} is not set in {where} nor in holon secrets: run `holon secrets set {name}`"
