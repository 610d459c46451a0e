"""The search index as a projection: what becomes a document, the cursor committed with its rows,
rebuilds that equal incremental builds (after a SIGKILL too), curated files re-read when they change,
and the text folding that makes unsegmented scripts searchable.

Real SQLite, real files, real processes; no mocks.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.memsearch import answer, fts_rows, index_rows, say
from helpers.props import examples
from helpers.turn_cli import cli_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings, resolve_home
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import access as memory_access
from holon.memory import index as search_index
from holon.memory.access import search_memory
from holon.memory.index import TOOL_RESULT_CAP, SearchIndex
from holon.memory.text import engine_term, fold, plan_query
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


INDEXER = Path(__file__).parent / "helpers" / "indexer.py"
HOUR = 3600.0


def refs(store: Store, agent: AgentState, query: str, **options: object) -> list[str]:
    return [h.ref for h in search_memory(store, store.agent(agent.agent_id), query, **options).hits]  # type: ignore[arg-type]


def docs_by_kind(store: Store) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, kind in store.local_db().query("SELECT key, kind FROM search_docs ORDER BY id"):
        out.setdefault(kind, []).append(key)
    return out


def tool_result(store: Store, agent: AgentState, tool: str, output: str, *, call_id: str = "c1") -> int:
    [_called, done] = store.append(
        NewEvent(agent.agent_id, ev.ToolCalled(call_id=call_id, tool=tool, arguments="{}")),
        NewEvent(agent.agent_id, ev.ToolResulted(call_id=call_id, tool=tool, status="ok", output=output)),
    )
    return done.seq


# --- what becomes a document ------------------------------------------------------------------


def test_every_indexed_kind_is_found_by_its_own_words(
    store: Store, clock: FakeClock, alice: AgentState, bob: AgentState
) -> None:
    # An hour between events: no neighbouring-turn context links them, each is found on its own.
    def later() -> None:
        clock.advance(seconds=HOUR)

    expected: dict[str, tuple[str, str]] = {}  # word -> (ref, kind)
    expected["flamingo"] = (f"event:{say(store, alice, 'Please rotate the flamingo credentials').seq}", "message")
    later()
    mail = say(store, alice, "Invoice from the pelican supplier", sender="billing@example.com", authority="external")
    expected["pelican"] = (f"event:{mail.seq}", "message")
    later()
    peer = say(store, alice, "Bob here: the heron migration finished", sender="bob", authority="agent")
    expected["heron"] = (f"event:{peer.seq}", "message")
    later()
    expected["walrus"] = (f"event:{answer(store, alice, 'I moved the walrus backups to cold storage').seq}", "reply")
    later()
    [brief] = store.append(
        NewEvent(alice.agent_id, ev.BriefDelivered(kind="result", text="The ostrich report is done"))
    )
    expected["ostrich"] = (f"event:{brief.seq}", "brief")
    later()
    lynx = tool_result(store, alice, "run_command", "exit code: 0\nlynx build ok")
    expected["lynx"] = (f"event:{lynx}", "tool_result")
    for i, tool in enumerate(["memory_search", "memory_get", "read_output"]):
        tool_result(store, alice, tool, f"narwhal appears in {tool} output", call_id=f"m{i}")
    later()
    [decision] = store.append(NewEvent(alice.agent_id, ev.DecisionRecorded(text="We chose the toucan database")))
    expected["toucan"] = (f"event:{decision.seq}", "decision")
    later()
    store.append(
        NewEvent(
            alice.agent_id,
            ev.EpisodeSealed(
                episode_id="ep_lemur", seq_start=3, seq_end=4, boundary="idle_gap",
                topic="Lemur planning", summary="Planned the lemur enclosure", decisions=["Use larch wood"],
            ),
        )
    )  # fmt: skip
    expected["lemur"] = ("episode:ep_lemur", "episode")
    expected["larch"] = ("episode:ep_lemur", "episode")
    store.append(
        NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id="wi_ibis", title="Ibis export", plan=["write CSV"]))
    )
    expected["ibis"] = ("work_item:wi_ibis", "work_item")
    store.append(
        NewEvent(alice.agent_id, ev.TaskCreated(task_id="task_gnu", title="gnu tests", spec={"command": "make gnu"})),
        NewEvent(alice.agent_id, ev.TaskResulted(task_id="task_gnu", state="succeeded", output="17 okapi passed")),
    )
    expected["okapi"] = ("task:task_gnu", "task")
    write_file(store, alice, "agent", None, "replace", "# Self\n## Facts\n- quokka lives in prod\n",
               origin="t", authority="agent")  # fmt: skip
    expected["quokka"] = ("file:agent/self.md", "file")
    say(store, bob, "bob's own flamingo, walrus and quokka")

    for word, (ref, kind) in expected.items():
        # Sealed episodes quote the conversation too, so narrow to the kind for the exact answer.
        result = search_memory(store, store.agent(alice.agent_id), word, kinds=[kind])
        assert [(h.ref, h.kind) for h in result.hits] == [(ref, kind)], word
        assert ref in refs(store, alice, word), word
    assert refs(store, alice, "narwhal") == []  # views of memory are not memory
    kinds = docs_by_kind(store)
    assert {"message", "reply", "brief", "tool_result", "decision", "episode", "work_item", "task", "file"} <= set(
        kinds
    )


def test_tool_results_and_task_outputs_are_capped(store: Store, alice: AgentState) -> None:
    head = "alpha " * 10
    output = head + "x" * (TOOL_RESULT_CAP - len(head) - 5) + " beyondcap " + "y" * 5_000
    seq = tool_result(store, alice, "run_command", output)
    store.append(
        NewEvent(alice.agent_id, ev.TaskCreated(task_id="task_big", title="big", spec={"command": "make big"})),
        NewEvent(alice.agent_id, ev.TaskResulted(task_id="task_big", state="failed", output=output, exit_code=2)),
    )
    assert set(refs(store, alice, "alpha")) == {"task:task_big", f"event:{seq}"}
    assert refs(store, alice, "beyondcap") == []
    [(text,)] = store.local_db().query("SELECT text FROM search_docs WHERE key = ?", [f"event:{seq}"])
    assert len(text) == TOOL_RESULT_CAP and text == output[:TOOL_RESULT_CAP]
    [(title, task_text)] = store.local_db().query("SELECT title, text FROM search_docs WHERE key = 'task:task_big'")
    assert title == "big (failed)" and task_text.startswith("make big\nalpha") and len(task_text) <= 9 + TOOL_RESULT_CAP


def test_a_work_item_is_one_document_rewritten_as_it_changes(store: Store, alice: AgentState) -> None:
    item = "wi_inv"

    def item_docs() -> list[tuple[object, ...]]:
        SearchIndex(store).catch_up()
        return [r for r in index_rows(store) if r[3] == "work_item"]

    store.append(NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id=item, title="Quarterly invoices")))
    assert refs(store, alice, "quarterly") == [f"work_item:{item}"]
    store.append(
        NewEvent(alice.agent_id, ev.TodoChanged(work_item_id=item, op="add", todo_id="t1", text="email accountant"))
    )
    assert refs(store, alice, "accountant") == [f"work_item:{item}"]
    store.append(NewEvent(alice.agent_id, ev.WorkItemUpdated(work_item_id=item, title="Annual receipts")))
    assert refs(store, alice, "receipts") == [f"work_item:{item}"]
    assert refs(store, alice, "quarterly") == []  # the old title is gone, not kept beside the new one
    store.append(NewEvent(alice.agent_id, ev.WorkItemCompleted(work_item_id=item, report="Filed with the zebrafish")))
    [doc] = item_docs()
    assert doc[0] == f"work_item:{item}" and doc[5] == "Annual receipts (completed)"
    assert refs(store, alice, "zebrafish", kinds=["work_item"]) == [f"work_item:{item}"]
    assert store.local_db().query("SELECT count(*) FROM search_docs WHERE key = ?", [f"work_item:{item}"]) == [(1,)]
    # Each of its four events made a version; the three before the last stay in the engine's
    # statistics, superseded (whatever the batches: RFC 0008, "Identical ranking on every node").
    versions = "SELECT seq, superseded, title FROM search_docs WHERE ref = ? ORDER BY id"
    assert [r[1:] for r in store.local_db().query(versions, [f"work_item:{item}"])] == [
        (1, "Quarterly invoices (open)"), (1, "Quarterly invoices (open)"), (1, "Annual receipts (open)"),
        (0, "Annual receipts (completed)"),
    ]  # fmt: skip
    assert len(SearchIndex(store).superseded()) == 3


def test_a_task_is_one_document_with_its_latest_state(store: Store, alice: AgentState) -> None:
    store.append(NewEvent(alice.agent_id, ev.TaskCreated(task_id="t9", title="deploy", spec={"command": "make ship"})))
    assert refs(store, alice, "ship") == ["task:t9"]
    store.append(NewEvent(alice.agent_id, ev.TaskResulted(task_id="t9", state="succeeded", output="shipped v2")))
    SearchIndex(store).catch_up()
    [doc] = [r for r in index_rows(store) if r[3] == "task"]
    assert doc[:4] == ("task:t9", "task:t9", f"agent:{alice.agent_id}", "task") and doc[5] == "deploy (succeeded)"
    assert doc[6] == "make ship\nshipped v2"


# --- curated files --------------------------------------------------------------------------------


def test_curated_files_are_indexed_by_section_and_follow_hand_edits_and_deletes(
    store: Store, alice: AgentState
) -> None:
    write_file(store, alice, "agent", "notes/pets.md", "replace",
               "# Pets\nintro\n## Cats\nMittens the tabby\n## Dogs\nRex the beagle\n", origin="t", authority="agent")  # fmt: skip
    hits = search_memory(store, alice, "tabby beagle").hits
    assert {(h.ref, h.title) for h in hits} == {
        ("file:agent/notes/pets.md", "agent/notes/pets.md > Cats"),
        ("file:agent/notes/pets.md", "agent/notes/pets.md > Dogs"),
    }
    path = Path(alice.home) / "memory" / "notes" / "pets.md"
    path.write_text("# Pets\n## Cats\nMittens the calico, now fourteen\n", encoding="utf-8")  # by hand
    assert refs(store, alice, "tabby") == [] and refs(store, alice, "beagle") == []
    assert refs(store, alice, "calico") == ["file:agent/notes/pets.md"]
    # An edit keeping the size is still seen (the modification time changed).
    path.write_text("# Pets\n## Cats\nMittens the siamese, now fourteen\n", encoding="utf-8")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert refs(store, alice, "siamese") == ["file:agent/notes/pets.md"] and refs(store, alice, "calico") == []
    path.unlink()
    assert refs(store, alice, "siamese") == []
    assert store.local_db().query("SELECT count(*) FROM search_docs WHERE ref = 'file:agent/notes/pets.md'") == [(0,)]
    counts = dict(store.local_db().query("SELECT owner, count(*) FROM search_docs GROUP BY owner"))
    assert SearchIndex(store).owner_docs() == {o: counts.get(o, 0) for o in SearchIndex(store).owner_docs()}


def test_a_listing_cut_short_by_the_file_cap_deletes_nothing(
    store: Store, alice: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b"):
        write_file(store, alice, "agent", f"notes/{name}.md", "replace", f"# {name}\nmarmot {name}\n",
                   origin="t", authority="agent")  # fmt: skip
    assert len(refs(store, alice, "marmot")) == 2
    monkeypatch.setattr(memory_access, "MAX_FILES", 1)  # lists notes/a.md only: no sign b.md was deleted
    assert sorted(refs(store, alice, "marmot")) == ["file:agent/notes/a.md", "file:agent/notes/b.md"]
    monkeypatch.undo()
    (Path(alice.home) / "memory" / "notes" / "b.md").unlink()
    assert refs(store, alice, "marmot") == ["file:agent/notes/a.md"]  # a full listing without b.md: b.md goes


# --- the cursor ---------------------------------------------------------------------------------


ANIMALS = ("aardvark", "badger", "camel", "dingo", "egret", "ferret", "gecko", "hyena", "impala", "jackal", "koala")


def mixed_history(store: Store, clock: FakeClock, agent: AgentState, rounds: range) -> None:
    """Conversation with pauses, tool results, briefs, decisions, and work items and tasks that change."""
    animals = ANIMALS
    for i in rounds:
        a, b = animals[i % len(animals)], animals[(i * 7 + 3) % len(animals)]
        say(store, agent, f"Round {i}: how is the {a} doing next to the {b}?")
        answer(store, agent, f"The {a} in round {i} is fine.")
        item = f"wi_{i // 4}"
        if i % 4 == 0:
            store.append(NewEvent(agent.agent_id, ev.WorkItemOpened(work_item_id=item, title=f"Feed the {a}")))
        elif i % 4 == 1:
            store.append(NewEvent(agent.agent_id, ev.TodoChanged(work_item_id=item, op="add", todo_id="t", text=b)))
        elif i % 4 == 2:
            store.append(NewEvent(agent.agent_id, ev.WorkItemUpdated(work_item_id=item, title=f"Feed the {b}")))
        else:
            store.append(NewEvent(agent.agent_id, ev.WorkItemCompleted(work_item_id=item, report=f"{b} fed")))
        if i % 3 == 0:
            tool_result(store, agent, "run_command", f"{a} log line {i}\n" * (i % 5 + 1), call_id=f"c{i}")
        if i % 5 == 0:
            task = f"task_{i}"
            store.append(NewEvent(agent.agent_id, ev.TaskCreated(task_id=task, title=f"weigh {a}")))
            store.append(NewEvent(agent.agent_id, ev.TaskResulted(task_id=task, state="succeeded", output=b)))
        if i % 7 == 0:
            store.append(
                NewEvent(agent.agent_id, ev.DecisionRecorded(text=f"keep the {a} apart from the {b}")),
                NewEvent(agent.agent_id, ev.BriefDelivered(kind="progress", text=f"{a} moved")),
            )
        if i % 6 == 5:
            clock.advance(seconds=HOUR)  # a new conversation segment


QUERIES = ["aardvark", "camel dingo", "round 7", "fed", "feed koala", "log line", "moved", "weigh"]


def snapshot(store: Store) -> tuple[object, ...]:
    """The index as a reader sees it: documents, matched text, owner counts and query results."""
    owners = dict(store.local_db().query("SELECT owner, docs FROM search_owners WHERE docs != 0"))
    counted = dict(store.local_db().query("SELECT owner, count(*) FROM search_docs GROUP BY owner"))
    assert owners == counted
    keys = {int(i): k for i, k in store.local_db().query("SELECT id, key FROM search_docs")}
    engine = SearchIndex(store).engine
    assert engine.num_docs() == len(keys)  # the engine holds each document once, nothing else
    matches = []
    for q in QUERIES:
        plan = plan_query(q)
        hits, n = engine.top(engine.analyze(engine_term(t) for t in plan.terms), owners=sorted(owners), limit=100_000)
        assert n == len(hits)
        matches.append(sorted(keys[i] for i, _score in hits))
    # Segment ids are the ids of their first turns: compare them by that turn's key.
    membership = store.local_db().query(
        "SELECT d.key, first.key FROM search_docs d JOIN search_docs first ON first.id = d.segment ORDER BY d.key"
    )
    segments = store.local_db().query(
        "SELECT first.key, i.turns, i.last_ts_us FROM search_segment_info i JOIN search_docs first ON first.id = i.id "
        "ORDER BY first.key"
    )
    assert len(segments) == store.local_db().query("SELECT count(*) FROM search_segment_info")[0][0] > 1
    return index_rows(store), fts_rows(store), counted, matches, membership, segments


def test_catch_up_in_steps_reports_its_lag_and_equals_a_rebuild(
    store: Store, clock: FakeClock, alice: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    mixed_history(store, clock, alice, range(40))
    head = store.ledger.head()
    index = SearchIndex(store)
    assert index.freshness().indexed_seq == 0 and index.freshness().lag == head
    monkeypatch.setattr(search_index, "BATCH", 4)  # many transactions, boundaries inside work items
    done = 0
    rng = random.Random(7)
    while done < head:
        step = rng.randint(1, 17)
        fresh = index.catch_up(max_events=step)
        done = min(head, done + step)
        assert (fresh.indexed_seq, fresh.head_seq, fresh.lag) == (done, head, head - done)
        assert index.cursor() == done
    incremental = snapshot(store)
    assert index.rebuild().lag == 0
    assert snapshot(store) == incremental
    assert len(incremental[0]) > 100


def test_search_reports_an_index_that_is_current(store: Store, clock: FakeClock, alice: AgentState) -> None:
    mixed_history(store, clock, alice, range(5))
    SearchIndex(store).catch_up(max_events=3)
    result = search_memory(store, alice, "aardvark")
    assert result.freshness.indexed_seq == result.freshness.head_seq == store.ledger.head()
    assert result.as_dict()["freshness"] == {"indexed_seq": store.ledger.head(), "head_seq": store.ledger.head(),
                                             "lag_events": 0}  # fmt: skip


def test_bumping_the_index_version_rebuilds(
    store: Store, clock: FakeClock, alice: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    mixed_history(store, clock, alice, range(12))
    SearchIndex(store).catch_up()
    good = snapshot(store)
    with store.local_db().transaction() as tx:
        tx.conn.execute("UPDATE search_docs SET text = 'stale', title = 'stale'")
    assert snapshot(store)[0] != good[0]
    SearchIndex(store).catch_up()
    assert snapshot(store)[0] != good[0]  # same version: nothing to redo
    monkeypatch.setattr(search_index, "INDEX_VERSION", search_index.INDEX_VERSION + 1)
    index = SearchIndex(store)
    assert index.cursor() == 0  # tables dropped, cursor reset
    index.catch_up()
    assert snapshot(store) == good
    assert store.local_db().query("SELECT version FROM projection_cursors WHERE name = 'search'") == [
        (search_index.INDEX_VERSION,)
    ]


def _committed_cursor(store: Store) -> int:
    """The cursor as committed, read without taking the write lock the indexer keeps busy."""
    rows = store.local_db().query("SELECT seq FROM projection_cursors WHERE name = 'search'")
    return int(rows[0][0]) if rows else 0


def _kill_mid_catch_up(home: HomePaths, store: Store, rng: random.Random) -> None:
    env = cli_env()  # the engine fixture's storage URL included
    proc = subprocess.Popen(
        [sys.executable, str(INDEXER), str(home.root), "37", "0.5"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        start = _committed_cursor(store)
        deadline = time.monotonic() + 60
        while _committed_cursor(store) == start:
            assert proc.poll() is None, f"indexer exited early ({proc.returncode}): {proc.stderr.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "indexer never committed a batch"
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.4))
        assert proc.poll() is None, "indexer finished before it could be killed: make the backlog larger"
        os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_sigkill_during_catch_up_loses_and_repeats_nothing(
    home: HomePaths, store: Store, clock: FakeClock, alice: AgentState
) -> None:
    rng = random.Random()
    rounds = 0
    for _ in range(3):
        mixed_history(store, clock, alice, range(rounds, rounds + 250))
        rounds += 250
        _kill_mid_catch_up(home, store, rng)
        cursor = SearchIndex(store).cursor()
        assert 0 < cursor < store.ledger.head()
        # Every committed batch is whole: nothing past the cursor is in the index.
        assert store.local_db().query(
            "SELECT count(*) FROM search_docs WHERE seq > ? AND kind != 'file'", [cursor]
        ) == [(0,)]
    SearchIndex(store).catch_up()
    recovered = snapshot(store)
    SearchIndex(store).rebuild()
    assert snapshot(store) == recovered
    keys = [r[0] for r in recovered[0]]
    assert len(keys) == len(set(keys))


@pytest.mark.slow  # eight homes built, caught up in pieces and rebuilt (~15 s): out of the fast loop
@sqlite_only("a fresh home per hypothesis example; the PostgreSQL half has one database per test")
@settings(max_examples=examples(8), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 40), min_size=1, max_size=10), batch=st.integers(1, 9))
def test_any_split_of_catch_up_equals_one_pass(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, cuts: list[int], batch: int
) -> None:
    """project(all) == project(project(prefix), suffix), for the search index."""
    home = resolve_home(tmp_path_factory.mktemp("split") / "home")
    clock = FakeClock()
    with Store.open(home, load_settings(home), clock=clock) as store:
        mixed_history(store, clock, create_agent(store, "split"), range(16))
        monkeypatch.setattr(search_index, "BATCH", batch)
        index = SearchIndex(store)
        for n in cuts:
            index.catch_up(max_events=n)
        index.catch_up()
        pieces = snapshot(store)
        index.rebuild()
        assert snapshot(store) == pieces


# --- text folding ---------------------------------------------------------------------------------


def test_unsegmented_runs_fold_to_bigrams_and_irregular_forms_to_their_base() -> None:
    assert fold("我们去北京") == " 我们 们去 去北 北京 京 "
    assert fold("He drew the children") == "He draw the child"
    assert plan_query("北京").terms == ("北京",)
    assert plan_query("去北京吗").terms == ("去北", "北京", "京吗")
    assert plan_query("Deploy 北京 office").terms == ("deploy", "北京", "office")
    assert plan_query("the of and").terms == ("the", "of", "and")  # only stop words: keep them
    assert plan_query("").empty and plan_query("\x00 \x01 ... !!!").empty


_QUOTED = re.compile(r'^("(?:[^"]|"")+"\*?)( OR "(?:[^"]|"")+"\*?)*$')  # a lone CJK character is a prefix


@settings(max_examples=examples(500))
@given(query=st.text(st.characters(blacklist_categories=()), max_size=300))
def test_plan_query_turns_any_string_into_quoted_terms(query: str) -> None:
    plan = plan_query(query)
    expr = plan.expression()
    assert plan.empty or _QUOTED.match(expr), expr
    assert len(plan.terms) <= 24 and all(t and "\x00" not in t for t in plan.terms)
