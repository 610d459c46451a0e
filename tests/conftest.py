"""Shared fixtures: an isolated home per test, a FakeClock, an open ``Store``, the API server; and
the reaper (tests/helpers/reaper.py), which stops every process a test leaves behind.

PostgreSQL (tests/helpers/pg.py, RFC 0008 "Tests"): ``pg_db`` is this worker's migrated database,
emptied before each test; ``pg_new_db`` makes a database of a test's own; ``engine`` is the fixture
parameter over ``sqlite`` and ``postgresql`` a test opts into. None of them ever skips: a server
that does not answer is an error, and the run fails if any ``postgresql`` test reports skipped."""

from __future__ import annotations

import itertools
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
from helpers import lean_session, props, reaper
from hypothesis import settings as hypothesis_settings

from holon.clock import FakeClock
from holon.config import HomePaths, Settings, load_settings, resolve_home
from holon.context.tokens import TokenCounter
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

if TYPE_CHECKING:
    import httpx
    from helpers.api_server import ApiServer
    from helpers.pg import PgDatabase

# Property tests build real databases; a per-example deadline only adds flakiness on slow CI.
hypothesis_settings.register_profile("holon", deadline=None, print_blob=True)
hypothesis_settings.load_profile("holon")


def pytest_configure(config: pytest.Config) -> None:
    reaper.pytest_configure(config)
    lean_session.pytest_configure(config)  # fewer collections; workers exit without finalising
    props.configure(config)  # the inner loop tries a quarter of each property's examples
    # One run id for the controller and its xdist workers (handed over in pytest_configure_node):
    # the names of every PostgreSQL database this run makes carry it.
    workerinput = getattr(config, "workerinput", None)
    config.stash[_PG_RUN] = workerinput["holon_pg_run"] if workerinput else _new_run_id()
    # xdist's --dist loadfile hands files out in the order of pytest_collection_modifyitems below,
    # not re-sorted by test count (that put the one-test files that run for minutes, the chaos and
    # bench tests, last: one worker ran them for minutes while the other had finished).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with more ``slow`` tests first, the rest after (a stable sort: each file's tests keep
    their order): with two xdist workers taking whole files, the long ones start early and the
    many short files even out the ends, instead of one long file running alone at the end."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.nodeid.split("::")[0]] = slow.get(item.nodeid.split("::")[0], 0) + bool(
            item.get_closest_marker("slow")
        )
    items.sort(key=lambda item: -slow[item.nodeid.split("::")[0]])


_PG_RUN = pytest.StashKey[str]()
_PG_SKIPPED: list[str] = []
"""Node ids of ``postgresql`` tests reported skipped in this run."""
_POSTGRESQL_PARAM = re.compile(r"\[(?:.*-)?postgresql(?:-.*)?\]$")
"""A test id parametrized with ``postgresql`` (``test_x[postgresql]``, ``test_x[postgresql-3]``)."""


def _new_run_id() -> str:
    import secrets

    return secrets.token_hex(4)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # Any: xdist's WorkerController
    """xdist: hand the controller's run id to each worker."""
    node.workerinput["holon_pg_run"] = node.config.stash[_PG_RUN]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember every ``postgresql``-parametrized test that reports skipped (on the controller,
    which sees its workers' reports too)."""
    if report.skipped and _POSTGRESQL_PARAM.search(report.nodeid):
        _PG_SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The controller (or a run without workers) drops every database of the run, and fails the run
    when a ``postgresql`` test was skipped: that half of the suite never passes by not running."""
    config = session.config
    if getattr(config, "workerinput", None) is not None:
        return
    import contextlib

    with contextlib.suppress(Exception):  # psycopg missing or the server gone: nothing was created
        from helpers import pg

        pg.drop_run(config.stash[_PG_RUN])
    if _PG_SKIPPED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _PG_SKIPPED and getattr(terminalreporter.config, "workerinput", None) is None:
        terminalreporter.section("postgresql tests skipped: the run fails", sep="=", red=True)
        for nodeid in _PG_SKIPPED:
            terminalreporter.write_line(f"{nodeid}: the PostgreSQL half of the suite must run, never skip")


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's HOLON_* variables (but HOLON_TEST_PG, the tests' PostgreSQL), nor
    the terminal size pytest-xdist's workers set (COLUMNS=80 LINES=24: a serial run has none), so
    both runs format output alike."""
    for var in list(os.environ):
        if (var.startswith("HOLON_") and var != "HOLON_TEST_PG") or var in ("COLUMNS", "LINES"):
            monkeypatch.delenv(var)


@pytest.fixture
def fast_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    """synchronous=NORMAL: survives process crashes, skips the fsync per commit."""
    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")


@pytest.fixture
def home(tmp_path, fast_ledger) -> HomePaths:
    return resolve_home(tmp_path / "home")


@pytest.fixture
def settings(home: HomePaths) -> Settings:
    return load_settings(home)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(home: HomePaths, settings: Settings, clock: FakeClock) -> Iterator[Store]:
    s = Store.open(home, settings, clock=clock)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    """The scripted loopback model server (answers ``ok`` until given a script)."""
    with FakeLLM() as f:
        yield f


@pytest.fixture
def ada(store: Store, tmp_path: Path) -> AgentState:
    """Agent ada with a workspace folder of her own."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return create_agent(store, "ada", workspace=str(ws))


@pytest.fixture
def alice(store: Store) -> AgentState:
    return create_agent(store, "alice")


@pytest.fixture
def bob(store: Store) -> AgentState:
    return create_agent(store, "bob")


@pytest.fixture
def home_copy(populated: Path, tmp_path: Path) -> Path:
    """A private copy of the module's ``populated`` home (each CLI test module defines its own,
    read-only), for tests that write to it or tamper with it."""
    target = tmp_path / "home"
    shutil.copytree(populated, target)
    return target


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    """The token counter the context tests measure with."""
    return TokenCounter("gpt-4o")


@pytest.fixture
def server(tmp_path: Path, fast_ledger: None) -> Iterator[ApiServer]:
    """The real daemon behind the real HTTP API on 127.0.0.1 (in this process), on a FakeClock."""
    from helpers.api_server import api_server

    with api_server(tmp_path / "home", clock=FakeClock()) as s:
        yield s


@pytest.fixture
def client(server: ApiServer) -> Iterator[httpx.Client]:
    """An httpx client of ``server`` (a test file's own ``server`` when it has one), token sent."""
    with server.client() as c:
        yield c


# --- PostgreSQL (tests/helpers/pg.py) -----------------------------------------------------------


@pytest.fixture(scope="session")
def pg_template(request: pytest.FixtureRequest) -> str:
    """The run's migrated template database (made once per run by the first worker to ask)."""
    from helpers import pg

    try:
        return pg.ensure_template(request.config.stash[_PG_RUN])
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)  # an error of every test that needs it, never a skip


