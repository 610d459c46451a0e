"""Reaching PostgreSQL (real server, RFC 0008 "Unreachable at start"): one connection, the pool and
the probe; a server that does not answer is one ``StorageUnavailable`` line naming host and port,
never the password; concurrent migration runners apply each step once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from helpers.pg import PgDatabase

from holon.errors import ConfigError, StorageUnavailable
from holon.ledger.pg.connect import connect, open_pool, parse_url, probe
from holon.ledger.pg.migrations import current_version, latest_version, migrate

DEAD = "postgresql://root:s3cret@127.0.0.1:1/holon"


def test_url_parts_and_no_password_in_messages() -> None:
    pg = parse_url(DEAD)
    assert (pg.host, pg.port, pg.dbname, pg.user, pg.where) == ("127.0.0.1", 1, "holon", "root", "127.0.0.1:1")
    assert parse_url("postgresql:///holon").where == "localhost:5432"
    with pytest.raises(ConfigError, match="not a PostgreSQL URL libpq understands"):
        parse_url("postgresql://root@127.0.0.1:5432/holon?nonsense_option=1")


@pytest.mark.parametrize("how", ["connect", "probe", "pool"])
def test_unreachable_is_one_line(how: str) -> None:
    calls: dict[str, Callable[[], object]] = {
        "connect": lambda: connect(DEAD, timeout_s=2),
        "probe": lambda: probe(DEAD, timeout_s=2),
        "pool": lambda: open_pool(DEAD, size=2, timeout_s=2),
    }
    with pytest.raises(StorageUnavailable) as err:
        calls[how]()
    assert str(err.value) == "cannot reach PostgreSQL at 127.0.0.1:1: connection refused"
    assert err.value.exit_code == 2


def test_probe_and_pool_on_a_live_server(pg_db: PgDatabase) -> None:
    assert probe(pg_db.url) >= 150000
    pool = open_pool(pg_db.url, size=3, prepare=False)
    try:
        with pool.connection() as conn:
            assert conn.autocommit and conn.prepare_threshold is None
            assert conn.execute("SELECT head_seq FROM holon_begin_append()").fetchone() == (0,)
        assert pool.get_stats()["pool_max"] == 3
    finally:
        pool.close()


def test_concurrent_runners_apply_each_migration_once(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with db.connect() as conn:
                results.append(migrate(conn, now_us=1))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    # each step is its own transaction under the lock: runners may share the steps, never repeat one
    assert sorted(v for applied in results for v in applied) == list(range(1, latest_version() + 1))
    with db.connect() as conn:
        assert current_version(conn) == latest_version()
