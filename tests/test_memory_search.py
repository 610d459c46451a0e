"""MemorySearch as an agent sees it: any string is a valid query and none widens its scope; scopes,
filters, exact totals, hit shape and the MemoryGet round trip; unsegmented scripts; ranking sanity;
the bounded planner of large indexes.

Real SQLite and real files; hypothesis for "any string as a query".
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.memsearch import answer, brute_total, say
from helpers.props import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.errors import UsageError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import search as memory_search
from holon.memory.access import owners_for, search_memory
from holon.memory.get import MemoryGetRequest, memory_get
from holon.memory.index import SearchIndex, owner_token
from holon.memory.search import KINDS, SNIPPET_CHARS, SearchResult
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


HOUR = 3600.0
DAY = 86_400.0


def current(store: Store, agent: AgentState) -> AgentState:
    return store.agent(agent.agent_id)


def refs(store: Store, agent: AgentState, query: str, **options: object) -> list[str]:
    return [h.ref for h in search_memory(store, current(store, agent), query, **options).hits]  # type: ignore[arg-type]


def note(store: Store, agent: AgentState, text: str, **envelope: object) -> int:
    """A decision: a document with no conversation neighbours, for tests about matching itself."""
    [e] = store.append(NewEvent(agent.agent_id, ev.DecisionRecorded(text=text), **envelope))  # type: ignore[arg-type]
    return e.seq


def ts_of(day: str) -> int:
    return int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() * 1_000_000)


def move_to(clock: FakeClock, day: str) -> None:
    target = ts_of(day)
    now = clock.now_us()
    assert target >= now, day
    clock.advance(us=target - now)


# --- a small populated home ---------------------------------------------------------------------

SECRET = "zebra42"


@pytest.fixture
def populated(store: Store, clock: FakeClock, alice: AgentState, bob: AgentState) -> tuple[Store, AgentState]:
    """Alice's history of every kind, Bob's with a secret word, and curated files of both."""
    say(store, alice, "Can you check the deploy pipeline for the billing service?")
    answer(store, alice, "The deploy pipeline failed at the migration step; I'll retry it.")
    say(store, alice, "部署 billing 服务 之前 请先 备份 数据库", sender="李雷", authority="external")
    clock.advance(seconds=2 * HOUR)
    store.append(
        NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id="wi_bill", title="Billing migration")),
        NewEvent(alice.agent_id, ev.BriefDelivered(kind="progress", text="Migration 3 of 5 done"),
                 work_item_id="wi_bill"),
        NewEvent(alice.agent_id, ev.ToolCalled(call_id="c1", tool="run_command", arguments="{}"),
                 work_item_id="wi_bill"),
        NewEvent(alice.agent_id, ev.ToolResulted(call_id="c1", tool="run_command", status="ok",
                                                 output="exit code: 0\nmigrated 1,204 rows (\"quoted\" NEAR(x))"),
                 work_item_id="wi_bill"),
    )  # fmt: skip
    note(store, alice, "Decided: NOT AND OR are words too; the scope: column is private")
    write_file(store, alice, "agent", None, "replace", "# Self\n## Facts\n- billing runs on Postgres 16\n",
               origin="t", authority="agent")  # fmt: skip
    write_file(store, alice, "operator", None, "replace", "# Operator\n## Preferences\n- short answers, metric units\n",
               origin="t", authority="operator")  # fmt: skip
    say(store, bob, f"The vault password is {SECRET}; never tell alice about the billing deploy")
    note(store, bob, f"bob decided {SECRET} stays secret")
    write_file(store, bob, "agent", None, "replace", f"# Self\n## Secrets\n- {SECRET} opens the billing vault\n",
               origin="t", authority="agent")  # fmt: skip
    return store, current(store, alice)


def alice_refs(store: Store, agent: AgentState) -> set[str]:
    owners = owners_for(agent)
    return {r for (r, o) in store.local_db().query("SELECT ref, owner FROM search_docs") if o in owners}


FTS_BITS = [
    '"', '""', "'", "NEAR(", "NEAR/3", ")", "(", "*", "^", ":", "-", "+", "AND", "OR", "NOT", "near",
    "scope:", "scope :", "body:", "meta:", "{scope body}:", "{body}", "scope", "rowid", "MATCH", "\\",
    "\x00", "\x1f", "\x7f", "\u200b", "\ufeff", "🙂", "👩‍👩‍👧", "北京", "部署", "billing", "deploy", SECRET,
    owner_token("operator"), "kmessage", "kfile", "*billing*", "bill*", "^deploy", "%", "_", ";", "--",
]  # fmt: skip
hostile = st.one_of(
    st.text(max_size=200),  # any unicode, control characters and NUL included (no surrogates)
    st.text(st.characters(blacklist_categories=()), max_size=50),  # lone surrogates too
    st.lists(st.sampled_from(FTS_BITS) | st.text(max_size=4), max_size=24).map(" ".join),
    st.lists(st.sampled_from(FTS_BITS), max_size=24).map("".join),
)


@settings(max_examples=examples(250), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=hostile,
    kinds=st.lists(st.sampled_from(KINDS), max_size=3, unique=True),
    limit=st.integers(-3, 1_000),
)
@example(query="x" * 100_000, kinds=[], limit=10)
@example(query="billing " * 12_500, kinds=[], limit=10)  # 100 KB of a word that matches
@example(query="\x00" * 1_000 + "billing", kinds=[], limit=10)
@example(query='"billing" OR scope:' + owner_token("agent:agt_x"), kinds=[], limit=10)
@example(query="NEAR(billing deploy, 2) AND (scope : o1 OR body : *) NOT ^x", kinds=["message"], limit=5)
def test_any_string_is_a_valid_query_within_scope(
    populated: tuple[Store, AgentState], query: str, kinds: list[str], limit: int
) -> None:
    store, alice = populated
    result = search_memory(store, alice, query, kinds=kinds, limit=limit)
    assert isinstance(result, SearchResult)
    assert len(result.hits) <= max(1, min(limit, 100)) and result.total >= len(result.hits)
    assert result.more == (result.total > len(result.hits))
    assert {h.ref for h in result.hits} <= alice_refs(store, alice)
    assert not any(SECRET in h.snippet or SECRET in h.title for h in result.hits)
    assert all(h.kind in kinds for h in result.hits) or not kinds
    assert result.freshness.lag == 0 and len(result.query) <= 200
    result.as_dict()  # renders


# --- injection ------------------------------------------------------------------------------------


@pytest.mark.parametrize("alice_docs", [2, 60], ids=["alice-minority", "alice-majority"])
def test_a_query_cannot_widen_its_scope(store: Store, alice: AgentState, bob: AgentState, alice_docs: int) -> None:
    # Both sides of the planner: scope filtered inside FTS (Alice owns few documents) and after it.
    for i in range(alice_docs):
        note(store, alice, f"alice note {i} about gardening")
    for i in range(20):
        note(store, bob, f"{SECRET} bob note {i} about gardening")
    write_file(store, bob, "agent", None, "replace", f"# Self\n- {SECRET}\n", origin="t", authority="agent")
    bob_token = owner_token(f"agent:{bob.agent_id}")
    alice_token = owner_token(f"agent:{alice.agent_id}")
    queries = [
        SECRET, bob_token, f"scope : {bob_token}", f"scope:{bob_token}", f'"x" OR scope:{bob_token}',
        f'{SECRET}" OR "', f"scope : ({bob_token} OR {alice_token}) {SECRET}", f"{{scope}}: {bob_token}",
        f"body:{SECRET}", f"NOT gardening OR {SECRET}", f"* OR {SECRET}", f"{SECRET}*", "kdecision " + SECRET,
        f"scope : o{bob_token[1:5]}*", f"{alice_token} OR {bob_token}",
    ]  # fmt: skip
    owners = owners_for(current(store, alice))
    search_memory(store, current(store, alice), "")  # index everything, curated files included
    mine = alice_refs(store, current(store, alice))
    assert mine and not any(SECRET in t for (t,) in store.local_db().query(
        "SELECT text FROM search_docs WHERE owner IN (?, ?)", owners))  # fmt: skip
    for q in queries:
        result = search_memory(store, current(store, alice), q)
        assert not any(SECRET in h.snippet or SECRET in h.title for h in result.hits), q
        assert {h.ref for h in result.hits} <= mine, q
        assert result.total == brute_total(store, owners, q), q
    assert search_memory(store, current(store, alice), SECRET).total == 0  # not even a count leaks
    assert search_memory(store, current(store, bob), SECRET).total == 21  # the documents are there


# --- scopes ---------------------------------------------------------------------------------------


def test_agents_see_their_own_memory_and_the_shared_scopes_only(store: Store, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    alice = create_agent(store, "alice", workspace=str(ws))
    bob = create_agent(store, "bob", workspace=str(ws))
    carol = create_agent(store, "carol")
    write_file(store, alice, "agent", None, "replace", "# Self\n- alice keeps ferns\n", origin="t", authority="agent")
    write_file(store, bob, "agent", None, "replace", "# Self\n- bob keeps cacti\n", origin="t", authority="agent")
    write_file(store, carol, "operator", None, "append", "The operator loves sourdough", origin="t",
               authority="operator")  # fmt: skip
    write_file(store, alice, "workspace", None, "append", "The staging database is heliotrope", origin="t",
               authority="agent")  # fmt: skip
    say(store, bob, "bob's ferns question")

    assert refs(store, alice, "ferns") == ["file:agent/self.md"]  # not bob's message
    assert refs(store, bob, "cacti") == ["file:agent/self.md"] and refs(store, alice, "cacti") == []
    hit = search_memory(store, current(store, bob), "ferns").hits
    assert [h.ref for h in hit] == [f"event:{store.ledger.head()}"]  # bob's own message, not alice's file
    for agent in (alice, bob, carol):
        assert refs(store, agent, "sourdough") == ["file:operator/operator.md"]
    for agent in (alice, bob):
        assert refs(store, agent, "heliotrope") == ["file:workspace/memory.md"]
        content = memory_get(store, current(store, agent), MemoryGetRequest(ref="file:workspace/memory.md")).content
        assert content is not None and "heliotrope" in content
    assert refs(store, carol, "heliotrope") == []
    # The workspace file is indexed once, whichever agent looked first.
    workspace_owner = f"workspace:{ws.resolve()}"
    assert store.local_db().query("SELECT DISTINCT owner FROM search_docs WHERE text LIKE '%heliotrope%'") == [
        (workspace_owner,)
    ]
    # Narrowing to one readable scope.
    assert refs(store, alice, "ferns sourdough heliotrope", scopes=["operator"]) == ["file:operator/operator.md"]
    assert set(refs(store, alice, "ferns sourdough heliotrope", scopes=["agent", "workspace"])) == {
        "file:agent/self.md",
        "file:workspace/memory.md",
    }


def test_refused_scopes_kinds_and_ranges_are_clear_usage_errors(store: Store, alice: AgentState) -> None:
    with pytest.raises(
        UsageError, match=r"agent alice cannot search the workspace scope; it can search agent, operator"
    ):
        search_memory(store, alice, "x", scopes=["workspace"])
    with pytest.raises(UsageError, match=r"unknown kind 'emails'; kinds: message, reply"):
        search_memory(store, alice, "x", kinds=["message", "emails"])
    with pytest.raises(UsageError, match="'since' is after 'until'"):
        search_memory(store, alice, "x", since_us=2, until_us=1)


# --- filters, totals, hit shape -----------------------------------------------------------------


@pytest.fixture
def history(store: Store, clock: FakeClock, alice: AgentState, bob: AgentState) -> dict[str, int]:
    """Three days of Alice's history about a garden, a work item inside it, and Bob's noise."""
    marks = {}
    move_to(clock, "2026-02-01T09:00:00")
    say(store, alice, "Plant the tomatoes along the south fence")
    answer(store, alice, "Tomatoes planted; the basil went beside them.")
    note(store, alice, "Water the tomatoes every morning")
    move_to(clock, "2026-02-02T09:00:00")
    marks["day2"] = ts_of("2026-02-02T00:00:00")
    store.append(NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id="wi_shed", title="Build the garden shed")))
    for i in range(6):
        note(store, alice, f"Shed step {i}: cut timber for the tomato shelves", work_item_id="wi_shed")
    say(store, alice, "Is the shed roof watertight before the tomatoes go in?")
    move_to(clock, "2026-02-03T09:00:00")
    marks["day3"] = ts_of("2026-02-03T00:00:00")
    say(store, alice, "Harvest the basil and the tomatoes on Friday")
    answer(store, alice, "Will do: basil first, then tomatoes.")
    note(store, bob, "Bob's tomatoes are not Alice's business")
    write_file(store, alice, "agent", "notes/garden.md", "replace",
               "# Garden\n## Beds\n- tomatoes in bed 2\n## Tools\n- spade\n", origin="t", authority="agent")  # fmt: skip
    search_memory(store, current(store, alice), "")  # an empty query still brings the index up to date
    return marks


#: The queries every filter combination below is checked with (one history per combination: it
#: is the expensive part, so the queries share it).
_TOTAL_QUERIES = ("tomatoes", "basil shed", "timber", "garden", "watertight roof")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"kinds": ("decision",)},
        {"kinds": ("message", "reply")},
        {"kinds": ("file", "work_item")},
        {"work_item_id": "wi_shed"},
        {"since_us": "day2"},
        {"until_us": "day2"},
        {"since_us": "day2", "until_us": "day3", "kinds": ("decision", "message")},
        {"since_us": "day3", "work_item_id": "wi_shed"},
    ],
    ids=lambda o: ",".join(o) or "none",
)
def test_totals_are_exact_and_filters_hold(
    store: Store, history: dict[str, int], alice: AgentState, options: dict[str, object]
) -> None:
    kw: dict[str, Any] = {k: history[str(v)] if k.endswith("_us") else v for k, v in options.items()}
    agent = current(store, alice)
    docs = {
        (ref, title): (kind, ts_us, item)
        for ref, title, kind, ts_us, item in store.local_db().query(
            "SELECT ref, title, kind, ts_us, work_item_id FROM search_docs WHERE owner = ?", [f"agent:{alice.agent_id}"]
        )
    }
    for query in _TOTAL_QUERIES:
        expected = brute_total(store, owners_for(agent), query, **kw)
        assert expected > 0 or options, query
        for limit in (1, 3, 100):
            result = search_memory(store, agent, query, limit=limit, **kw)
            assert (result.total, result.total_exact) == (expected, True), (query, limit)
            assert len(result.hits) == min(limit, expected) and result.more == (expected > limit), (query, limit)
            for h in result.hits:
                kind, ts_us, item = docs[h.ref, h.title]
                assert h.kind == kind and h.ts_us == ts_us, (query, h)
                assert kind in kw.get("kinds", KINDS), (query, h)
                assert kw.get("since_us", ts_us) <= ts_us <= kw.get("until_us", ts_us), (query, h)
                assert kw.get("work_item_id", item) == item, (query, h)


def _stems(query: str) -> list[str]:
    return [w[:5].lower() for w in re.findall(r"\w+", query) if len(w) > 3]


@pytest.mark.parametrize("query", ["tomatoes", "basil harvest", "shed timber shelves", "garden beds", "Alice"])
def test_hits_are_well_formed_and_resolve_through_memory_get(
    store: Store, history: dict[str, int], alice: AgentState, query: str
) -> None:
    agent = current(store, alice)
    result = search_memory(store, agent, query, limit=100)
    owners = owners_for(agent)
    assert result.hits
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    for h in result.hits:
        assert h.title and h.score > 0
        [(text,)] = store.local_db().query(
            "SELECT text FROM search_docs WHERE ref = ? AND title = ? AND owner IN (?, ?)", [h.ref, h.title, *owners]
        )
        assert bool(h.snippet) == bool(text.strip()), h  # a work item without objective or todos has no text
        # The match is in the snippet or the title, or (turns) in a neighbouring turn.
        shown = f"{h.title} {h.snippet}".lower()
        assert any(s in shown for s in _stems(query)) or h.kind in ("message", "reply"), h
        rendered = h.as_dict()
        assert rendered["source_ref"] == h.ref
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(rendered["time"]))
        read = memory_get(
            store, agent, MemoryGetRequest(ref=h.ref)
        )  # refused with NotFoundError if it were not alice's
        assert read.content is not None or read.next_calls
        if h.ref.startswith("event:"):
            assert read.content is not None and h.snippet.rstrip("…")[:20] in read.content


def test_a_possessive_of_an_irregular_plural_is_found_by_the_plural(store: Store, alice: AgentState) -> None:
    seq = note(store, alice, "Book the children's museum for the people's committee")
    for query in ("children", "child", "children's", "people", "committee of people"):
        assert refs(store, alice, query) == [f"event:{seq}"], query


def test_a_long_text_gets_a_snippet_centred_on_the_match(store: Store, alice: AgentState) -> None:
    filler = " ".join(f"word{i}" for i in range(400))
    text = f"{filler} the porcupine escaped through the fence {filler}"
    store.append(
        NewEvent(alice.agent_id, ev.ToolCalled(call_id="c", tool="run_command", arguments="{}")),
        NewEvent(alice.agent_id, ev.ToolResulted(call_id="c", tool="run_command", status="ok", output=text)),
    )
    [hit] = search_memory(store, alice, "porcupine fence").hits
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert len(hit.snippet) <= SNIPPET_CHARS + 2
    middle = hit.snippet.index("porcupine")
    assert SNIPPET_CHARS // 8 < middle < SNIPPET_CHARS * 3 // 4, hit.snippet


# --- unsegmented scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize("pause", [True, False], ids=["separate", "one-conversation"])
def test_words_of_unsegmented_scripts_are_found_inside_long_sentences(
    store: Store, clock: FakeClock, alice: AgentState, pause: bool
) -> None:
    texts = {
        "zh": "我们明天上午九点从酒店出发去参观故宫博物院然后在附近的餐厅吃午饭下午再去天坛公园散步",
        "zh2": "今天的会议讨论了明年的预算安排以及新员工的培训计划大家都同意下周再开一次会",
        "ja": "きょうはとてもいいてんきですねあしたもはれるといいですね",
        "th": "วันนี้อากาศดีมากเราจะไปเดินเล่นที่สวนสาธารณะกัน",
        "ko": "오늘은날씨가정말좋아서공원에산책하러갔어요",
        "mixed": "Deploy the 北京 cluster tonight, then 检查 the logs",
        "en": "An English sentence about nothing in particular, for contrast",
    }
    seqs = {}
    for name, text in texts.items():
        seqs[name] = say(store, alice, text).seq
        if pause:
            clock.advance(seconds=HOUR)
    cases = {
        "故宫": "zh", "天坛": "zh", "预算": "zh2", "培训计划": "zh2", "てんき": "ja", "はれる": "ja",
        "อากาศ": "th", "สวนสาธารณะ": "th", "날씨": "ko", "北京 cluster": "mixed", "deploy 北京": "mixed",
        "检查 logs": "mixed",
    }  # fmt: skip
    for query, name in cases.items():
        got = refs(store, alice, query, kinds=["message"])
        assert got[:1] == [f"event:{seqs[name]}"], (query, got)
        if pause:
            assert got == [f"event:{seqs[name]}"], (query, got)


# --- ranking sanity --------------------------------------------------------------------------------


def test_a_short_answer_is_found_through_the_question_before_it(
    store: Store, clock: FakeClock, alice: AgentState
) -> None:
    say(store, alice, "We should plan the charity gala budget soon.", sender="Caroline")
    clock.advance(seconds=2 * HOUR)
    say(store, alice, "Who gave the keynote speech at the charity gala last night?", sender="Caroline")
    matt = say(store, alice, "It was Matt Patterson!", sender="Melanie")
    say(store, alice, "Nice. Anyway, how are the kids?", sender="Caroline")
    clock.advance(seconds=2 * HOUR)
    say(store, alice, "The gala venue needs a new sound system.", sender="Melanie")
    got = refs(store, alice, "who gave the keynote at the charity gala")
    assert f"event:{matt.seq}" in got[:3], got
    assert refs(store, alice, "Patterson")[:1] == [f"event:{matt.seq}"]


def test_a_date_in_the_query_prefers_documents_from_that_date(
    store: Store, clock: FakeClock, alice: AgentState
) -> None:
    move_to(clock, "2026-03-07T10:00:00")
    march = note(store, alice, "We hiked the ridge trail and saw two eagles")
    move_to(clock, "2026-05-12T10:00:00")
    may = note(store, alice, "We hiked the ridge trail and saw two eagles")
    assert refs(store, alice, "hiking the ridge trail on 7 March 2026")[0] == f"event:{march}"
    assert refs(store, alice, "ridge trail hike, May 12, 2026")[0] == f"event:{may}"
    assert refs(store, alice, "what did we hike in March 2026?")[0] == f"event:{march}"


def test_a_phrase_outranks_the_same_words_scattered(store: Store, alice: AgentState) -> None:
    phrase = note(store, alice, "From the ferry we watched a blue whale breach twice near the harbour")
    note(store, alice, "From the ferry we watched a whale breach twice near the blue harbour")
    got = refs(store, alice, "blue whale")
    assert got[0] == f"event:{phrase}", got  # the older one wins: ties would go to the newer


# --- large indexes ---------------------------------------------------------------------------------


def test_the_engine_ranks_every_match_whatever_the_history_size(
    store: Store, alice: AgentState, bob: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first stage is exact: a rare term's one old match wins over hundreds of newer matches
    of a common word, even when the re-ranked candidates are few."""
    monkeypatch.setattr(memory_search, "CANDIDATES", 20)
    first = note(store, alice, "The common ocelot report from the very beginning")
    store.append(*(NewEvent(alice.agent_id, ev.DecisionRecorded(text=f"common entry {i}")) for i in range(300)))
    store.append(*(NewEvent(bob.agent_id, ev.DecisionRecorded(text=f"common ocelot of bob {i}")) for i in range(5)))
    agent = current(store, alice)

    result = search_memory(store, agent, "common ocelot")
    assert result.hits[0].ref == f"event:{first}"
    assert result.total == brute_total(store, owners_for(agent), "common ocelot") == 301
    assert result.more and result.total_exact
    assert all("bob" not in h.snippet for h in result.hits)

    rare = search_memory(store, agent, "ocelot")
    assert [h.ref for h in rare.hits] == [f"event:{first}"] and rare.total == 1
    assert rare.exhaustive, "every match was a candidate: certified exact"

    common = search_memory(store, agent, "common", limit=5)
    assert common.total == 301 and len(common.hits) == 5

    SearchIndex(store).rebuild()
    assert search_memory(store, agent, "common ocelot").hits[0].ref == f"event:{first}"
