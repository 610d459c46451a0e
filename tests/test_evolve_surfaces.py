"""The operator's review of durable memory from every surface: HTTP API, REPL and CLI (RFC 0006).

Proposals come from real turns (evolve over a scripted model); the API runs on the real daemon
over real HTTP; the REPL's commands run through its own handler against that daemon.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import httpx
import pexpect
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.daemon import fake_home
from helpers.evolve import run_turns
from helpers.turn_cli import cli_env, holon, holon_argv, open_store, quick_home
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console

from holon.api.server import free_port
from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.evolve import review
from holon.evolve.worker import Evolver
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry
from holon.projections import Store
from holon.repl.app import Chat
from holon.repl.client import ApiClient
from holon.repl.commands import SlashCompleter, completions, parse_line, parse_proposals
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``, RFC 0008 step
    6), but those marked ``sqlite_only``."""
    return engine


STATEMENTS = "Always run the linter before committing. My name is Ada. Remember that the cache is redis."


def _seed(home: Path) -> None:
    """Turns whose evolve jobs leave two proposals (a preference, an identity) and one fact."""
    paths = resolve_home(str(home))
    clock = FakeClock()
    with Store.open(paths, load_settings(paths), clock=clock) as store:
        (home / "ws").mkdir(parents=True, exist_ok=True)
        ada = create_agent(store, "ada", workspace=str(home / "ws"))
        run_turns(store, clock, ada.agent_id, [(STATEMENTS, ["ok"])])
        Evolver(store, clock=clock).drain()
        assert len(review.list_proposals(store)) == 2


@pytest.fixture
def server(tmp_path: Path, fast_ledger: None) -> Iterator[ApiServer]:
    home = tmp_path / "home"
    _seed(home)
    with api_server(home, clock=FakeClock()) as s:
        yield s


def _pending(client: httpx.Client) -> dict[str, dict]:
    return {p["entry"]["kind"]: p for p in client.get("/v1/proposals").json()}


def test_accept_and_dismiss_over_the_api(server: ApiServer) -> None:
    with server.client() as client:
        pending = _pending(client)
        assert set(pending) == {"preference", "identity"}
        durable = client.get("/v1/agents/ada/memory/durable").json()
        assert [d["entry"]["entry"]["kind"] for d in durable] == ["fact"]  # proposals are not durable

        pref = pending["preference"]["proposal_id"]
        r = client.post(f"/v1/proposals/{pref}/accept", json={"text": "Always run ruff before committing."})
        assert r.status_code == 200 and r.json()["outcome"] == "accepted"
        entry_id = r.json()["entry_id"]
        r = client.post(f"/v1/proposals/{pending['identity']['proposal_id']}/dismiss", json={"reason": "no"})
        assert r.status_code == 200 and r.json()["proposal"]["status"] == "dismissed"
        assert client.post(f"/v1/proposals/{pref}/accept").status_code == 409  # decided already

        texts = {d["entry"]["entry"]["text"] for d in client.get("/v1/agents/ada/memory/durable").json()}
        assert texts == {"Always run ruff before committing.", "The cache is redis."}
        assert client.get("/v1/proposals").json() == []
        assert len(client.get("/v1/proposals", params={"status": "all"}).json()) == 2

        r = client.post(f"/v1/memory/durable/{entry_id}/forget", json={"reason": "changed my mind"})
        assert r.status_code == 200 and r.json()["entry"]["status"] == "forgotten"
        assert client.get("/v1/proposals/p-nothing").status_code == 404
        assert client.post("/v1/proposals/" + "x" * 300 + "/accept").status_code == 400


def _chat(server: ApiServer) -> tuple[Chat, Console]:
    console = Console(record=True, width=140, force_terminal=False, color_system=None)
    return Chat(ApiClient(server.url, token=server.token), console, "ada"), console


