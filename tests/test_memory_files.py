"""Curated memory files: scopes, permissions, path safety, stamped appends, atomic replaces,
archiving at 100 KB, the prompt's view of the files, and replaying ``memory.written`` events.

Real SQLite, real files: every test works in the tmp home of the ``store`` fixture.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from holon.clock import FakeClock
from holon.context.assembler import Budget, assemble
from holon.context.sections import MEMORY_INLINE_CHARS, build_sections
from holon.context.tokens import TokenCounter
from holon.context.view import gather
from holon.errors import ModelError, NotFoundError, UsageError
from holon.ledger import events as ev
from holon.memory import files, markdown
from holon.memory.files import atomic_create, is_background, list_files, locate, permissions
from holon.memory.get import MemoryGetRequest, memory_get
from holon.memory.writes import (
    ARCHIVE_AT_BYTES,
    fallback_summary,
    rebuild_files,
    replay_files,
    write_file,
    write_memory,
)
from holon.projections import Store
from holon.projections.state import AgentState
from holon.resources import agent_home_template
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``; on PostgreSQL
    the index lives in the node's own file, RFC 0008 step 7), but those marked ``sqlite_only``."""
    return engine


TEMPLATE = agent_home_template() / "memory"


def write(store: Store, agent: AgentState, scope: str, op: str, text: str, **kw: object) -> object:
    return write_file(
        store, agent, scope, kw.pop("path", None), op, text,  # type: ignore[arg-type]
        origin=f"agent:{agent.agent_id}", authority="agent", turn_id=kw.pop("turn_id", "turn_1"), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def memory_events(store: Store) -> list[ev.MemoryWritten]:
    return [e.payload for e in store.ledger.read() if isinstance(e.payload, ev.MemoryWritten)]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "repo"
    ws.mkdir()
    return ws


@pytest.fixture
def alice(store: Store, workspace: Path) -> AgentState:
    return create_agent(store, "alice", workspace=str(workspace))


# --- scopes and permissions ---------------------------------------------------------------------


def test_each_scope_has_its_directory_and_main_file(store: Store, alice: AgentState, workspace: Path) -> None:
    home = store.paths.root
    assert files.scope_dir(store.paths, alice, "agent") == home / "agents" / "alice" / "memory"
    assert files.scope_dir(store.paths, alice, "operator") == home / "memory"
    assert files.scope_dir(store.paths, alice, "workspace") == workspace.resolve() / ".holon"
    # The agent's home has its own file only; the operator's file is created once, at home level.
    agent_memory = Path(alice.home) / "memory"
    assert (agent_memory / "self.md").read_bytes() == (TEMPLATE / "self.md").read_bytes()
    assert not (agent_memory / "operator.md").exists()
    op = locate(store.paths, alice, "operator")
    assert op.location == home / "memory" / "operator.md"
    assert op.location.read_bytes() == (TEMPLATE / "operator.md").read_bytes()
    assert (op.ref, op.name) == ("file:operator/operator.md", "operator/operator.md")
    assert locate(store.paths, alice, "workspace").location == workspace.resolve() / ".holon" / "memory.md"


def test_permissions_follow_the_agent(store: Store, alice: AgentState, bob: AgentState, workspace: Path) -> None:
    assert permissions(alice).read == ("agent", "operator", "workspace")
    assert permissions(alice).write["workspace"] == ("append", "replace")
    assert permissions(bob).read == ("agent", "operator") and permissions(bob).writable == ("agent", "operator")
    monitor = create_agent(store, "watch", template="monitor", workspace=str(workspace))
    assert is_background(monitor) and not is_background(alice)
    assert permissions(monitor).write["workspace"] == ("append",)
    with pytest.raises(UsageError, match="no workspace memory"):
        locate(store.paths, bob, "workspace")
    with pytest.raises(UsageError, match="no workspace memory"):
        write(store, bob, "workspace", "append", "hello")
    with pytest.raises(UsageError, match="unknown memory scope"):
        locate(store.paths, bob, "everything")  # type: ignore[arg-type]


def test_background_agents_only_append_to_the_workspace_file(store: Store, alice: AgentState, workspace: Path) -> None:
    write(store, alice, "workspace", "replace", "# Workspace\n## Conventions\nUse tabs.\n")
    scheduled = create_agent(store, "nightly", workspace=str(workspace))
    scheduled = store.agent(scheduled.agent_id)
    assert not is_background(scheduled)
    # Issue 6 sets ``background`` for scheduled agents; the rule reads it from the settings.
    scheduled = scheduled.model_copy(update={"settings": {"background": True}})
    monitor = create_agent(store, "watch", template="monitor", workspace=str(workspace))
    for agent in (scheduled, monitor):
        with pytest.raises(UsageError, match="background agent only appends"):
            write(store, agent, "workspace", "replace", "# Gone\n")
        with pytest.raises(UsageError, match="background agent only appends"):
            write(store, agent, "workspace", "replace", "spaces", heading="Conventions")
        write(store, agent, "workspace", "append", f"{agent.name} saw the nightly build pass")
        # Their own file and the operator's are theirs to replace.
        write(store, agent, "agent", "replace", f"# {agent.name}\n## Last run\nok\n")
    text = (workspace / ".holon" / "memory.md").read_text()
    assert text.startswith("# Workspace\n## Conventions\nUse tabs.\n")
    assert "nightly saw the nightly build pass" in text and "watch saw the nightly build pass" in text


def test_a_second_agent_cannot_reach_the_first_agents_files(store: Store, alice: AgentState, bob: AgentState) -> None:
    write(store, alice, "agent", "replace", "# Alice\n## Secret\nthe launch code\n")
    # bob's agent scope is bob's own file.
    assert "launch code" not in memory_get(store, bob, MemoryGetRequest(ref="file:agent/self.md")).content  # type: ignore[operator]
    escapes = ["../../alice/memory/self.md", "/etc/passwd.md", "notes/../../../alice/memory/self.md", "a\\b.md"]
    for path in escapes:
        with pytest.raises(UsageError):
            locate(store.paths, bob, "agent", path)
        with pytest.raises(UsageError):
            write(store, bob, "agent", "replace", "x", path=path)
        with pytest.raises(UsageError):
            memory_get(store, bob, MemoryGetRequest(ref=f"file:agent/{path}"))
    # A symlink inside bob's scope that leads to alice's file is refused for reads and writes.
    notes = Path(bob.home) / "memory" / "notes"
    notes.mkdir(parents=True)
    (notes / "link.md").symlink_to(Path(alice.home) / "memory" / "self.md")
    with pytest.raises(UsageError, match="outside"):
        memory_get(store, bob, MemoryGetRequest(ref="file:agent/notes/link.md"))
    with pytest.raises(UsageError, match="outside"):
        write(store, bob, "agent", "replace", "overwritten", path="notes/link.md")
    assert "launch code" in (Path(alice.home) / "memory" / "self.md").read_text()


def test_only_markdown_files_and_only_writable_paths(store: Store, alice: AgentState) -> None:
    with pytest.raises(UsageError, match="not a markdown file"):
        write(store, alice, "agent", "replace", "x", path="notes/run.sh")
    with pytest.raises(UsageError, match="hidden"):
        write(store, alice, "agent", "replace", "x", path=".secret.md")
    with pytest.raises(UsageError, match="cannot be written"):
        write(store, alice, "operator", "replace", "x", path="other.md")
    with pytest.raises(UsageError, match="archives are read-only"):
        write(store, alice, "agent", "replace", "x", path="archive/self-1.md")
    write(store, alice, "agent", "replace", "# Deploys\nstaging first\n", path="notes/deploys.md")
    assert (Path(alice.home) / "memory" / "notes" / "deploys.md").read_text() == "# Deploys\nstaging first\n"


# --- writes ----------------------------------------------------------------------------------------


def test_append_adds_an_entry_stamped_with_time_and_source(store: Store, alice: AgentState) -> None:
    result = write(store, alice, "agent", "append", "The CI runner needs `make deps` first.", turn_id="turn_42")
    text = (Path(alice.home) / "memory" / "self.md").read_text()
    template = (TEMPLATE / "self.md").read_text()
    entry = "\n## 2026-01-01 00:00 UTC · alice · turn turn_42\nThe CI runner needs `make deps` first.\n"
    assert text == template + entry
    # The first write recorded the template as it was, then the entry.
    adopted, appended = memory_events(store)
    assert (adopted.op, adopted.text, adopted.path) == ("replace", template, "self.md")
    assert (appended.op, appended.text) == ("append", entry)
    data = text.encode()
    assert (appended.size, appended.digest) == (len(data), hashlib.sha256(data).hexdigest())
    assert result.ref == "file:agent/self.md" and result.size == len(data)  # type: ignore[attr-defined]
    event = [e for e in store.ledger.read() if e.type == "memory.written"][-1]
    assert (event.origin, event.authority, event.turn_id) == (f"agent:{alice.agent_id}", "agent", "turn_42")


def test_replace_rewrites_the_file_or_one_section(store: Store, alice: AgentState) -> None:
    path = Path(alice.home) / "memory" / "self.md"
    write(store, alice, "agent", "replace", "# Self\n## Facts\nold\n### Detail\nolder\n## Pitfalls\nnone\n")
    write(store, alice, "agent", "append", "a dated note")
    write(store, alice, "agent", "replace", "- the API is v2\n", heading="facts")
    text = path.read_text()
    assert text.startswith("# Self\n## Facts\n- the API is v2\n\n## Pitfalls\nnone\n")
    assert "old" not in text and "Detail" not in text and "a dated note" in text
    # A missing section is added above the dated entries, so state stays above the log.
    write(store, alice, "agent", "replace", "## Open questions\n- which region?", heading="Open questions")
    text = path.read_text()
    assert text.index("## Open questions\n- which region?\n") < text.index("## 2026-")
    assert text.count("## Open questions") == 1
    with pytest.raises(UsageError, match="empty"):
        write(store, alice, "agent", "replace", "  \n")
    with pytest.raises(UsageError, match="heading goes with op 'replace'"):
        write(store, alice, "agent", "append", "x", heading="Facts")
    assert memory_events(store)[-1].text == path.read_text()


def test_hand_edits_are_recorded_before_the_next_write(store: Store, bob: AgentState) -> None:
    path = Path(bob.home) / "memory" / "self.md"
    write(store, bob, "agent", "replace", "# Bob\n")  # first adopts the template copy, then replaces
    write(store, bob, "agent", "append", "one")
    assert [p.op for p in memory_events(store)] == ["replace", "replace", "append"]  # nothing changed between
    path.write_text("# Bob\nedited by the operator\n")
    write(store, bob, "agent", "append", "two")
    ops = [(p.op, p.text) for p in memory_events(store)]
    assert ops[3] == ("replace", "# Bob\nedited by the operator\n")
    assert ops[4][0] == "append" and path.read_text().startswith("# Bob\nedited by the operator\n\n## ")
    adoptions = [e for e in store.ledger.read() if e.type == "memory.written"]
    assert [(e.origin, e.authority) for e in (adoptions[0], adoptions[3])] == [("runtime:memory", "runtime")] * 2


@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_readers_never_see_a_partial_or_empty_file(store: Store, bob: AgentState) -> None:
    path = Path(bob.home) / "memory" / "self.md"
    big = "# Big\n" + "a long line of facts that takes some time to write\n" * 1_500
    small = "# Small\none fact\n"
    write(store, bob, "agent", "replace", big)
    seen: set[bytes] = set()
    bad: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = path.read_bytes()
            if data not in (big.encode(), small.encode()):
                bad.append(data)
            seen.add(data)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(200):
            write(store, bob, "agent", "replace", small if i % 2 == 0 else big)
    finally:
        stop.set()
        thread.join()
    assert not bad, f"a reader saw {len(bad)} partial or empty files"
    assert len(seen) == 2
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_writers_serialise_on_a_shared_file(store: Store, alice: AgentState, bob: AgentState) -> None:
    def appender(agent: AgentState, n: int) -> None:
        for i in range(n):
            write(store, agent, "operator", "append", f"{agent.name} note {i}")

    threads = [threading.Thread(target=appender, args=(a, 15)) for a in (alice, bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = locate(store.paths, alice, "operator").location.read_text()
    assert all(f"{name} note {i}\n" in text for name in ("alice", "bob") for i in range(15))
    replayed = replay_files(store)
    assert replayed.problems == []
    assert replayed.files[locate(store.paths, alice, "operator").location] == text


def test_creating_the_operator_file_never_overwrites_one_a_writer_made_meanwhile(store: Store, tmp_path: Path) -> None:
    # Two writers can both see no operator.md; the second one's creation must not clobber the
    # first one's file and the entry appended to it (a lost write under load before).
    (tmp_path / "op").mkdir()
    target = tmp_path / "op" / "operator.md"
    assert atomic_create(target, b"# Operator\n")
    target.write_bytes(b"# Operator\n\n## entry appended meanwhile\n")
    assert not atomic_create(target, b"# Operator\n")
    assert target.read_bytes() == b"# Operator\n\n## entry appended meanwhile\n"
    assert [p.name for p in target.parent.iterdir()] == ["operator.md"]  # no temporary file left


# --- archiving -----------------------------------------------------------------------------------


def fill(store: Store, agent: AgentState, clock: FakeClock, n: int) -> None:
    for i in range(n):
        clock.advance(seconds=60)
        write(store, agent, "agent", "append", f"entry {i}: " + "observed the deploy pipeline and its logs. " * 40)


def test_a_file_past_100_kb_is_archived_with_a_deterministic_summary(
    store: Store, bob: AgentState, clock: FakeClock
) -> None:
    write(store, bob, "agent", "replace", "# Bob\n## Stable facts\n- prod is eu-west\n## Pitfalls\n- flaky CI\n")
    fill(store, bob, clock, 55)
    path = Path(bob.home) / "memory" / "self.md"
    before = path.read_text()
    assert len(before.encode()) < ARCHIVE_AT_BYTES
    newest = "entry last: the newest " + "z" * 3_000
    result = asyncio.run(
        write_memory(
            store, bob, "agent", None, "append", newest, origin=f"agent:{bob.agent_id}", authority="agent",
            turn_id="turn_9",
        )
    )  # fmt: skip
    assert result.archive_ref is not None and result.archive_ref.startswith("file:agent/archive/self-2026")
    archive = Path(bob.home) / "memory" / result.archive_ref.removeprefix("file:agent/")
    archived = archive.read_text()
    assert archived.startswith(before) and archived.endswith(newest + "\n")
    summary = path.read_text()
    assert len(summary.encode()) < ARCHIVE_AT_BYTES // 4 and result.size == len(summary.encode())
    assert summary.startswith("# Bob\n\n> Archived 2026-")
    assert result.archive_ref in summary and "## Stable facts\n- prod is eu-west\n" in summary
    assert "## Pitfalls\n- flaky CI\n" in summary
    assert "entry last: the newest" in summary and "entry 0:" not in summary
    last = memory_events(store)[-1]
    assert (last.op, last.archive) == ("archive", archive.relative_to(path.parent).as_posix())
    assert store.ledger.resolve(last.text).text == summary  # type: ignore[union-attr]  # a blob: over 16 KB
    # The archive stays readable through MemoryGet.
    read = memory_get(store, bob, MemoryGetRequest(ref=result.archive_ref, mode="tail", lines=2))
    assert read.content == "## " + archived.rsplit("\n## ", 1)[1]
    assert memory_get(
        store, bob, MemoryGetRequest(ref=result.archive_ref, mode="section", heading="Stable facts")
    ).content
    assert any(f.path.startswith("archive/self-") for f in list_files(store.paths, bob))
    replayed = replay_files(store)
    assert replayed.problems == [] and replayed.files[archive] == archived and replayed.files[path] == summary


def test_archiving_uses_the_model_summary_when_it_is_sensible(store: Store, bob: AgentState, clock: FakeClock) -> None:
    fill(store, bob, clock, 58)
    asked: list[int] = []

    async def summarize(text: str) -> str:
        asked.append(len(text))
        return "# Self\n## Summary\nThe pipeline was observed 58 times; nothing broke.\n"

    result = asyncio.run(
        write_memory(
            store, bob, "agent", None, "append", "one more", origin="operator:cli", authority="operator",
            summarize=summarize,
        )
    )  # fmt: skip
    text = (Path(bob.home) / "memory" / "self.md").read_text()
    assert asked and asked[0] > ARCHIVE_AT_BYTES
    assert (
        text.startswith("# Self\n\n> Archived") and "nothing broke" in text and "a summary written by the model" in text
    )
    assert result.archive_ref in text  # type: ignore[operator]

    # A model that fails (or answers nonsense) leaves the deterministic summary in its place.
    async def broken(text: str) -> str:
        raise ModelError("rate limited", kind="rate_limit")

    fill(store, bob, clock, 58)
    result = asyncio.run(
        write_memory(store, bob, "agent", None, "append", "again", origin="operator:cli", authority="operator",
                     summarize=broken)
    )  # fmt: skip
    text = (Path(bob.home) / "memory" / "self.md").read_text()
    assert result.archive_ref is not None and "the state sections and the newest" in text
    assert replay_files(store).problems == []


def test_fallback_summary_keeps_state_and_the_newest_entries_within_budget() -> None:
    state = "# Self\n## Facts\n- one\n### Detail\n- two\n"
    entries = "".join(f"\n## 2026-01-0{i % 9 + 1} 10:00 UTC · a\nentry {i} " + "x" * 300 + "\n" for i in range(100))
    summary = fallback_summary(state + entries, budget=3_000)
    assert summary.startswith(state) and len(summary) <= 3_000
    assert "entry 99 " in summary and "entry 0 " not in summary
    kept = [int(line.split()[1]) for line in summary.splitlines() if line.startswith("entry ")]
    assert kept == sorted(kept) and kept[-1] == 99  # the newest, in their original order
    # A state section too large for half the budget keeps its heading, pointing to the archive.
    huge = "# Self\n## Facts\n" + "fact " * 2_000 + "\n## Small\nok\n"
    summary = fallback_summary(huge, budget=3_000)
    assert "## Facts\n[this section's text is in the archive]\n" in summary and "## Small\nok\n" in summary
    assert fallback_summary("", budget=100) == ""


# --- replay -------------------------------------------------------------------------------------


def test_replaying_memory_events_rebuilds_every_file_byte_for_byte(
    store: Store, alice: AgentState, bob: AgentState, workspace: Path, clock: FakeClock
) -> None:
    carol = create_agent(store, "carol", workspace=str(workspace))
    write(store, alice, "operator", "replace", "# Operator\n## Preferences\n- short answers\n")
    write(store, bob, "operator", "append", "prefers tea, said so on Monday")
    write(store, carol, "workspace", "append", "the repo uses uv")
    write(store, alice, "workspace", "replace", "- use uv, never pip\n", heading="Conventions")
    write(store, alice, "agent", "append", "中文笔记 部署在周五之后冻结")
    write(store, alice, "agent", "replace", "windows line\r\nendings kept\r\n", path="notes/crlf.md")
    (Path(bob.home) / "memory" / "self.md").write_text("# Bob by hand\n")  # adopted at bob's next write
    write(store, bob, "agent", "append", "after the hand edit")
    fill(store, carol, clock, 58)
    asyncio.run(write_memory(store, carol, "agent", None, "append", "past the limit", origin="operator:cli",
                             authority="operator"))  # fmt: skip

    on_disk = {
        p: p.read_bytes()
        for root in (
            store.paths.root / "memory",
            workspace / ".holon",
            *(Path(a.home) / "memory" for a in store.agents()),
        )
        for p in root.rglob("*.md")
    }
    replayed = replay_files(store)
    assert replayed.problems == []
    # Every file the ledger knows is byte-identical (bob's and carol's untouched template copies are
    # not in the ledger until their first write, nor is the operator template before alice's).
    assert {p: t.encode() for p, t in replayed.files.items()} == {p: on_disk[p] for p in replayed.files}
    assert len(replayed.files) == 7  # operator, workspace, 3 self.md, a note, an archive
    # Lose them all, rebuild from the ledger.
    for p in replayed.files:
        p.unlink()
    rebuild_files(store)
    assert all(p.read_bytes() == on_disk[p] for p in replayed.files)


def test_a_missing_agent_home_is_installed_from_its_template_and_the_ledger(store: Store, alice: AgentState) -> None:
    """A node taking over an agent made on another machine (RFC 0008): its home is the template it
    was made from plus every curated file the ledger holds, byte for byte; an existing one is kept."""
    import shutil

    from holon.runtime.agents import ensure_home

    monitor = create_agent(store, "watcher", template="monitor")
    write(store, alice, "agent", "append", "likes tea")
    write(store, alice, "agent", "replace", "# Trips\n\nLisbon in May\n", path="notes/trips.md")
    write(store, monitor, "agent", "append", "checks the build")
    homes = {a.name: Path(a.home) for a in (alice, monitor)}
    before = {n: {p.relative_to(h): p.read_bytes() for p in h.rglob("*") if p.is_file()} for n, h in homes.items()}
    assert not ensure_home(store, alice)  # there: untouched
    for h in homes.values():
        shutil.rmtree(h)
    assert ensure_home(store, store.agent("alice")) and ensure_home(store, store.agent("watcher"))
    after = {n: {p.relative_to(h): p.read_bytes() for p in h.rglob("*") if p.is_file()} for n, h in homes.items()}
    assert after == before
    assert (homes["watcher"] / "AGENTS.md").read_bytes() != (homes["alice"] / "AGENTS.md").read_bytes()  # its template


# --- what the prompt shows --------------------------------------------------------------------------


def test_the_prompt_shows_the_scoped_files_with_sizes_and_outlines_long_ones(
    store: Store, alice: AgentState, workspace: Path
) -> None:
    long_text = "# Self\n## Log\n" + "a line about the deploys of last week\n" * 200 + "## Facts\n- eu-west\n"
    write(store, alice, "agent", "replace", long_text)
    write(store, alice, "workspace", "replace", "# Workspace\n## Conventions\n- tabs\n")
    view = gather(store, alice.agent_id, inputs=[], started_seq=store.ledger.head() + 1, tools=[])
    assert [name for name, _ in view.memory_files] == ["agent/self.md", "operator/operator.md", "workspace/memory.md"]
    assembly = assemble(
        build_sections(view, TokenCounter("gpt-4o")), Budget(context_window=64_000, output_reserve=2_000)
    )
    prefix = assembly.stable_prefix
    assert len(long_text) > MEMORY_INLINE_CHARS and "a line about the deploys" not in prefix
    assert f"# Memory file file:agent/self.md (your own file; {len(long_text):,} characters)" in prefix
    log_size = next(h.size for h in markdown.headings(long_text) if h.text == "Log")
    assert f"## Log ({log_size:,} chars)" in prefix and '"ref": "file:agent/self.md", "mode": "headers"' in prefix
    assert "## Conventions\n- tabs" in prefix and "# Memory file file:operator/operator.md" in prefix
    refs = {r for s in assembly.manifest.to_json()["sections"] for r in s["refs_included"]}
    assert {"file:agent/self.md", "file:operator/operator.md", "file:workspace/memory.md"} <= refs


def test_list_files_gives_scope_path_size_and_headings(store: Store, alice: AgentState) -> None:
    write(store, alice, "agent", "replace", "# Deploys\n## Regions\n- eu\n", path="notes/deploys.md")
    info = {f.ref: f for f in list_files(store.paths, alice)}
    assert set(info) == {"file:agent/self.md", "file:agent/notes/deploys.md", "file:operator/operator.md"}
    note = info["file:agent/notes/deploys.md"]
    assert (note.scope, note.path, note.size, note.headings) == (
        "agent",
        "notes/deploys.md",
        26,
        ("# Deploys", "## Regions"),
    )


def test_a_missing_operator_file_is_recreated_from_the_template(store: Store, bob: AgentState) -> None:
    target = store.paths.root / "memory" / "operator.md"
    assert not target.exists()  # a home opened without 'holon init' has none until it is used
    assert (
        memory_get(store, bob, MemoryGetRequest(ref="file:operator/operator.md")).content
        == (TEMPLATE / "operator.md").read_text()
    )
    with pytest.raises(NotFoundError, match=r"no file file:agent/notes/none\.md"):
        memory_get(store, bob, MemoryGetRequest(ref="file:agent/notes/none.md"))
