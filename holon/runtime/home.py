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

__all__ = ["InitResult", "check_storage", "home_exists", "init_home", "open_home"]


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
    first = load_settings(paths)
    check_storage(paths, first)  # before anything is made: a URL refused leaves no home behind
    created = not home_exists(paths, first)
    try:
        for directory in (paths.root, paths.logs, paths.agents):
            private_dir(directory)
        if not paths.config.exists():
            write_private(paths.config, default_config_text())
    except OSError as e:
        raise HolonError(f"cannot create a holon home at {paths.root}: {e.strerror} ({e.filename})") from e
    settings = load_settings(paths)
    _configure(paths, settings)
    # A remote ledger is "created" by migrating an empty database, never over a foreign one.
    with Store.open(paths, settings, clock=clock, create=created or _remote(paths, settings)) as store:
        where = str(paths.db) if store.ledger.engine.dialect == "sqlite" else store.ledger.engine.location
    from holon.memory.files import ensure_operator_file  # init only: every other command skips its import

    ensure_operator_file(paths)
    get_logger("holon.home").info("home.initialised", home=str(paths.root), created=created)
    return InitResult(str(paths.root), where, str(paths.config), created)


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
    if not home_exists(paths, settings):
        raise HomeNotFoundError(f"no holon home at {paths.root} (run 'holon init' or pass --home)")
    for path in (paths.root, paths.logs, paths.agents, paths.config, paths.anchor, paths.logs / "holon.log"):
        tighten(path)
    if log:
        _configure(paths, settings, service=service)
    return Store.open(paths, settings, clock=clock, create=False, catch_up=catch_up)


def check_storage(paths: HomePaths, settings: Settings) -> None:
    """Check ``[storage] url`` before anything touches a database, in one line and exit 2.

    ``Store.open`` opens the ledger on whichever engine the URL names (``engine_for``). A
    ``postgresql://`` URL is probed first (``check_server``): without the driver the user is told
    to install the ``postgres`` extra, an unreachable server is named as such (exit 2). The
    search index then lives in a node-local file (``holon.projections.local``). A SQLite file
    other than the home's own is refused (the home's other files still assume it)."""
    target = storage_target(paths, settings.storage)
    if target.engine == "postgresql":
        from holon.ledger.pg.start import check_server

        check_server(target.url, timeout_s=settings.storage.connect_timeout_s)
        return
    if target.path != paths.db:
        raise ConfigError(
            f"storage.url names the SQLite file {target.path}; only the home's own file ({paths.db}) is supported "
            "yet: leave [storage] url empty"
        )


def home_exists(paths: HomePaths, settings: Settings | None = None) -> bool:
    """Whether there is a home at ``paths``: its SQLite ledger file, or, when its ledger is remote
    (``[storage] url`` names PostgreSQL), its directory (the database itself is checked when the
    ledger opens: one without holon's schema is refused there, in one line)."""
    if _exists(paths.db):
        return True
    if not _exists(paths.root):
        return False
    return paths.root.is_dir() and _remote(paths, settings if settings is not None else load_settings(paths))


def _remote(paths: HomePaths, settings: Settings) -> bool:
    return storage_target(paths, settings.storage).engine != "sqlite"


def _exists(path: Path) -> bool:
    """``path.exists()``, with an unreadable home named in one line instead of a traceback."""
    try:
        return path.exists()
    except OSError as e:
        raise HolonError(f"cannot read the holon home {path.parent}: {e.strerror}") from e
