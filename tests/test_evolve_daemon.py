"""Evolve inside the daemon (RFC 0006): a slow job never stalls turns or maintenance; dead jobs show.

Real daemon, real ledger, litellm's real HTTP path to a scripted model on loopback; the model's
answer to the extraction prompt is slow on purpose.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.daemon import Daemon
from holon.evolve.jobs import JobQueue
from holon.evolve.model_extract import PROMPT
from holon.ledger import events as ev
from holon.memory.index import SearchIndex
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.providers.base import ModelSettings
from holon.runtime.providers.litellm_provider import LiteLLMProvider
from holon.testing import FakeLLM

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


SLOW_S = 15.0  # long enough for a loaded machine to run a turn meanwhile; the stop waits for it


@pytest.mark.slow  # waits out the slow model call at the stop
def test_a_slow_evolve_job_delays_neither_a_turn_nor_maintenance(tmp_path: Path) -> None:
    home = resolve_home(tmp_path / "home")
    base = load_settings(home)
    settings = base.model_copy(
        update={
            "daemon": base.daemon.model_copy(update={"tick_s": 0.05}),
            "evolve": base.evolve.model_copy(update={"model_extraction": True}),
        }
    )
    extraction_started: list[float] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][0]["content"] == PROMPT:
            extraction_started.append(time.monotonic())
            return {"content": '{"candidates": []}', "delay": SLOW_S}
        return {"content": "Noted."}

    with FakeLLM(script) as fake, Store.open(home, settings) as store:
        create_agent(store, "ada")
        model = ModelSettings(model="openai/fake", api_base=fake.url, timeout_s=30, context_window=32_000)
        provider = LiteLLMProvider(env={})

        async def go() -> None:
            daemon = Daemon(store, resolver=lambda a: (provider, model), poll_s=0.01)
            async with daemon.running(grace_s=SLOW_S + 5):
                daemon.submit("ada", "hello there", origin="operator:test", authority="operator", sender="operator", channel="test")  # fmt: skip
                await daemon.until_idle()
                for _ in range(400):  # the first turn's evolve job is now waiting on the slow model
                    if extraction_started:
                        break
                    await asyncio.sleep(0.025)
                assert extraction_started
                daemon.submit("ada", "the second question", origin="operator:test", authority="operator", sender="operator", channel="test")  # fmt: skip
                await daemon.until_idle()
                # Maintenance keeps ticking: the search index catches up with the second turn.
                index = SearchIndex(store)
                for _ in range(200):
                    if index.cursor() >= store.ledger.head():
                        break
                    await asyncio.sleep(0.02)
                assert index.cursor() >= store.ledger.head()
                # Both happened while the extraction call was still waiting on the model (a state,
                # not a stopwatch): its job still runs and has recorded no model use.
                assert JobQueue(store).counts()["running"] == 1
                assert not [e for e in store.ledger.read(0) if isinstance(e.payload, ev.EvolveModelUsed)]
                # The daemon stops cleanly with a job in flight: it finishes within the grace.

        asyncio.run(go())
        queue = JobQueue(store)
        assert queue.counts()["dead"] == 0 and queue.counts()["running"] == 0


def test_dead_jobs_are_visible_in_the_daemons_status(store: Store, clock: FakeClock, tmp_path: Path) -> None:
    from helpers.evolve import run_turns

    from holon.cli.daemon_cmd import _describe

    ada = create_agent(store, "ada")
    run_turns(store, clock, ada.agent_id, [("hello", ["ok"])])
    queue = JobQueue(store, max_attempts=1)
    queue.enqueue(clock.now_us())
    job = queue.lease("w", clock.now_us())
    assert job is not None and queue.fail(job, "RuntimeError: extractor fell over", clock.now_us()) == "dead"

    async def go() -> dict[str, Any]:
        daemon = Daemon(store, resolver=lambda a: (None, None), poll_s=0.01)  # type: ignore[arg-type,return-value]
        return daemon.status()

    status = asyncio.run(go())
    evolve = status["evolve"]
    assert evolve["jobs"]["dead"] == 1
    assert evolve["dead"] == [
        {"job": job.key, "agent_id": ada.agent_id, "attempts": 1, "error": "RuntimeError: extractor fell over"}
    ]
    text = _describe({"running": True, "state": "running", "pid": 1, "api": None, "status": status})
    assert "1 DEAD" in text


def _kill_a_job(home: Path) -> str:
    """A turn whose evolve job dies at its first failure; returns the job's key."""
    from helpers.evolve import run_turns

    paths = resolve_home(str(home))
    clock = FakeClock(start_us=time.time_ns() // 1000 + 3_600_000_000)  # after the CLI's retry (real time)
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        agent = store.agent("ada")
        if not store.ledger.query("SELECT 1 FROM events WHERE type = 'turn.settled'"):
            run_turns(store, clock, agent.agent_id, [("Remember that the cache is redis.", ["ok"])])
        queue = JobQueue(store, max_attempts=1)
        queue.enqueue(clock.now_us())
        job = queue.lease("w", clock.now_us())
        assert job is not None and queue.fail(job, "RuntimeError: boom", clock.now_us()) == "dead"
        return job.key


@pytest.mark.slow
def test_dead_jobs_are_retried_from_the_cli_and_the_api(tmp_path: Path, fast_ledger: None) -> None:
    from helpers.api_server import api_server
    from helpers.turn_cli import holon, quick_home

    from holon.evolve import review

    home = quick_home(tmp_path, "ada")
    key = _kill_a_job(home)
    r = holon(home, "memory", "retry-jobs", "--json")
    assert r.code == 0 and r.json() == {"retried": 1}, r
    assert holon(home, "memory", "retry-jobs").out.strip() == "no dead evolve jobs"

    _kill_a_job(home)
    with api_server(home, clock=FakeClock()) as server, server.client() as client:
        assert client.get("/v1/status").json()["evolve"]["dead"][0]["job"] == key
        assert client.post("/v1/evolve/retry-dead").json() == {"retried": 1}
        for _ in range(400):  # the daemon runs the job again, and this time it succeeds
            if client.get("/v1/status").json()["evolve"]["jobs"]["done"] == 1:
                break
            time.sleep(0.025)
        status = client.get("/v1/status").json()["evolve"]
        assert status["jobs"]["done"] == 1 and status["dead"] == []
        assert client.post("/v1/evolve/retry-dead").json() == {"retried": 0}
    with Store.open(resolve_home(str(home)), load_settings(resolve_home(str(home)))) as store:
        assert [s.entry.text for s in review.list_entries(store)] == ["The cache is redis."]
