"""``[storage] url`` (RFC 0008, step 3): the home's SQLite file by default, unknown schemes refused in
one line, a PostgreSQL URL probed at start (an install without the driver told what to install, an
unreachable server exit 2: ``test_pg_ledger.py``), a home on it found by its directory; and the schema's SQLite DDL
unchanged by the PostgreSQL collation (``holon.ledger.schema``'s ``with_variant``)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from holon.config import HomePaths, StorageSettings, load_settings, storage_target
from holon.errors import ConfigError
from holon.runtime.home import check_storage, home_exists, open_home

if TYPE_CHECKING:
    from conftest import EngineTarget

SQLITE_DDL_SHA256 = "82727a9469b895a85942375778ac7e5d6076dfcff55d89b36d1085b69d0894bc"
"""sha256 of ``"\\n;\\n".join(ddl("sqlite"))`` before ``COLLATE "C"`` was declared for PostgreSQL."""


def test_default_is_the_homes_sqlite_file(home: HomePaths) -> None:
    settings = load_settings(home)
    assert settings.storage == StorageSettings()
    target = storage_target(home, settings.storage)
    assert (target.engine, target.url, target.path) == ("sqlite", f"sqlite:///{home.db}", home.db)
    check_storage(home, settings)  # nothing to refuse


@pytest.mark.parametrize(
    ("url", "engine", "path"),
    [
        ("sqlite:///holon.db", "sqlite", "HOME/holon.db"),  # relative: under the home
        ("sqlite:////abs/x.db", "sqlite", "/abs/x.db"),
        ("postgresql://root@127.0.0.1:5432/holon", "postgresql", None),
        ("postgres://db.example.com/holon", "postgresql", None),
    ],
)
def test_urls_resolve(home: HomePaths, url: str, engine: str, path: str | None) -> None:
    target = storage_target(home, StorageSettings(url=url))
    assert target.engine == engine
    assert target.path == (None if path is None else Path(path.replace("HOME", str(home.root))))


def test_environment_sets_the_url(home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_STORAGE_URL", "postgresql://root@127.0.0.1/x")
    assert load_settings(home).storage.url == "postgresql://root@127.0.0.1/x"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://root@localhost/holon", "scheme 'mysql' is not a storage engine holon knows"),
        ("holon.db", "no scheme is not a storage engine holon knows"),
        ("sqlite://holon.db", "a SQLite URL is sqlite:///PATH"),
        ("postgresql://h:port/db", "not a PostgreSQL URL"),
    ],
)
def test_bad_urls_are_one_line(home: HomePaths, monkeypatch: pytest.MonkeyPatch, url: str, says: str) -> None:
    monkeypatch.setenv("HOLON_STORAGE_URL", url)
    with pytest.raises(ConfigError) as err:
        load_settings(home)
    assert str(err.value).startswith("config: bad value for 'storage.url' in HOLON_STORAGE_URL: ")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_another_sqlite_file_is_refused_for_now(home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_STORAGE_URL", "sqlite:////elsewhere/holon.db")
    with pytest.raises(ConfigError, match=r"only the home's own file .* is supported yet"):
        open_home(home, log=False)
    monkeypatch.setenv("HOLON_STORAGE_URL", "sqlite:///holon.db")  # the home's own file, spelled out
    check_storage(home, load_settings(home))


def test_without_the_driver_a_postgresql_url_says_what_to_install(
    home: HomePaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOLON_STORAGE_URL", "postgresql://root@127.0.0.1:5432/holon")
    monkeypatch.delitem(sys.modules, "holon.ledger.pg.connect", raising=False)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    with pytest.raises(ConfigError, match=r"driver is not installed \(psycopg\): pip install 'holon\[postgres\]'"):
        check_storage(home, load_settings(home))


def test_a_home_on_postgresql_is_its_directory(home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not home_exists(home)
    monkeypatch.setenv("HOLON_STORAGE_URL", "postgresql://root@127.0.0.1:5432/holon")
    assert not home_exists(home)  # no directory: no home
    home.root.mkdir(parents=True)
    assert home_exists(home)  # the database is checked when the ledger opens
    monkeypatch.delenv("HOLON_STORAGE_URL")
    assert not home_exists(home)  # a SQLite home is its file


def test_sqlite_ddl_is_unchanged_by_the_postgresql_collation() -> None:
    from holon.ledger.schema import ddl

    sqlite = ddl("sqlite")
    assert not any("COLLATE" in s for s in sqlite)
    assert hashlib.sha256("\n;\n".join(sqlite).encode()).hexdigest() == SQLITE_DDL_SHA256
    assert all('COLLATE "C"' in s for s in ddl("postgresql") if s.startswith("CREATE TABLE"))


def test_the_engine_parameter_gives_a_storage_url(engine: EngineTarget, home: HomePaths) -> None:
    """The ``engine`` fixture (RFC 0008, "One fixture parameter"): a URL ``[storage] url`` accepts,
    naming the home's file or a live, migrated PostgreSQL database."""
    target = storage_target(home, StorageSettings(url=engine.url))
    assert target.engine == engine.name
    if engine.name == "sqlite":
        assert target.path == home.db
    else:
        from holon.ledger.pg.connect import connect
        from holon.ledger.pg.migrations import current_version, latest_version

        with connect(engine.url) as conn:
            assert current_version(conn) == latest_version()
