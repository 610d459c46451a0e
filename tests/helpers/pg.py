"""PostgreSQL for the tests (RFC 0008, "Tests"): a migrated template per run, a database per worker
emptied between tests, a database of its own for a test that needs one; every one dropped.

``HOLON_TEST_PG`` (default ``postgresql://root@127.0.0.1:5432/postgres``) names the server's
maintenance database; it is read when this module is imported, before the tests' hermetic
environment drops every ``HOLON_*`` variable. Database names carry the run id and the xdist worker
(``holon_tpl_<run>``, ``holon_w_<run>_<worker>``, ``holon_own_<run>_<worker>_<n>``), so concurrent
runs on one server never collide and the run's controller drops whatever its workers left
(``drop_run``). The template is made once per run, under an advisory lock, by whichever worker
gets there first.

Resetting a worker's database is ``DELETE`` from every table in ``session_replication_role =
replica``, where the append-only triggers do not fire (18.5 ms against 211-352 ms for a database
from the template, RFC 0008 "Per-test databases"); it needs a superuser, which the test role is
here (elsewhere ``pg_db`` gives each test a fresh copy of the template instead). Test databases
run with ``synchronous_commit = off``: a commit costs no disk flush (the suite's ``fast_ledger``
on SQLite), and only a crash of the server itself could lose one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

__all__ = [
    "ADMIN_URL",
    "PgDatabase",
    "admin",
    "can_reset",
    "create_from_template",
    "drop",
    "drop_run",
    "ensure_template",
    "new_run_id",
    "reset",
    "url_of",
]

ADMIN_URL = os.environ.get("HOLON_TEST_PG") or "postgresql://root@127.0.0.1:5432/postgres"
CONNECT_TIMEOUT_S = 10
_KEEP = frozenset({"schema_migrations", "unfenced_types"})
"""Tables a reset leaves alone: the migrated schema's own record, and the fence's list of unfenced
types (rows written by migration 2)."""


_FIRST_LAYOUT: dict[str, frozenset[str]] = {}
"""The tables of each worker database at its first reset (a fresh copy of the template): what a
reset keeps; anything a test created beyond them is dropped."""


@dataclass(frozen=True, slots=True)
class PgDatabase:
    """A test database: its name and URL."""

    name: str
    url: str

    def connect(self, **kwargs: Any) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, **kwargs)


def new_run_id() -> str:
    return secrets.token_hex(4)


def url_of(name: str) -> str:
    """The URL of database ``name`` on the server of ``ADMIN_URL``."""
    base, _, rest = ADMIN_URL.partition("?")
    head, _, _db = base.rpartition("/")
    return f"{head}/{name}" + (f"?{rest}" if rest else "")


@contextlib.contextmanager
def admin() -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """An autocommit connection to the maintenance database; a readable failure if the server does
    not answer (the fixtures turn it into an error, never a skip)."""
    try:
        conn = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError as e:
        raise RuntimeError(
            f"PostgreSQL does not answer at {ADMIN_URL} (HOLON_TEST_PG): {str(e).strip().splitlines()[0]}; "
            "the postgresql half of the tests cannot run"
        ) from e
    try:
        yield conn
    finally:
        conn.close()


def _exists(conn: psycopg.Connection[tuple[Any, ...]], name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def ensure_template(run: str) -> str:
    """``holon_tpl_<run>``, created and migrated by the first caller of the run (the others wait on
    an advisory lock and find it complete); returns its name."""
    from holon.ledger.pg.migrations import migrate

    name = f"holon_tpl_{run}"
    key = zlib.crc32(name.encode())
    with admin() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            if _exists(conn, name):
                return name
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            try:
                with psycopg.connect(url_of(name), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as db:
                    migrate(db, now_us=1)
            except BaseException:
                drop(name)
                raise
            return name
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def create_from_template(name: str, template: str | None) -> PgDatabase:
    """Database ``name``: a copy of ``template`` (WAL-logged, no checkpoint) or empty when ``None``,
    with ``synchronous_commit = off`` (database settings are not copied from a template)."""
    with admin() as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(ident))
        else:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY wal_log").format(ident, sql.Identifier(template))
            )
        conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(ident))
    return PgDatabase(name, url_of(name))


def drop(name: str) -> None:
    with admin() as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def drop_run(run: str) -> list[str]:
    """Drop every database of run ``run`` (workers', own ones, then the template); returns their names."""
    with admin() as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'holon\\_%%' AND datname LIKE %s ORDER BY datname",
                (f"%\\_{run}%",),
            ).fetchall()
        ]
        # the template last: a copy being made from it would make its DROP wait
        for name in sorted(names, key=lambda n: n.startswith("holon_tpl_")):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return names


@functools.cache
def can_reset(db: PgDatabase) -> bool:
    """Whether the test role may empty ``db`` with its triggers off (``session_replication_role``
    needs a superuser); asked once per database."""
    with db.connect() as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def reset(db: PgDatabase) -> None:
    """Empty every table of ``db`` but ``schema_migrations``, triggers off (replica mode), in one
    transaction; tables a test made beyond the database's first layout (a projection's own
    migrations, a toy projection's table) are dropped, since the record of their migrations
    (``projection_migrations``) is emptied or dropped with them."""
    with db.connect() as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        present = [
            r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        ]
        first = _FIRST_LAYOUT.setdefault(db.name, frozenset(present))
        for table in present:
            if table not in first:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(table)))
        for table in present:
            if table in first and table not in _KEEP:
                conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
