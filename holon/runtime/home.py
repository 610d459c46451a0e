"""Creating and opening a holon home: the directory with the database, config, logs and agents."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from holon.clock import Clock
from holon.config import HomePaths, Settings, load_settings, storage_target
from holon.errors import ConfigError, HolonError, HomeNotFoundError
from holon.logs import configure_logging, get_logger
from holon.paths import private_dir, tighten, write_private
from holon.projections import Store
from holon.resources import default_config_text

__all__ = ["InitResult", "check_storage", "init_home", "open_home"]


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
    check_storage(paths, load_settings(paths))  # before anything is made: a URL refused leaves no home behind
    created = not _exists(paths.db)
    try:
        for directory in (paths.root, paths.logs, paths.agents):
            private_dir(directory)
        if not paths.config.exists():
            write_private(paths.config, default_config_text())
    except OSError as e:
        raise HolonError(f"cannot create a holon home at {paths.root}: {e.strerror} ({e.filename})") from e
    settings = load_settings(paths)
    _configure(paths, settings)
    Store.open(paths, settings, clock=clock, create=created).close()
    from holon.memory.files import ensure_operator_file  # init only: every other command skips its import

    ensure_operator_file(paths)
    get_logger("holon.home").info("home.initialised", home=str(paths.root), created=created)
    return InitResult(str(paths.root), str(paths.db), str(paths.config), created)


def _configure(paths: HomePaths, settings: Settings, *, service: bool = False) -> None:
    cfg = settings.logging
    configure_logging(
        level=cfg.level, log_file=paths.logs / "holon.log" if cfg.file else None, console=cfg.console, service=service
    )


def open_home(
    paths: HomePaths, *, clock: Clock | None = None, log: bool = True, catch_up: bool = True, service: bool = False
) -> Store:
    """Open an existing home (``HomeNotFoundError`` when it was never initialised).

    ``service``: the caller is a daemon in the foreground (``holon serve``), whose stderr a
    supervisor may collect (``holon.logs.console_mode``).

    Never creates a database: a missing, empty or foreign ``holon.db`` is an error. A home
    made before homes were private is tightened (directories 0700, files 0600) on the way in.
    """
    settings: Settings = load_settings(paths)
    check_storage(paths, settings)
    if not _exists(paths.db):
        raise HomeNotFoundError(f"no holon home at {paths.root} (run 'holon init' or pass --home)")
    for path in (paths.root, paths.logs, paths.agents, paths.config, paths.anchor, paths.logs / "holon.log"):
        tighten(path)
    if log:
        _configure(paths, settings, service=service)
    return Store.open(paths, settings, clock=clock, create=False, catch_up=catch_up)


def check_storage(paths: HomePaths, settings: Settings) -> None:
    """Refuse a ``[storage] url`` this holon cannot open yet, before anything touches a database.

    ``Store.open`` opens the ledger on whichever engine the URL names (``engine_for``), but a home
    is more than its ledger: until the projections' remaining SQL, the evolve queue, hook tokens
    and the search index run on PostgreSQL too (RFC 0008 steps 5-7), a ``postgresql://`` URL exits
    2 here with one line (naming an unreachable server as such), and so does a SQLite file other
    than the home's own (the home's other files still assume it)."""
    target = storage_target(paths, settings.storage)
    if target.engine == "postgresql":
        from holon.ledger.pg.start import refuse_until_wired

        refuse_until_wired(target.url, timeout_s=settings.storage.connect_timeout_s)
        return  # only with HOLON_PG_HOME_PREVIEW=1 (interim, until step 7)
    if target.path != paths.db:
        raise ConfigError(
            f"storage.url names the SQLite file {target.path}; only the home's own file ({paths.db}) is supported "
            "yet: leave [storage] url empty"
        )


def _exists(path: Path) -> bool:
    """``path.exists()``, with an unreadable home named in one line instead of a traceback."""
    try:
        return path.exists()
    except OSError as e:
        raise HolonError(f"cannot read the holon home {path.parent}: {e.strerror}") from e
