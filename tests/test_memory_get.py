"""MemoryGet: references, markdown modes, resolution from canonical storage, size caps, episodes
expanded losslessly, the memory tools through the registry, and ``holon memory get``.

Real SQLite and real files; hypothesis for "any string as a reference".
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.ctx_ledger import Script
from helpers.props import examples
from helpers.runtime import assert_sound, make_host, payloads, running
from helpers.turn_cli import holon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.errors import HolonError, NotFoundError, UsageError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import markdown
from holon.memory.get import MemoryGetRequest, MemoryRead, memory_get
from holon.memory.refs import EpisodeRef, EventRef, FileRef, TaskRef, WorkItemRef, parse_ref
from holon.memory.writes import write_file
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.agents import create_agent
from holon.runtime.providers.scripted import ScriptedProvider, reply, tool_call
from holon.runtime.tools import ToolContext, builtin_registry
from holon.runtime.views import AgentMemory, StoreViews

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``; on PostgreSQL
    the index lives in the node's own file, RFC 0008 step 7), but those marked ``sqlite_only``."""
    return engine


DOC = """# Title
intro line
## Alpha
alpha body
### Alpha one
deep
```
# not a heading (code)
```
## Beta
beta body
## Alphabet soup
letters
"""


# --- markdown modes --------------------------------------------------------------------------------


def test_headers_list_every_heading_with_its_line_and_section_size() -> None:
    hs = markdown.headings(DOC)
    assert [(h.line, h.level, h.text, h.end_line) for h in hs] == [
        (1, 1, "Title", 13),
        (3, 2, "Alpha", 9),
        (5, 3, "Alpha one", 9),
        (10, 2, "Beta", 11),
        (12, 2, "Alphabet soup", 13),
    ]
    assert sum(h.size for h in hs if h.level == 2) + len("# Title\nintro line\n") == len(DOC)
    out = markdown.headers(DOC)
    assert out.splitlines()[1] == f"L3 ## Alpha ({hs[1].size} chars, lines 3-9)"
    assert "not a heading" not in out


def test_section_tail_lines_and_full_select_the_right_text() -> None:
    alpha = markdown.select(DOC, "section", heading="ALPHA")
    assert alpha.text.startswith("## Alpha\nalpha body\n### Alpha one\ndeep\n```") and "## Beta" not in alpha.text
    assert markdown.select(DOC, "section", heading="beta").text == "## Beta\nbeta body\n"
    assert markdown.select(DOC, "section", heading="soup").text == "## Alphabet soup\nletters\n"  # unique partial
    with pytest.raises(UsageError, match="matches 3 headings"):
        markdown.select(DOC, "section", heading="alph")
    with pytest.raises(UsageError, match="no heading 'Gamma'; headings: 'Title'"):
        markdown.select(DOC, "section", heading="Gamma")
    assert markdown.select(DOC, "tail", lines=2).text == "## Alphabet soup\nletters\n"
    assert markdown.select(DOC, "lines", start=2, end=3).text == "intro line\n## Alpha\n"
    assert markdown.select(DOC, "lines", start=12, end=99).text == "## Alphabet soup\nletters\n"
    assert markdown.select(DOC, "full").text == DOC
    with pytest.raises(UsageError, match="past the end"):
        markdown.select(DOC, "lines", start=14, end=20)
    with pytest.raises(UsageError, match="bad line range"):
        markdown.select(DOC, "lines", start=5, end=4)
    assert markdown.select("no newline at end", "tail", lines=1).text == "no newline at end"
    assert markdown.split_lines("a\r\nb") == ["a\r\n", "b"]


# --- references -----------------------------------------------------------------------------------


