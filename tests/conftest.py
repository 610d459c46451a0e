"""Shared fixtures: an isolated home per test, a FakeClock, an open ``Store``, the API server; and
the reaper (tests/helpers/reaper.py), which stops every process a test leaves behind."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import reaper
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

# Property tests build real databases; a per-example deadline only adds flakiness on slow CI.
hypothesis_settings.register_profile("holon", deadline=None, print_blob=True)
hypothesis_settings.load_profile("holon")


def pytest_configure(config: pytest.Config) -> None:
    reaper.pytest_configure(config)


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's HOLON_* variables, nor the terminal size pytest-xdist's workers
    set (COLUMNS=80 LINES=24: a serial run has none), so both runs format output alike."""
    for var in list(os.environ):
        if var.startswith("HOLON_") or var in ("COLUMNS", "LINES"):
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