def _worker(request: pytest.FixtureRequest) -> str:
    workerinput = getattr(request.config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


@pytest.fixture(scope="session")
def pg_worker_db(request: pytest.FixtureRequest, pg_template: str) -> Iterator[PgDatabase]:
    """This worker's database, a copy of the template, dropped at the end of the session."""
    from helpers import pg

    db = pg.create_from_template(f"holon_w_{request.config.stash[_PG_RUN]}_{_worker(request)}", pg_template)
    try:
        yield db
    finally:
        pg.drop(db.name)


@pytest.fixture
def pg_db(request: pytest.FixtureRequest, pg_worker_db: PgDatabase) -> Iterator[PgDatabase]:
    """A migrated PostgreSQL database with no rows: this worker's, emptied before the test; where the
    test role may not switch triggers off (not a superuser), a fresh copy of the template instead."""
    from helpers import pg

    if pg.can_reset(pg_worker_db):
        pg.reset(pg_worker_db)
        yield pg_worker_db
        return
    own: Callable[..., PgDatabase] = request.getfixturevalue("pg_new_db")
    yield own()


@pytest.fixture
def pg_conns(pg_db: PgDatabase) -> Iterator[Callable[[], Any]]:
    """Make plain connections to the test's database (autocommit, as holon's), all closed after
    the test: the tests of what the database itself enforces (leases, names, notifications)."""
    from holon.ledger.pg.connect import connect

    made: list[Any] = []  # Any: psycopg connections (psycopg is imported by holon.ledger.pg only)

    def make() -> Any:
        made.append(connect(pg_db.url, timeout_s=10))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def pg_new_db(request: pytest.FixtureRequest, pg_template: str) -> Iterator[Callable[..., PgDatabase]]:
    """Make databases of the test's own: ``pg_new_db()`` migrated (from the template),
    ``pg_new_db(migrated=False)`` empty; all dropped when the test ends."""
    from helpers import pg

    made: list[str] = []
    counter = itertools.count(1)
    prefix = f"holon_own_{request.config.stash[_PG_RUN]}_{_worker(request)}"

    def make(*, migrated: bool = True) -> PgDatabase:
        db = pg.create_from_template(f"{prefix}_{next(counter)}", pg_template if migrated else None)
        made.append(db.name)
        return db

    try:
        yield make
    finally:
        for name in made:
            pg.drop(name)


@pytest.fixture(scope="module")
def pg_module_db(request: pytest.FixtureRequest, pg_template: str) -> Iterator[PgDatabase]:
    """A migrated database of the test module's own (for a module-scoped home on PostgreSQL, such as
    a daemon serving every test of the module), dropped after the module."""
    from helpers import pg

    name = f"holon_own_{request.config.stash[_PG_RUN]}_{_worker(request)}_m{next(_MODULE_DBS)}"
    db = pg.create_from_template(name, pg_template)
    try:
        yield db
    finally:
        pg.drop(db.name)


_MODULE_DBS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class EngineTarget:
    """What the ``engine`` fixture gives a test: which engine, and the storage URL to use."""

    name: Literal["sqlite", "postgresql"]
    url: str


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> EngineTarget:
    """The fixture parameter over both engines (RFC 0008, "One fixture parameter"): the home's SQLite
    file, or this worker's emptied PostgreSQL database, which ``HOLON_STORAGE_URL`` then names, so
    the storage fixtures (``settings``, ``store``) and ``Store.open`` follow it. Tests opt in by
    taking it (a module: an autouse fixture taking it); a test of SQLite-only behaviour in such a
    module is marked ``@sqlite_only(why)`` (``helpers.engines``)."""
    if request.param == "sqlite":
        return EngineTarget("sqlite", f"sqlite:///{home.db}")
    db: PgDatabase = request.getfixturevalue("pg_db")
    monkeypatch.setenv("HOLON_STORAGE_URL", db.url)
    return EngineTarget("postgresql", db.url)