def test_parse_ref_accepts_each_kind() -> None:
    assert parse_ref("event:42") == EventRef(42)
    assert parse_ref(" episode:ep_7 ") == EpisodeRef("ep_7")
    assert parse_ref("work_item:wi_0193a5") == WorkItemRef("wi_0193a5")
    assert parse_ref("task:task_01") == TaskRef("task_01")
    assert parse_ref("file:agent/archive/self-20261122T103100Z.md") == FileRef(
        "agent", "archive/self-20261122T103100Z.md"
    )
    assert str(parse_ref("file:operator/operator.md")) == "file:operator/operator.md"


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("", "not a memory reference"),
        ("self.md", "not a memory reference"),
        ("event:abc", "not a valid event reference"),
        ("event:0", "not a valid event reference"),
        ("event:" + "9" * 30, "not a valid event reference"),
        ("event:\uff11\uff12", "not a valid event reference"),  # full-width digits
        ("episode:", "not a valid episode reference"),
        ("task:a b", "not a valid task reference"),
        ("file:agent", "not a valid file reference"),
        ("file:home/self.md", "not a valid file reference"),
        ("file:agent/../x.md", "not allowed"),
        ("file:agent//x.md", "must be relative"),
        ("file:agent/a//x.md", "not allowed"),
        ("file:agent/x.txt", "not a markdown file"),
        ("file:agent/a\x00.md", "not allowed"),
        ("blob:abc", "unknown reference kind"),
        ("x" * 100_000, "at most 1,000"),
        ("file:agent/\ud800.md", "not valid text"),
    ],
)
def test_parse_ref_refuses_malformed_refs_clearly(ref: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        parse_ref(ref)


# --- resolution and ownership --------------------------------------------------------------------


def same_refusal(store: Store, agent: AgentState, ref: str, missing: str) -> None:
    """``ref`` (another agent's) is refused exactly like ``missing`` (nothing at all)."""
    with pytest.raises(NotFoundError) as theirs:
        memory_get(store, agent, MemoryGetRequest(ref=ref))
    with pytest.raises(NotFoundError) as nothing:
        memory_get(store, agent, MemoryGetRequest(ref=missing))
    assert str(theirs.value).replace(ref, "REF") == str(nothing.value).replace(missing, "REF")


def test_events_resolve_in_full_for_their_agent_only(store: Store, alice: AgentState, bob: AgentState) -> None:
    long_text = "The operator explained the release process. " * 1_000  # a blob: over 16 KB
    [said] = store.append(
        NewEvent(alice.agent_id, ev.MessageReceived(text=long_text), origin="operator:cli", authority="operator")
    )
    assert isinstance(said.payload.text, ev.BlobRef)  # type: ignore[attr-defined]
    read = memory_get(store, alice, MemoryGetRequest(ref=f"event:{said.seq}", max_chars=100_000))
    assert read.kind == "event" and read.content is not None
    assert read.content.startswith(f"# event:{said.seq} · message.received\ntime: 2026-01-01T")
    assert "origin: operator:cli (authority operator)" in read.content and "sender: operator" in read.content
    assert f"## text\n{long_text.rstrip()}" in read.content  # resolved from the blob store, whole
    same_refusal(store, bob, f"event:{said.seq}", "event:999999")


def test_work_items_and_tasks_resolve_for_their_agent_only(store: Store, alice: AgentState, bob: AgentState) -> None:
    store.append(
        NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id="wi_bill", title="Billing", plan=["export"])),
        NewEvent(alice.agent_id, ev.TodoChanged(work_item_id="wi_bill", op="add", todo_id="t1", text="write CSV")),
        NewEvent(alice.agent_id, ev.TaskCreated(task_id="task_1", title="pytest", spec={"command": "pytest"})),
        NewEvent(alice.agent_id, ev.TaskResulted(task_id="task_1", state="succeeded", output="42 passed", exit_code=0)),
    )
    item = memory_get(store, alice, MemoryGetRequest(ref="work_item:wi_bill")).content
    assert item is not None and "# work_item:wi_bill · Billing" in item and "- t1 [pending] write CSV" in item
    task = memory_get(store, alice, MemoryGetRequest(ref="task:task_1")).content
    assert task is not None and "state: succeeded · exit code: 0" in task and "## Output\n42 passed" in task
    same_refusal(store, bob, "work_item:wi_bill", "work_item:wi_none")
    same_refusal(store, bob, "task:task_1", "task:task_none")


