"""Durable memory views, recall through the search index, and provenance (RFC 0006).

* The markdown views under ``memory/durable/`` are rebuildable and complete: a daemon start
  brings back a view deleted or edited by hand (or never written: a crash between the append and
  the render) byte for byte, and an agent created on a workspace that already has durable memory
  shows it at once. Rendering twice writes nothing the second time.
* Recall uses the search index (FTS5, Porter stems) as a signal besides shared words; a
  forgotten or superseded entry leaves the index and is never recalled.
* ``holon memory inspect --stale`` / ``--status stale`` and the API's ``status=stale``; a
  verification adds its evidence to the entry's provenance and counts from its observation time.

Real SQLite ledger, real daemon start, the scripted provider for turns; the clock is injected.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.api_server import api_server
from helpers.evolve import run_turns
from helpers.turn_cli import cli_env, holon

from holon.clock import FakeClock, SystemClock
from holon.config import load_settings, resolve_home
from holon.daemon import Daemon
from holon.evolve import review
from holon.evolve.render import render_all
from holon.evolve.worker import Evolver
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory.index import SearchIndex, durable_matches
from holon.memory.recall import RecallLimits, content_terms, recall
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


def _turns(store: Store, clock: FakeClock, agent_id: str, *texts: str) -> None:
    run_turns(store, clock, agent_id, [(t, ["Noted."]) for t in texts])


def _views(agent: AgentState) -> dict[str, bytes]:
    root = Path(agent.home) / "memory" / "durable"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _start_and_stop(store: Store, clock: FakeClock) -> None:
    async def go() -> None:
        async with Daemon(store, clock=clock, poll_s=0.01).running(grace_s=1):
            pass

    asyncio.run(go())


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _remembered(store: Store, clock: FakeClock, ws: Path) -> tuple[AgentState, AgentState]:
    """Two agents on ``ws`` with a workspace fact and an accepted operator preference."""
    ada = create_agent(store, "ada", workspace=str(ws))
    create_agent(store, "bob", workspace=str(ws))
    _turns(store, clock, ada.agent_id, "Remember that the db is postgres.", "Always write tests first.")
    Evolver(store, clock=clock).drain()
    review.accept(store, review.list_proposals(store)[0].proposal_id)
    return store.agent("ada"), store.agent("bob")


@pytest.mark.slow  # a daemon start with its model processes
def test_a_daemon_start_rebuilds_views_deleted_or_edited_by_hand_byte_for_byte(
    store: Store, clock: FakeClock, ws: Path
) -> None:
    ada, bob = _remembered(store, clock, ws)
    before_ada, before_bob = _views(ada), _views(bob)
    assert {"workspace/MEMORY.md", "workspace/fact.md", "operator/MEMORY.md", "operator/preference.md"} <= set(
        before_ada
    )
    assert b"The db is postgres." in before_ada["workspace/MEMORY.md"]
    assert before_bob == before_ada  # one workspace, one operator: the same bytes in both homes

    root_ada = Path(ada.home) / "memory" / "durable"
    root_bob = Path(bob.home) / "memory" / "durable"
    for p in sorted(root_ada.rglob("*"), reverse=True):  # the whole view, gone
        p.unlink() if p.is_file() else p.rmdir()
    (root_bob / "workspace" / "MEMORY.md").write_text("# edited by hand\n")
    (root_bob / "workspace" / "fact.md").write_bytes(b"\x00 garbage")
    (root_bob / "operator" / "stray.md").write_text("not generated")

    _start_and_stop(store, clock)
    assert _views(store.agent("ada")) == before_ada
    assert _views(store.agent("bob")) == before_bob


@pytest.mark.slow  # a daemon start with its model processes
def test_a_crash_between_the_append_and_the_render_is_repaired_at_start(
    store: Store, clock: FakeClock, ws: Path
) -> None:
    ada, _bob = _remembered(store, clock, ws)
    owner = f"workspace:{ws.resolve()}"
    entry = ev.DurableEntry(scope="workspace", kind="fact", subject="fact:cache", text="The cache is redis.",
                            owner=owner, observed_us=clock.now_us())  # fmt: skip
    # Appended, then "crashed": nothing rendered it.
    store.append(NewEvent(ada.agent_id, ev.DurableRecorded(entry_id="mem-crash", entry=entry), origin="test", authority="runtime"))  # fmt: skip
    assert "The cache is redis." not in (Path(ada.home) / "memory/durable/workspace/MEMORY.md").read_text()

    _start_and_stop(store, clock)
    for name in ("ada", "bob"):
        assert (
            "The cache is redis." in (Path(store.agent(name).home) / "memory/durable/workspace/MEMORY.md").read_text()
        )


def test_rendering_again_writes_nothing(store: Store, clock: FakeClock, ws: Path) -> None:
    ada, _bob = _remembered(store, clock, ws)
    index = Path(ada.home) / "memory/durable/workspace/MEMORY.md"
    stamp = index.stat().st_mtime_ns
    assert render_all(store) == []
    assert index.stat().st_mtime_ns == stamp
    # An agent with nothing in a scope gets no empty view for it (no MEMORY.md files by thousands).
    loner = create_agent(store, "loner")
    assert not (Path(loner.home) / "memory/durable/workspace").exists()
    assert not (Path(loner.home) / "memory/durable/agent").exists()


def test_a_new_agent_on_a_workspace_shows_its_durable_memory_at_once(
    store: Store, clock: FakeClock, ws: Path, tmp_path: Path
) -> None:
    _remembered(store, clock, ws)
    carol = create_agent(store, "carol", workspace=str(ws))
    assert _views(carol) == _views(store.agent("ada"))
    other = tmp_path / "elsewhere"
    other.mkdir()
    dave = create_agent(store, "dave", workspace=str(other))
    views = _views(dave)
    assert "workspace/MEMORY.md" not in views  # another workspace's facts are not dave's
    assert b"Always write tests first." in views["operator/MEMORY.md"]  # the operator's are everyone's


# --- recall through the search index ------------------------------------------------------------


def _record(store: Store, agent: AgentState, entry_id: str, kind: str, subject: str, text: str, *,
            supersedes: list[str] | None = None, observed_us: int = 1) -> None:  # fmt: skip
    entry = ev.DurableEntry(scope="agent", kind=kind, subject=subject, text=text, owner=f"agent:{agent.agent_id}",  # type: ignore[arg-type]
                            observed_us=observed_us)  # fmt: skip
    recorded = ev.DurableRecorded(entry_id=entry_id, entry=entry, supersedes=supersedes or [])
    store.append(NewEvent(agent.agent_id, recorded, origin="test", authority="runtime"))


def _recalled(store: Store, agent: AgentState, query: str, now_us: int) -> list[str]:
    result = recall(store, store.agent(agent.agent_id), query, now_us, RecallLimits(limit=5, pending=0))
    assert len(result.entries) <= 5
    return [r.ref for r in result.entries]


def _indexed_ids(store: Store) -> set[str]:
    return {r[0] for r in store.local_db().query("SELECT entry_id FROM search_durable_docs")}


def test_recall_finds_through_the_index_an_entry_sharing_no_word_with_the_input(store: Store, clock: FakeClock) -> None:
    ada = create_agent(store, "ada")
    now = clock.now_us()
    for i, text in enumerate(["Answer in short paragraphs.", "Use metric units.", "Cite the source of numbers."]):
        _record(store, ada, f"mem-p{i}", "preference", f"pref:p{i}", text, observed_us=now)
    for i, text in enumerate(["The operator is Ada Lovelace.", "The team is Analytics."]):
        _record(store, ada, f"mem-i{i}", "identity", f"identity:i{i}", text, observed_us=now)
    fact = "Connections to the warehouse require the VPN."
    _record(store, ada, "mem-vpn", "fact", "fact:warehouse access", fact, observed_us=now)
    query = "why does connecting fail"
    assert content_terms(query) & content_terms(fact) == set()  # no shared word, even lightly stemmed

    # Not indexed yet: five entries with higher priors take the places.
    assert "durable:mem-vpn" not in _recalled(store, ada, query, now)
    SearchIndex(store).catch_up()
    # Porter stems "connecting" and "connections" alike: the index finds it, recall keeps it.
    assert durable_matches(store, [f"agent:{ada.agent_id}"], query) == {"mem-vpn": 1.0}
    assert "durable:mem-vpn" in _recalled(store, ada, query, now)
    # Another agent's owner never matches (scoped like the entry).
    assert durable_matches(store, ["agent:agt_someone_else", "operator"], query) == {}

    # Superseded: the new text replaces the old in the index.
    _record(store, ada, "mem-vpn2", "fact", "fact:warehouse access", "Connections to the warehouse need a token now.",
            supersedes=["mem-vpn"], observed_us=now)  # fmt: skip
    SearchIndex(store).catch_up()
    assert "mem-vpn" not in _indexed_ids(store) and "mem-vpn2" in _indexed_ids(store)
    assert "durable:mem-vpn2" in _recalled(store, ada, query, now)

    # Forgotten: out of the index and never recalled, however well it matches.
    review.forget(store, "mem-vpn2")
    SearchIndex(store).catch_up()
    assert "mem-vpn2" not in _indexed_ids(store)
    assert durable_matches(store, [f"agent:{ada.agent_id}"], query) == {}
    for q in (query, "Connections to the warehouse need a token now.", "warehouse token"):
        assert not {"durable:mem-vpn", "durable:mem-vpn2"} & set(_recalled(store, ada, q, now))


def test_the_durable_index_is_rebuilt_like_the_rest_of_the_index(store: Store, clock: FakeClock) -> None:
    ada = create_agent(store, "ada")
    _record(store, ada, "mem-a", "fact", "fact:a", "The deploys run nightly.", observed_us=clock.now_us())
    _record(store, ada, "mem-b", "fact", "fact:b", "The deployment key rotates.", observed_us=clock.now_us())
    review.forget(store, "mem-a")
    index = SearchIndex(store)
    index.catch_up()
    before = store.local_db().query("SELECT d.entry_id, d.owner, f.body, f.meta, f.scope FROM search_durable_docs d "
                                "JOIN search_durable f ON f.rowid = d.id ORDER BY d.entry_id")  # fmt: skip
    index.rebuild()
    after = store.local_db().query("SELECT d.entry_id, d.owner, f.body, f.meta, f.scope FROM search_durable_docs d "
                               "JOIN search_durable f ON f.rowid = d.id ORDER BY d.entry_id")  # fmt: skip
    assert after == before and [r[0] for r in after] == ["mem-b"]
    # Any text is a valid query: FTS syntax in the input is quoted, never parsed.
    for hostile in ('"unbalanced', "deploy* OR NEAR(", "scope : x", "AND OR NOT", ""):
        durable_matches(store, [f"agent:{ada.agent_id}"], hostile)


# --- provenance of verifications; the stale filter ---------------------------------------------


def test_a_verification_adds_its_evidence_and_counts_from_when_it_was_observed(
    store: Store, clock: FakeClock, ws: Path
) -> None:
    ada = create_agent(store, "ada", workspace=str(ws))
    _turns(store, clock, ada.agent_id, "Remember that the db is postgres.", "Remember that the db is postgres.")
    said = store.ledger.query("SELECT seq, ts_us FROM events WHERE type = 'message.received' ORDER BY seq")
    (first_seq, first_us), (again_seq, again_us) = said
    clock.advance(seconds=3 * 86_400)  # the jobs run days later (a backlog, a retry, a backfill)
    Evolver(store, clock=clock).drain()

    [entry] = review.list_entries(store, status="active")
    assert entry.entry.evidence == [first_seq] and entry.entry.observed_us == first_us
    assert entry.verified_by == [again_seq]
    assert entry.verified_us == again_us  # when it was seen again, not when the job ran
    verified = store.ledger.query("SELECT ts_us FROM events WHERE type = 'durable.verified'")
    assert verified[0][0] > again_us + 86_400 * 1_000_000  # the job's own time was days later
    fact = (Path(ada.home) / "memory/durable/workspace/fact.md").read_text()
    assert f"- evidence: event:{first_seq}" in fact and f"- seen again in: event:{again_seq}" in fact

    assert store.replay().ok  # replayed from the ledger: the same provenance, byte for byte


def _entry(kind: str, subject: str, text: str, owner: str, observed_us: int) -> ev.DurableEntry:
    return ev.DurableEntry(scope="workspace", kind=kind, subject=subject, text=text, owner=owner,  # type: ignore[arg-type]
                           observed_us=observed_us, stale_after_s=30 * 86_400, verification="verify_before_use")  # fmt: skip


def _seed_ages(home: Path, now_us: int) -> None:
    """A stale fact (seen 40 days ago), a fresh one (yesterday) and a superseded one."""
    day = 86_400 * 1_000_000
    paths = resolve_home(str(home))
    with Store.open(paths, load_settings(paths)) as store:
        (home / "ws").mkdir(parents=True, exist_ok=True)
        ada = create_agent(store, "ada", workspace=str(home / "ws"))
        owner = f"workspace:{(home / 'ws').resolve()}"
        events = [
            ev.DurableRecorded(entry_id="mem-old", entry=_entry("fact", "fact:ci", "CI runs on Jenkins.", owner, now_us - 50 * day)),
            ev.DurableRecorded(entry_id="mem-stale", entry=_entry("fact", "fact:db", "The db is postgres 14.", owner, now_us - 40 * day)),
            ev.DurableRecorded(entry_id="mem-fresh", entry=_entry("fact", "fact:ci", "CI runs on GitHub Actions.", owner, now_us - day),
                               supersedes=["mem-old"]),
        ]  # fmt: skip
        store.append(*[NewEvent(ada.agent_id, p, origin="test", authority="runtime") for p in events])


@pytest.mark.slow
def test_inspect_and_the_api_filter_stale_entries(tmp_path: Path, fast_ledger: None) -> None:
    home = tmp_path / "home"
    now = SystemClock().now_us()
    _seed_ages(home, now)

    def ids(*args: str) -> list[str]:
        r = holon(home, "memory", "inspect", "ada", "--json", *args)
        assert r.code == 0, r
        return sorted(e["entry_id"] for e in r.json())

    assert ids("--stale") == ids("--status", "stale") == ["mem-stale"]
    assert ids() == ids("--status", "active") == ["mem-fresh", "mem-stale"]
    assert ids("--status", "superseded") == ["mem-old"]
    assert ids("--status", "all") == ["mem-fresh", "mem-old", "mem-stale"]
    bad = holon(home, "memory", "inspect", "--stale", "--status", "superseded")
    assert bad.code == 2 and "--stale" in bad.err, bad
    assert holon(home, "memory", "inspect", "--status", "old").code == 2
    table = holon(home, "memory", "inspect", "--stale", env=cli_env(COLUMNS="200"))
    assert "The db is postgres 14." in table.out and "GitHub Actions" not in table.out, table

    with api_server(home, clock=FakeClock(start_us=now)) as server, server.client() as c:

        def api(**params: str) -> list[str]:
            r = c.get("/v1/agents/ada/memory/durable", params=params)
            assert r.status_code == 200, r.text
            return sorted(o["entry"]["entry_id"] for o in r.json())

        assert api(status="stale") == ["mem-stale"]
        assert api() == ["mem-fresh", "mem-stale"]
        assert api(status="superseded") == ["mem-old"]
        assert c.get("/v1/agents/ada/memory/durable", params={"status": "old"}).status_code == 422
