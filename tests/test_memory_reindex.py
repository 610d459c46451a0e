"""``holon memory reindex``: the search index rebuilt from the ledger gives the results the
incremental index gave, for the whole home and for one agent; the CLI shows a progress bar on a
terminal (pexpect) and a few plain lines otherwise.

Real SQLite homes, the real CLI in subprocesses; the history is written through the store the
way the runtime writes it (``helpers.memsearch``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pexpect
import pytest
from helpers.memsearch import answer, say
from helpers.turn_cli import cli_env, holon, holon_argv

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.memory.access import search_memory
from holon.memory.index import SearchIndex
from holon.memory.reindex import reindex
from holon.memory.writes import write_file
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``; on PostgreSQL
    the index lives in the node's own file, RFC 0008 step 7), but those marked ``sqlite_only``."""
    return engine


QUERIES = ["aardvark", "camel dingo", "round 7", "fine", "koala", "deploy checklist", "ibex round"]
ANIMALS = ["aardvark", "bison", "camel", "dingo", "emu", "ferret", "gnu", "hyena", "ibex", "koala"]


def _history(store: Store, clock: FakeClock, agent: AgentState, rounds: range) -> None:
    for i in rounds:
        a, b = ANIMALS[i % len(ANIMALS)], ANIMALS[(i * 7 + 3) % len(ANIMALS)]
        say(store, agent, f"Round {i}: how is the {a} doing next to the {b}?")
        answer(store, agent, f"The {a} in round {i} is fine.")
        if i % 6 == 5:
            clock.advance(seconds=3600.0)  # a new conversation segment


def _results(store: Store, agents: list[AgentState]) -> dict[str, tuple[int, list[str]]]:
    """Every query's matches for every agent, as its memory_search tool sees them: how many, and
    which documents (as a set).

    Not their order: the engine's BM25 statistics count a rewritten document's old version until
    its segment is merged, so an index that rewrote documents on the way and one built in one
    pass score a few percent apart, and near ties may swap (RFC 0004, "Engine")."""
    out = {}
    for agent in agents:
        for q in QUERIES:
            result = search_memory(store, store.agent(agent.agent_id), q, limit=100)
            assert result.total <= 100, q
            out[f"{agent.name}:{q}"] = (result.total, sorted(h.ref for h in result.hits))
    return out


def _build(store: Store, clock: FakeClock) -> list[AgentState]:
    """Two agents' histories, searched as they grow (the index catches up in pieces)."""
    alice, bob = create_agent(store, "alice"), create_agent(store, "bob")
    write_file(store, alice, "agent", "notes/deploy.md", "replace", "# Deploy checklist\n\nThe koala deploy needs a dingo review.\n",
               origin="t", authority="agent")  # fmt: skip
    for start in range(0, 24, 6):
        _history(store, clock, alice, range(start, start + 6))
        _history(store, clock, bob, range(start + 100, start + 103))
        _results(store, [alice, bob])  # each search catches the index up to here
    return [alice, bob]


def test_a_rebuild_gives_the_incremental_results(store: Store, clock: FakeClock) -> None:
    agents = _build(store, clock)
    incremental = _results(store, agents)
    assert sum(len(hits) for _n, hits in incremental.values()) > 50, "the queries find things"
    assert any(ref.startswith("file:") for _n, hits in incremental.values() for ref in hits)

    done = reindex(store)
    assert done["agent"] is None and done["events"] == store.ledger.head() and done["files"] >= 1
    assert _results(store, agents) == incremental

    alice = agents[0]
    before = {(k, o) for k, o in store.local_db().query("SELECT key, owner FROM search_docs")}
    seen: list[tuple[int, int]] = []
    done = reindex(store, agent=alice, progress=lambda n, total: seen.append((n, total)))
    assert done["agent"] == "alice" and done["documents"] > 0 and seen and seen[-1][0] == seen[-1][1]
    assert {(k, o) for k, o in store.local_db().query("SELECT key, owner FROM search_docs")} == before
    assert _results(store, agents) == incremental