def test_file_refs_are_relative_to_the_reader(store: Store, alice: AgentState, bob: AgentState) -> None:
    write_file(store, alice, "agent", None, "replace", "# Alice\n## Facts\nalice only\n", origin="t", authority="agent")
    assert (
        memory_get(store, alice, MemoryGetRequest(ref="file:agent/self.md")).content
        == "# Alice\n## Facts\nalice only\n"
    )
    assert "alice only" not in (memory_get(store, bob, MemoryGetRequest(ref="file:agent/self.md")).content or "")
    with pytest.raises(UsageError, match="no workspace memory"):
        memory_get(store, bob, MemoryGetRequest(ref="file:workspace/memory.md"))


def test_options_that_do_not_fit_are_refused(store: Store, alice: AgentState) -> None:
    ref = "file:agent/self.md"
    assert (
        memory_get(store, alice, MemoryGetRequest(ref=ref, heading="Pitfalls")).content == "## Pitfalls\n(none yet)\n"
    )
    assert memory_get(store, alice, MemoryGetRequest(ref=ref, lines=1)).content == "(none yet)\n"
    with pytest.raises(UsageError, match="heading goes with mode 'section', not mode 'tail'"):
        memory_get(store, alice, MemoryGetRequest(ref=ref, mode="tail", heading="Role"))
    with pytest.raises(UsageError, match="give only one of"):
        memory_get(store, alice, MemoryGetRequest(ref=ref, heading="Role", lines=3))
    with pytest.raises(UsageError, match="unknown mode"):
        memory_get(store, alice, MemoryGetRequest(ref=ref, mode="everything"))
    with pytest.raises(UsageError, match="expand applies to episode"):
        memory_get(store, alice, MemoryGetRequest(ref=ref, expand=True))
    with pytest.raises(UsageError, match="max_chars"):
        memory_get(store, alice, MemoryGetRequest(ref=ref, max_chars=10))


# --- size caps ----------------------------------------------------------------------------------


def run_call(store: Store, agent: AgentState, arguments: dict[str, Any]) -> MemoryRead:
    args = dict(arguments)
    return memory_get(store, agent, MemoryGetRequest(ref=args.pop("ref"), **args))


def test_a_read_over_the_cap_returns_sizes_and_calls_that_work(store: Store, alice: AgentState) -> None:
    sections = {name: f"## {name}\n" + f"{name} fact number n.\n" * 120 for name in ("Deploys", "Billing", "People")}
    text = "# Notes\n" + "".join(sections.values()) + "## Log\n" + "x" * 50 + "\n"
    write_file(store, alice, "agent", "notes/big.md", "replace", text, origin="t", authority="agent")
    read = memory_get(store, alice, MemoryGetRequest(ref="file:agent/notes/big.md", max_chars=3_000))
    assert read.content is None and read.size == len(text)
    assert f"is {len(text):,} characters in {len(markdown.split_lines(text)):,} lines" in read.summary
    assert "largest sections: 'Deploys' (" in read.summary and "max_chars=3,000" in read.summary
    rendered = read.render()
    assert (
        "No content returned" in rendered
        and 'memory_get {"ref": "file:agent/notes/big.md", "mode": "headers"}' in rendered
    )
    calls = [c for c in read.next_calls if c.tool == "memory_get"]
    modes = {c.arguments.get("mode") for c in calls}
    assert {"headers", "section", "lines"} <= modes
    assert any(c.tool == "memory_search" for c in read.next_calls)
    for call in calls:  # every suggested read works and returns content
        assert run_call(store, alice, call.arguments).content is not None, call
    # A section over the cap suggests line ranges inside it.
    read = memory_get(store, alice, MemoryGetRequest(ref="file:agent/notes/big.md", heading="Deploys", max_chars=1_000))
    assert read.content is None and "the section 'Deploys'" in read.summary
    parts = [c for c in read.next_calls if c.tool == "memory_get" and c.arguments.get("mode") != "headers"]
    assert parts and all(c.arguments["mode"] == "lines" for c in parts)
    for call in parts:
        got = run_call(store, alice, call.arguments)
        assert got.content is not None and got.content in sections["Deploys"]


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(200, 5_000), mode=st.sampled_from(["full", "headers", "tail", "lines"]))
def test_content_is_whole_or_absent_never_cut(store: Store, cap: int, mode: str) -> None:
    agent = store.agents()[0] if store.agents() else create_agent(store, "capped")
    text = "# T\n" + "".join(f"## S{i}\n" + "word " * (i * 20) + "\n" for i in range(30))
    if not (Path(agent.home) / "memory" / "notes" / "t.md").exists():
        write_file(store, agent, "agent", "notes/t.md", "replace", text, origin="t", authority="agent")
    options: dict[str, Any] = {"mode": mode, "max_chars": cap}
    if mode == "tail":
        options["lines"] = 25
    if mode == "lines":
        options |= {"start": 3, "end": 40}
    read = memory_get(store, agent, MemoryGetRequest(ref="file:agent/notes/t.md", **options))
    expected = markdown.select(
        text, mode, lines=options.get("lines"), start=options.get("start"), end=options.get("end")
    ).text  # type: ignore[arg-type]
    if len(expected) <= cap:
        assert read.content == expected
    else:
        assert read.content is None and read.next_calls
        for call in (c for c in read.next_calls if c.tool == "memory_get" and c.arguments.get("max_chars") is None):
            assert len(run_call(store, agent, {**call.arguments, "max_chars": cap}).content or "") <= cap


