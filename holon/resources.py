"""Files holon ships besides code: the agent home template and the documented default config.

In a wheel they live under ``holon/_templates`` (see ``pyproject.toml``); in a source checkout
(editable install, tests) they are read from the repository's ``agent_home/`` and ``config/``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["agent_home_template", "default_config_text", "systemd_unit_text"]

_PACKAGE = Path(__file__).resolve().parent
_REPO = _PACKAGE.parent


def _find(packaged: str, in_repo: str) -> Path:
    for candidate in (_PACKAGE / "_templates" / packaged, _REPO / in_repo):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"holon's {in_repo} is missing from this installation")


def agent_home_template() -> Path:
    """The directory copied into every new agent's home."""
    return _find("agent_home", "agent_home")


def default_config_text() -> str:
    """The documented default ``holon.toml`` (every setting, commented)."""
    return _find("holon.toml", "config/holon.toml").read_text(encoding="utf-8")


def systemd_unit_text() -> str:
    """The systemd user unit ``holon daemon install --user`` fills in (``contrib/holon.service``)."""
    return _find("holon.service", "contrib/holon.service").read_text(encoding="utf-8")