def test_a_damaged_index_is_repaired_by_a_rebuild(store: Store, clock: FakeClock) -> None:
    """The remedy it exists for: documents lost from the index come back."""
    agents = _build(store, clock)
    incremental = _results(store, agents)
    index = SearchIndex(store)
    index.catch_up()
    replies = [int(r[0]) for r in store.local_db().query("SELECT id FROM search_docs WHERE kind = 'reply'")]
    index.engine.write([], replies)  # lost from the engine, still in SQLite
    assert index.engine.num_docs() < sum(index.owner_docs().values())
    reindex(store, agent=agents[0])
    reindex(store, agent=agents[1])
    assert _results(store, agents) == incremental


def test_an_engine_that_lost_documents_is_rebuilt_by_the_next_search(store: Store, clock: FakeClock) -> None:
    """Without anyone asking: the engine holds fewer documents than SQLite counts (its directory
    was deleted, or damaged), so the next catch-up rebuilds the projection from the ledger."""
    agents = _build(store, clock)
    incremental = _results(store, agents)
    index = SearchIndex(store)
    shutil.rmtree(index.engine.path)
    assert _results(store, agents) == incremental
    assert index.engine.num_docs() == sum(index.owner_docs().values()) > 0


# --- through the CLI ------------------------------------------------------------------------------


@pytest.fixture
def filled_home(tmp_path: Path, fast_ledger: None) -> Path:
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    paths = resolve_home(home)
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        _build(store, clock)
    return home


@pytest.mark.slow
def test_reindex_cli_keeps_search_results_and_prints_plain_progress(filled_home: Path) -> None:
    before = holon(filled_home, "memory", "search", "alice", "koala dingo", "--json").json()
    r = holon(filled_home, "memory", "reindex")
    assert r.code == 0 and r.out.startswith("reindexed all agents: "), r
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert lines[0].startswith("reindexing memory: ") and "done" not in lines[0], r.err
    assert lines[-1].startswith("reindexing memory: ") and "done" in lines[-1], r.err
    assert len(lines) <= 4 and "\x1b[" not in r.err, "a few plain lines, no terminal codes in a pipe"
    after = holon(filled_home, "memory", "search", "alice", "koala dingo", "--json").json()
    assert after["hits"] == before["hits"] != []

    one = holon(filled_home, "memory", "reindex", "--agent", "bob")
    assert one.code == 0 and one.out.startswith("reindexed agent bob: "), one
    missing = holon(filled_home, "memory", "reindex", "--agent", "nobody")
    assert missing.code == 3 and "Traceback" not in missing.err, missing


@pytest.mark.slow
def test_reindex_on_a_terminal_draws_a_progress_bar(filled_home: Path) -> None:
    argv = holon_argv("--home", filled_home, "memory", "reindex")
    child = pexpect.spawn(argv[0], argv[1:], env=cli_env(), encoding="utf-8", timeout=60, dimensions=(30, 100))
    child.logfile_read = sys.stdout
    try:
        child.expect("reindexed all agents")
        seen = child.before or ""
    finally:
        child.close(force=True)
    assert "reindexing memory" in seen and "━" in seen, "rich's bar was drawn on the terminal"
    assert ", done" not in seen, "no plain lines on a terminal"


def test_plain_progress_is_not_chatty() -> None:
    """Without a terminal: a line at the first step, at most one per PLAIN_EVERY_S, one at the end;
    nothing at all when the work fails before its first step (the error is the one line)."""
    import io

    from holon.cli.progress import progress

    out = io.StringIO()
    with progress("working", 10_000, stream=out) as bar:
        for i in range(10_000):
            bar.update(i + 1)
    lines = out.getvalue().splitlines()
    assert len(lines) <= 3, lines
    assert lines[0].startswith("working: 1/10000, ")
    assert lines[-1].startswith("working: 10000/10000, done")
    quiet = io.StringIO()
    with pytest.raises(RuntimeError), progress("failing", 5, stream=quiet):
        raise RuntimeError("before any step")
    assert quiet.getvalue() == ""


@pytest.mark.slow
def test_json_of_the_cli_is_unchanged_by_progress(filled_home: Path) -> None:
    r = holon(filled_home, "memory", "reindex", "--agent", "alice", "--json")
    assert r.code == 0 and r.err == "", r
    done = json.loads(r.out)
    assert set(done) == {"agent", "events", "files", "documents", "seconds"}
    assert done["agent"] == "alice" and done["events"] > 50 and done["documents"] > 20