# --- episodes ---------------------------------------------------------------------------------


def test_episodes_expand_to_exactly_the_events_they_cover(store: Store) -> None:
    s = Script(store, agent_id="agt_ann", name="ann", home=str(store.paths.agent_home("ann")))
    s.say("Set up the billing export to CSV")
    s.start()
    s.open_item("wi_bill", "Billing export")
    big_output = "".join(f"row {i}: exported invoice {i} to billing.csv\n" for i in range(1_000))  # a blob
    s.run("make billing-export", 0, output=big_output)
    s.complete("wi_bill", report="Export works; 1,000 rows written.")
    s.settle("Export set up.")
    [sealed] = s.sealed()
    p = sealed.payload
    assert isinstance(p, ev.EpisodeSealed)
    ann = store.agent("agt_ann")
    ref = f"episode:{p.episode_id}"

    brief = memory_get(store, ann, MemoryGetRequest(ref=ref))
    assert brief.kind == "episode" and brief.content is not None
    assert f"covers event:{p.seq_start} to event:{p.seq_end}" in brief.content and "boundary: " in brief.content
    assert brief.next_calls[0].arguments == {"ref": ref, "expand": True}

    full = memory_get(store, ann, MemoryGetRequest(ref=ref, expand=True, max_chars=1_000_000))
    assert full.content is not None
    covered = [e for e in store.ledger.read(agent_id="agt_ann") if p.seq_start <= e.seq <= p.seq_end]
    assert covered and f"({len(covered)} events, exact)" in full.content
    positions = []
    for e in covered:
        header = f"### event:{e.seq} · {e.type}\n"
        assert header in full.content, header
        positions.append(full.content.index(header))
        for name, value in e.payload:
            resolved = store.ledger.resolve(value) if isinstance(value, str | ev.BlobRef) else None
            if resolved is not None and name != "type":
                text = resolved if isinstance(resolved, str) else resolved.text
                assert text is not None and text.rstrip("\n") in full.content, (e.seq, name)
    assert positions == sorted(positions)
    assert big_output.rstrip("\n") in full.content
    assert f"### event:{p.seq_end + 1} " not in full.content and f"### event:{p.seq_start - 1} " not in full.content

    capped = memory_get(store, ann, MemoryGetRequest(ref=ref, expand=True))
    assert capped.content is None and f"{len(covered)} events; the largest: event:" in capped.summary
    event_calls = [c for c in capped.next_calls if set(c.arguments) == {"ref"}]
    assert event_calls and all(run_call(store, ann, c.arguments).kind == "event" for c in event_calls)

    bob = Script(store, agent_id="agt_bob", name="bob", home=str(store.paths.agent_home("bob")))
    same_refusal(store, store.agent(bob.agent_id), ref, "episode:ep_999999")


# --- any string ---------------------------------------------------------------------------------