def test_accept_and_dismiss_from_the_repl(server: ApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    chat, console = _chat(server)
    chat.handle("/proposals")
    shown = console.export_text()
    assert "Always run the linter before committing." in shown and "My name is Ada." in shown
    with server.client() as client:
        pending = _pending(client)
    pref, ident = pending["preference"]["proposal_id"], pending["identity"]["proposal_id"]

    chat.handle(f"/proposals show {pref[:5]}")
    assert "preference (operator scope)" in console.export_text()
    monkeypatch.setattr(chat, "_edit", lambda current: current.replace("the linter", "ruff"))
    chat.handle(f"/proposals accept {pref} --edit")
    chat.handle(f"/proposals dismiss {ident} not needed")
    out = console.export_text()
    assert f"accepted {pref}" in out and f"dismissed {ident}" in out
    chat.handle("/proposals accept nonsense-id")  # an error is printed, the REPL goes on
    assert "no proposal" in console.export_text()

    with open_store(server.home) as store:
        [entry] = [s for s in review.list_entries(store) if s.entry.kind == "preference"]
        assert entry.entry.text == "Always run ruff before committing."
        assert review.find_proposal(store, ident).status == "dismissed"


def test_proposals_command_parsing_and_completion() -> None:
    assert parse_proposals("").verb == "list"
    assert parse_proposals("accept p-1 --edit").edit
    assert parse_proposals("dismiss p-1 too vague").reason == "too vague"
    for bad in ("frobnicate p-1", "accept", "accept p-1 --force", "show p-1 extra"):
        with pytest.raises(Exception, match="proposals"):
            parse_proposals(bad)
    assert parse_line("/proposals accept p-1").name == "proposals"  # type: ignore[union-attr]
    assert completions("/prop", []) == ["/proposals"]
    assert completions("/proposals a", []) == ["accept"]
    pending = ["prop-b", "prop-a", "other"]
    assert completions("/proposals accept pr", [], pending) == ["prop-a", "prop-b"]
    assert completions("/proposals frob pr", [], pending) == []
    assert completions("/proposals accept prop-a --e", [], pending) == []
    asked: list[str] = []
    completer = SlashCompleter(lambda: [], lambda: asked.append("ids") or pending)  # type: ignore[func-returns-value]
    got = [c.text for c in completer.get_completions(Document("/proposals dismiss prop-"), CompleteEvent())]
    assert got == ["prop-a", "prop-b"] and asked == ["ids"]
    list(completer.get_completions(Document("/proposals acc"), CompleteEvent()))
    assert asked == ["ids"]  # the daemon is asked only when an id is being typed


@pytest.mark.slow
def test_cli_inspect_export_forget_and_proposals(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "bob")
    _seed(home)
    r = holon(home, "memory", "inspect", "ada", "--json")
    assert r.code == 0, r
    [fact] = r.json()
    assert fact["entry"]["text"] == "The cache is redis." and fact["entry"]["evidence"]
    assert fact["stale"] is True  # observed on the fake clock (January); the CLI reads the real one
    assert holon(home, "memory", "inspect", "bob", "--json").json() == []  # not bob's to recall
    assert holon(home, "memory", "inspect", "--scope", "nowhere").code == 2

    table = holon(home, "memory", "inspect", "ada", env=cli_env(COLUMNS="200"))
    assert table.code == 0, table
    for shown in ("scope", "observed 2026-", "verified 2026-", "The cache is redis.", "workspace", "STALE", "active"):
        assert shown in table.out, table.out

    listed = holon(home, "proposals", "--json").json()
    assert {p["entry"]["kind"] for p in listed} == {"preference", "identity"}
    assert holon(home, "proposals", "list", "--agent", "ada", "--json").json() == listed
    assert holon(home, "proposals", "list", "--agent", "bob", "--json").json() == []
    pref = next(p["proposal_id"] for p in listed if p["entry"]["kind"] == "preference")
    ident = next(p["proposal_id"] for p in listed if p["entry"]["kind"] == "identity")
    assert "My name is Ada." in holon(home, "proposals", "show", ident[:6]).out
    assert holon(home, "proposals", "accept", pref, "--edit", "--text", "x").code == 2

    # --edit runs $EDITOR on the text, as git commit does; the edited text is what becomes durable.
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/the linter/ruff/' \"$1\"\n", encoding="utf-8")
    editor.chmod(0o755)
    r = holon(home, "proposals", "accept", pref, "--edit", env=cli_env(EDITOR=str(editor), VISUAL=str(editor)))
    assert r.code == 0 and "accepted" in r.out, r
    assert "dismissed" in holon(home, "proposals", "dismiss", ident, "--reason", "no").out
    assert holon(home, "proposals", "accept", ident).code == 4  # a conflict: decided already

    out = tmp_path / "export.json"
    assert holon(home, "memory", "export", "--out", str(out)).code == 0
    doc = json.loads(out.read_text())
    assert len(doc["entries"]) == 2 and len(doc["proposals"]) == 2
    assert all(e["entry"]["evidence"] and e["recorded_us"] for e in doc["entries"])
    assert {p["status"] for p in doc["proposals"]} == {"accepted", "dismissed"}

    r = holon(home, "memory", "forget", fact["entry_id"][:8], "--reason", "moved")
    assert r.code == 0 and "forgot" in r.out
    [left] = holon(home, "memory", "inspect", "ada", "--json").json()
    assert (left["entry"]["kind"], left["entry"]["text"]) == ("preference", "Always run ruff before committing.")
    assert left["source"] == "proposal" and left["proposal_id"] == pref
    assert len(holon(home, "memory", "inspect", "--status", "all", "--json").json()) == 2


def _propose(home: Path, agent: str, proposal_id: str, kind: Literal["preference", "identity"], text: str) -> None:
    """A pending operator-scope proposal, appended as evolve would append it."""
    with open_store(home) as store:
        agent_id = store.agent(agent).agent_id
        now = store.ledger.clock.now_us()
        entry = DurableEntry(
            scope="operator", kind=kind, subject=f"{kind}:{proposal_id}", text=text, owner="operator", evidence=[1],
            observed_us=now,
        )  # fmt: skip
        created = ev.ProposalCreated(
            proposal_id=proposal_id, kind="memory", entry=entry, reason="stated by the operator"
        )
        store.append(NewEvent(agent_id, created, origin="evolve:test"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_proposals_in_a_pty(tmp_path: Path) -> None:
    """``holon chat`` in a real terminal: accept with an edit prefilled at the prompt, then dismiss."""
    with FakeLLM(lambda body: {"content": "ok"}) as fake:
        home = fake_home(tmp_path, fake, "alice")
        _propose(home, "alice", "prop-pref-1", "preference", "Always answer in French.")
        _propose(home, "alice", "prop-ident-1", "identity", "My name is Zed.")
        env = cli_env(HOLON_API_PORT=str(free_port()), PROMPT_TOOLKIT_NO_CPR="1")
        argv = holon_argv("--home", home, "chat")
        child = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=120, dimensions=(40, 160))
        child.logfile_read = sys.stdout  # shown by pytest when the test fails
        try:
            child.expect("alice>")
            assert holon(home, "memory", "inspect", "alice", "--json").json() == []  # not durable yet
            child.sendline("/proposals")
            child.expect("Always answer in French.")
            child.expect("alice>")
            child.sendline("/proposals accept prop-pref --edit")
            child.expect("edit>")
            child.expect(re.escape("Always answer in French."))  # the current text, ready to edit
            child.send("\x08" * len("French.") + "English.\r")  # Backspace over the last word
            child.expect(r"accepted prop-pref-1 -> mem-")
            child.expect("alice>")
            child.sendline("/proposals dismiss prop-ident-1 not my name")
            child.expect("dismissed prop-ident-1")
            child.expect("alice>")
            child.sendline("/proposals")
            child.expect("no proposals wait for you")
            child.expect("alice>")
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
            stopped = holon(home, "daemon", "stop")
        assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
        assert stopped.code == 0, stopped
    [entry] = holon(home, "memory", "inspect", "alice", "--json").json()
    assert entry["entry"]["text"] == "Always answer in English." and entry["proposal_id"] == "prop-pref-1"
    decided = {p["proposal_id"]: p["status"] for p in holon(home, "proposals", "--status", "all", "--json").json()}
    assert decided == {"prop-pref-1": "accepted", "prop-ident-1": "dismissed"}


@pytest.mark.slow  # a daemon with confined commands
def test_hostile_requests_get_4xx(server: ApiServer) -> None:
    """Ids of 10 KB, unicode, control characters, ambiguous prefixes, odd bodies: a 4xx, never a 5xx."""
    huge, odd = "x" * 10_000, "ünï💥\u202e"
    with server.client() as client:
        pref = _pending(client)["preference"]["proposal_id"]
        cases = [
            ("GET", f"/v1/proposals/{huge}", None, 400),
            ("GET", f"/v1/proposals/{odd}", None, 404),
            ("GET", "/v1/proposals/%00", None, 404),
            ("GET", "/v1/proposals", {"params": {"status": "maybe"}}, 422),
            ("GET", "/v1/proposals", {"params": {"agent": odd}}, 404),
            ("GET", "/v1/proposals", {"params": {"agent": huge}}, 422),
            ("POST", f"/v1/proposals/{huge}/accept", None, 400),
            ("POST", f"/v1/proposals/{odd}/dismiss", {"json": {"reason": odd}}, 404),
            ("POST", f"/v1/proposals/{pref}/accept", {"json": {"text": ""}}, 422),
            ("POST", f"/v1/proposals/{pref}/accept", {"json": {"text": "   "}}, 400),
            ("POST", f"/v1/proposals/{pref}/accept", {"json": {"text": "x" * 5_000}}, 400),
            ("POST", f"/v1/proposals/{pref}/accept", {"json": {"text": 7}}, 422),
            ("POST", f"/v1/proposals/{pref}/accept", {"json": {"other": 1}}, 422),
            (
                "POST",
                f"/v1/proposals/{pref}/accept",
                {"content": b"{not json", "headers": {"content-type": "application/json"}},
                400,
            ),
            ("POST", f"/v1/proposals/{pref}/dismiss", {"json": {"reason": "r" * 501}}, 422),
            ("GET", f"/v1/agents/{huge}/memory/durable", None, 404),
            ("GET", "/v1/agents/ada/memory/durable", {"params": {"scope": "everyone"}}, 422),
            ("POST", f"/v1/memory/durable/{huge}/forget", None, 400),
            ("POST", f"/v1/memory/durable/{odd}/forget", {"json": {}}, 404),
        ]
        for method, path, kwargs, expected in cases:
            r = client.request(method, path, **(kwargs or {}))
            assert r.status_code == expected, (method, path[:60], kwargs, r.status_code, r.text[:300])
            assert "error" in r.json() or "detail" in r.json()
        # Ambiguous prefix ("p" matches both proposals): a usage error that names the fix.
        r = client.post("/v1/proposals/p/accept")
        assert r.status_code == 400 and "several" in r.text
        assert _pending(client)["preference"]["status"] == "pending"  # none of the above decided anything
        # An empty body is a plain accept.
        r = client.post(f"/v1/proposals/{pref}/accept", content=b"", headers={"content-type": "application/json"})
        assert r.status_code == 200 and r.json()["outcome"] == "accepted"
