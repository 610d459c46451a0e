"""Where a holon home keeps its files, and how the home is chosen (no heavy imports here)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HomePaths", "resolve_home"]


@dataclass(frozen=True, slots=True)
class HomePaths:
    """Where a holon home keeps its files."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "holon.db"

    @property
    def config(self) -> Path:
        return self.root / "holon.toml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def agents(self) -> Path:
        return self.root / "agents"

    def agent_home(self, name: str) -> Path:
        return self.agents / name


def resolve_home(home: str | Path | None = None, environ: Mapping[str, str] | None = None) -> HomePaths:
    env = os.environ if environ is None else environ
    raw = home or env.get("HOLON_HOME") or "~/.holon"
    return HomePaths(Path(raw).expanduser().absolute())