hostile = st.one_of(
    st.text(st.characters(blacklist_categories=()), max_size=80),  # surrogates and controls included
    st.builds(
        lambda kind, body: f"{kind}:{body}",
        st.sampled_from(["event", "episode", "work_item", "task", "file", "EVENT", "file:agent", "file:operator"]),
        st.text(st.characters(blacklist_categories=()), max_size=40)
        | st.sampled_from(["1", "2", "99999999999999999999", "-1", "agent/self.md", "agent/../../x.md", "ep_1"]),
    ),
    st.sampled_from(["\x00", "x" * 100_000, "event:" + "1" * 5_000, "file:agent/" + "a/" * 200 + "x.md"]),
)


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ref=hostile, mode=st.sampled_from([None, "full", "headers", "section", "tail", "lines"]))
def test_any_string_gives_a_read_or_a_clear_holon_error(store: Store, ref: str, mode: str | None) -> None:
    agent = store.agents()[0] if store.agents() else create_agent(store, "fuzz")
    try:
        read = memory_get(store, agent, MemoryGetRequest(ref=ref, mode=mode))
    except HolonError as e:
        assert isinstance(e, UsageError | NotFoundError) and str(e) and "\n" not in str(e)
    else:
        assert read.content is not None or read.next_calls


# --- the tools ------------------------------------------------------------------------------------


def call_tool(store: Store, agent: AgentState, tool: str, arguments: str, *, per_agent: bool = True) -> Any:
    registry = builtin_registry()
    registry = registry.for_agent(agent) if per_agent else registry
    ctx = ToolContext(
        agent.agent_id, agent.name, "turn_t", store.ledger.clock, Path(agent.home), Path(agent.home),
        StoreViews(store, agent.agent_id), None, memory=AgentMemory(store, agent, turn_id="turn_t"),
    )  # fmt: skip
    return asyncio.run(registry.execute(ev.ToolCallSpec(call_id="c1", tool=tool, arguments=arguments), ctx))


def test_the_tools_read_and_write_through_the_registry(store: Store, alice: AgentState) -> None:
    args = {"scope": "agent", "op": "replace", "heading": "Preferences", "text": "- short answers"}
    result = call_tool(store, alice, "memory_write", json.dumps(args))
    assert result.status == "ok" and result.output.startswith("replace on file:agent/self.md recorded as event:")
    assert result.emitted == ()  # the event is appended by the memory layer, under the file lock
    event = store.ledger.tail(1)[0]
    assert event.type == "memory.written" and event.turn_id == "turn_t" and event.origin == f"agent:{alice.agent_id}"
    read = call_tool(store, alice, "memory_get", '{"ref": "file:agent/self.md", "heading": "preferences"}')
    assert read.status == "ok" and read.output.endswith("## Preferences\n- short answers\n")
    assert read.output.startswith("[file:agent/self.md: section 'Preferences'")


def test_malformed_tool_calls_get_a_clear_message(store: Store, alice: AgentState) -> None:
    cases = {
        ("memory_get", "{not json"): ("invalid", "arguments are not valid JSON"),
        ("memory_get", '{"ref": 5}'): ("invalid", "'ref': Input should be a valid string"),
        ("memory_get", "{}"): ("invalid", "'ref' is required"),
        ("memory_get", '{"ref": "self.md"}'): ("error", "'self.md' is not a memory reference"),
        ("memory_get", '{"ref": "event:99999"}'): ("error", "nothing at event:99999 in alice's memory"),
        ("memory_get", '{"ref": "file:agent/self.md", "mode": "all"}'): ("invalid", "'mode': Input should be"),
        ("memory_write", '{"text": "x"}'): ("invalid", "'op' is required"),
        ("memory_write", '{"op": "replace", "text": "x", "scope": "workspace"}'): (
            "invalid",
            "'scope': Input should be 'agent' or 'operator'",
        ),
        ("memory_write", '{"op": "replace", "text": "x", "path": "../x.md"}'): ("error", "not allowed"),
        ("memory_write", '{"op": "replace", "text": " "}'): ("error", "refusing an empty replace"),
    }
    for (tool, arguments), (status, message) in cases.items():
        result = call_tool(store, alice, tool, arguments)
        assert (result.status, message in result.output) == (status, True), (tool, arguments, result.output)
    # The generic schema offers every scope; the runtime still refuses what this agent may not do.
    result = call_tool(
        store, alice, "memory_write", '{"op": "append", "text": "x", "scope": "workspace"}', per_agent=False
    )
    assert result.status == "error" and "no workspace memory" in result.output


