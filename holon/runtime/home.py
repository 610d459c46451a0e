"""Creating and opening a holon home: the directory with the database, config, logs and agents."""

from __future__ import annotations

from dataclasses import dataclass

from holon.clock import Clock
from holon.config import HomePaths, Settings, load_settings
from holon.errors import HomeNotFoundError
from holon.logs import configure_logging, get_logger
from holon.memory.files import ensure_operator_file
from holon.projections import Store
from holon.resources import default_config_text

__all__ = ["InitResult", "init_home", "open_home"]


@dataclass(frozen=True, slots=True)
class InitResult:
    home: str
    db: str
    config: str
    created: bool
    """False when the home already existed (init is idempotent)."""


def init_home(paths: HomePaths, *, clock: Clock | None = None) -> InitResult:
    """Create ``paths`` with a config file, a migrated database, the log and agent folders and the
    operator's memory file (``memory/operator.md``, shared by every agent of the home)."""
    created = not paths.db.exists()
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(exist_ok=True)
    paths.agents.mkdir(exist_ok=True)
    if not paths.config.exists():
        tmp = paths.config.with_suffix(".toml.tmp")
        tmp.write_text(default_config_text(), encoding="utf-8")
        tmp.replace(paths.config)
    settings = load_settings(paths)
    _configure(paths, settings)
    Store.open(paths, settings, clock=clock).close()
    ensure_operator_file(paths)
    get_logger("holon.home").info("home.initialised", home=str(paths.root), created=created)
    return InitResult(str(paths.root), str(paths.db), str(paths.config), created)


def _configure(paths: HomePaths, settings: Settings) -> None:
    cfg = settings.logging
    configure_logging(level=cfg.level, log_file=paths.logs / "holon.log" if cfg.file else None, console=cfg.console)


def open_home(paths: HomePaths, *, clock: Clock | None = None, log: bool = True) -> Store:
    """Open an existing home (``HomeNotFoundError`` when it was never initialised)."""
    if not paths.db.exists():
        raise HomeNotFoundError(f"no holon home at {paths.root} (run 'holon init' or pass --home)")
    settings: Settings = load_settings(paths)
    if log:
        _configure(paths, settings)
    return Store.open(paths, settings, clock=clock)