def test_each_agent_sees_only_the_scopes_it_may_write(store: Store, tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    plain = create_agent(store, "plain")
    worker = create_agent(store, "worker", workspace=str(tmp_path / "ws"))
    monitor = create_agent(store, "watch", template="monitor", workspace=str(tmp_path / "ws"))

    def schema(agent: AgentState) -> dict[str, Any]:
        fns = [s["function"] for s in builtin_registry().for_agent(agent).schemas()]
        return next(f for f in fns if f["name"] == "memory_write")

    assert schema(plain)["parameters"]["properties"]["scope"]["enum"] == ["agent", "operator"]
    assert schema(worker)["parameters"]["properties"]["scope"]["enum"] == ["agent", "operator", "workspace"]
    assert "append only" in schema(monitor)["description"] and "append only" not in schema(worker)["description"]
    registry = builtin_registry()
    assert registry.for_agent(plain) is registry.for_agent(create_agent(store, "plain2"))  # shared and cached
    assert registry.for_agent(plain).schemas() is registry.for_agent(plain).schemas()


# --- the CLI ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_holon_memory_get(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert holon(home, "init").code == 0
    assert holon(home, "agent", "create", "alice").code == 0
    got = holon(home, "--json", "memory", "get", "alice", "file:agent/self.md", "--mode", "headers")
    data = got.json()
    assert data["kind"] == "file" and data["content"].startswith("L1 # Self (")
    human = holon(home, "memory", "get", "alice", "file:operator/operator.md", "--heading", "Preferences")
    assert human.code == 0 and human.out.startswith("[file:operator/operator.md: section 'Preferences'")
    event = holon(home, "--json", "memory", "get", "alice", "event:1").json()
    assert event["content"].startswith("# event:1 · agent.created")
    assert len(event["content"]) > 200
    capped = holon(home, "--json", "memory", "get", "alice", "event:1", "--max-chars", "200").json()
    assert capped["content"] is None and capped["next_calls"][0]["arguments"]["max_chars"] > 200
    bad = holon(home, "memory", "get", "alice", "event:abc")
    assert bad.code == 2 and bad.err.startswith("holon: error: 'event:abc' is not a valid event reference")
    assert "Traceback" not in bad.err
    missing = holon(home, "memory", "get", "alice", "event:999")
    assert missing.code == 3 and "nothing at event:999" in missing.err


# --- a real turn ---------------------------------------------------------------------------------


def test_a_turn_writes_and_reads_memory_with_its_own_schema(store: Store, clock: FakeClock) -> None:
    agent = create_agent(store, "alice")
    fact = {"op": "replace", "heading": "Stable facts", "text": "- staging is eu-west-1"}
    provider = ScriptedProvider(
        [
            tool_call("memory_write", fact, "c_write"),
            tool_call("memory_get", {"ref": "file:agent/self.md", "heading": "stable facts"}, "c_read"),
            reply("Noted."),
        ]
    )

    async def scenario() -> list[Any]:
        async with running(make_host(store, provider, clock=clock)) as host:
            host.submit("alice", "Remember: staging is eu-west-1")
            return await host.run_agent(agent.agent_id)

    [result] = asyncio.run(scenario())
    assert result.outcome == "completed"
    written, read = payloads(store, "tool.resulted")
    assert written.status == "ok" and read.status == "ok"  # type: ignore[attr-defined]
    assert read.output.endswith("## Stable facts\n- staging is eu-west-1\n\n")  # type: ignore[attr-defined]
    [_adopted, change] = [e for e in store.ledger.read() if e.type == "memory.written"]
    assert change.turn_id == result.turn_id and change.origin == f"agent:{agent.agent_id}"
    # The model was offered only the scopes this agent may write (it has no workspace).
    fns = {t["function"]["name"]: t["function"] for t in provider.requests[0].tools}
    assert fns["memory_write"]["parameters"]["properties"]["scope"]["enum"] == ["agent", "operator"]
    # and saw its files, by scoped reference, in the system prompt.
    system = provider.requests[0].messages[0]["content"]
    assert "# Memory file file:agent/self.md" in system and "# Memory file file:operator/operator.md" in system
    assert_sound(store)
