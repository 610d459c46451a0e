"""The REPL without a terminal: slash-command parsing and completion, rendering into a recording
``Console``, the turn watch, SSE parsing, and the client's errors against a mock transport."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import pytest
from rich.console import Console

from holon.api.models import EventOut
from holon.errors import NotFoundError, UsageError
from holon.projections.state import AgentState
from holon.repl import render
from holon.repl.app import TurnWatch
from holon.repl.client import ApiClient, DaemonUnreachable, _sse, tls_for
from holon.repl.commands import COMMANDS, Say, Slash, SlashCompleter, completions, parse_line

# --- parsing and completion ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("", None),
        ("   ", None),
        ("hello there", Say("hello there")),
        ("  hi  ", Say("hi")),
        ("//etc/passwd is a path", Say("/etc/passwd is a path")),
        ("/agents", Slash("agents")),
        ("/AGENTS", Slash("agents")),
        ("/switch bob", Slash("switch", "bob")),
        ("/search  what did we decide  ", Slash("search", "what did we decide")),
        ("/model", Slash("model")),
        ("/model openai/gpt-4o-mini", Slash("model", "openai/gpt-4o-mini")),
        ("/exit", Slash("quit")),
        ("/q", Slash("quit")),
        ("/events 5", Slash("events", "5")),
    ],
)
def test_parse_line(line: str, parsed: Any) -> None:
    assert parse_line(line) == parsed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/serch x", "did you mean /search?"),
        ("/zzz", "/help lists them"),
        ("/switch", "/switch needs NAME"),
        ("/search   ", "/search needs QUERY"),
        ("/agents all", "/agents takes no argument"),
    ],
)
def test_parse_line_errors(line: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("?", r"\?")):
        parse_line(line)


def test_every_required_command_exists() -> None:
    wanted = "agents switch new state work tasks waits search get context events transcript model abort help quit"
    assert set(wanted.split()) <= set(COMMANDS)


def test_completions() -> None:
    agents = ["alice", "albert", "bob"]
    assert completions("/s", agents) == ["/switch", "/state", "/search"]
    assert completions("/", agents) == [f"/{c}" for c in COMMANDS]
    assert completions("/switch al", agents) == ["albert", "alice"]
    assert completions("/switch ", agents) == ["albert", "alice", "bob"]
    assert completions("/search al", agents) == []
    assert completions("hello /s", agents) == []


def test_completer_replaces_the_current_word() -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    completer = SlashCompleter(lambda: ["alice", "bob"])
    got = list(completer.get_completions(Document("/switch a"), CompleteEvent()))
    assert [(c.text, c.start_position) for c in got] == [("alice", -1)]
    got = list(completer.get_completions(Document("/ag"), CompleteEvent()))
    assert [(c.text, c.start_position) for c in got] == [("/agents", -3)]
    assert list(completer.get_completions(Document("plain text"), CompleteEvent())) == []


# --- rendering -------------------------------------------------------------------------------------


def console() -> Console:
    return Console(record=True, width=100, force_terminal=False, color_system=None)


_SEQ = iter(range(1, 1_000_000))


def event(type_: str, *, agent_id: str = "agt_1", authority: str = "runtime", **payload: Any) -> EventOut:
    return EventOut(
        seq=next(_SEQ),
        id="evt",
        agent_id=agent_id,
        type=type_,
        version=1,
        ts_us=1_700_000_000_000_000,
        origin="runtime",
        authority=authority,
        payload={"type": type_, **payload},
        hash="h",
    )


def test_reply_streams_deltas_then_tools_compactly() -> None:
    c = console()
    view = render.ReplyView(c, "alice")
    view.delta({"text": "Let me "})
    view.delta({"text": "look."})
    view.event(event("model.responded", turn_id="t", round=0, model="m", content="Let me look."))
    view.event(event("tool.called", call_id="c1", tool="memory_search", arguments='{"query": "' + "x" * 300 + '"}'))
    view.event(
        event("tool.resulted", call_id="c1", tool="memory_search", status="ok", output="line\n" * 200, duration_ms=12.4)
    )
    view.event(event("tool.resulted", call_id="c2", tool="shell", status="error", output="boom", duration_ms=3))
    view.delta({"text": "Found it."})
    view.event(event("model.responded", turn_id="t", round=1, model="m", content="Found it."))
    view.event(event("turn.settled", turn_id="t", outcome="completed", reply="Found it."))
    lines = c.export_text().splitlines()
    assert lines[0] == "Let me look."  # once: the round's content is not repeated after its deltas
    assert lines[1].startswith('  ⚙ memory_search {"query": "xxx') and lines[1].endswith("…")
    assert lines[2].startswith("    ✓ ok 12 ms: line line") and lines[2].endswith("…")
    assert lines[3] == "    ✗ error 3 ms: boom"
    assert lines[4:] == ["Found it."]
    assert all(len(line) <= 100 for line in lines)


def test_reply_without_deltas_shows_the_content_and_a_failed_turn() -> None:
    c = console()
    view = render.ReplyView(c, "alice")
    view.event(
        event(
            "model.responded",
            turn_id="t",
            round=0,
            model="m",
            content={"blob": "0" * 64, "size": 9000, "preview": "A long"},
        )
    )
    view.event(event("model.responded", turn_id="t", round=1, model="m", error="rate limited", error_kind="rate_limit"))
    view.event(event("turn.settled", turn_id="t", outcome="failed", reason="model error"))
    assert c.export_text().splitlines() == [
        "A long…",
        "  model error (rate_limit): rate limited",
        "[turn failed: model error]",
    ]


def test_briefs_and_interrupted_turns() -> None:
    c = console()
    render.brief_line(c, "watcher", {"kind": "result", "text": "The build is green."})
    view = render.ReplyView(c, "alice")
    view.delta({"text": "Work"})
    view.event(event("turn.settled", turn_id="t", outcome="interrupted", reason="aborted by the operator"))
    assert c.export_text().splitlines() == [
        "✉ watcher [result]: The build is green.",
        "Work",
        "[turn interrupted: aborted by the operator]",
    ]


def agent_state(name: str, **kw: Any) -> AgentState:
    return AgentState(
        agent_id=f"agt_{name}", name=name, template="assistant", home="/h", created_us=1, last_event_us=1, **kw
    )


def test_tables() -> None:
    c = console()
    render.agents_table(
        c,
        [
            agent_state("alice", settings={"model": "openai/fake"}, turns=3, pending_inputs=[4, 5]),
            agent_state("bob", status="waiting"),
        ],
        current="alice",
    )
    render.work_table(
        c,
        [
            {
                "work_item_id": "wi_0123456789",
                "title": "Ship it",
                "status": "open",
                "todos": [{"status": "done"}, {"status": "pending"}],
                "updated_us": 1,
            }
        ],
    )
    render.tasks_table(c, [{"task_id": "task_abcdefgh12", "kind": "command", "title": "make test", "state": "running"}])
    render.waits_table(
        c,
        [
            {
                "wait_id": "wait_1234567890",
                "on": "task",
                "target": "task_x",
                "recheck_at_us": 1_700_000_000_000_000,
                "status": "pending",
                "reason": "tests",
            }
        ],
    )
    render.waits_table(c, [])
    text = c.export_text()
    rows = [[cell.strip() for cell in line.split("│")] for line in text.splitlines() if "│" in line]
    assert rows == [
        ["*", "alice", "idle", "openai/fake", "3", "2", ""],
        ["", "bob", "waiting", "", "0", "0", ""],
        ["23456789", "Ship it", "open", "1/2", "1970-01-01 00:00:00"],
        ["cdefgh12", "command", "make test", "running", ""],
        ["34567890", "task", "task_x", "2023-11-14 22:13:20", "pending", "tests"],
    ]
    assert "no waits" in text


def test_agents_table_shows_the_daemons_live_status() -> None:
    c = Console(record=True, width=160, force_terminal=False, color_system=None)
    agents = [agent_state(n, status="idle") for n in ("a", "b", "c", "d", "e")]
    live = {
        "agt_a": {"state": "paused", "detail": "paused by the operator", "next_wake_us": None},
        "agt_b": {"state": "waiting", "detail": "external deploy", "next_wake_us": 1_700_000_000_000_000},
        "agt_c": {"state": "asleep", "detail": "daily budget used: 2 of 2 turns per day used",
                  "next_wake_us": 1_700_006_400_000_000},
        "agt_d": {"state": "failed", "detail": "error: asleep with no wake source (no wait, no timer)"},
    }  # fmt: skip
    render.agents_table(c, agents, current="b", live=live)
    text = c.export_text()
    rows = [[cell.strip() for cell in line.split("│")] for line in text.splitlines() if "│" in line]
    assert [r[:3] for r in rows] == [["", "a", "paused"], ["*", "b", "waiting"], ["", "c", "asleep"],
                                     ["", "d", "failed"], ["", "e", "idle"]]  # fmt: skip
    assert rows[0][-1] == "paused by the operator"
    assert rows[1][-1] == "on external deploy; recheck at 2023-11-14T22:13:20Z"  # daemon status's words
    assert rows[2][-1] == "daily budget used: 2 of 2 turns per day used; until 2023-11-15T00:00:00Z"
    assert rows[3][-1].startswith("error: asleep with no wake source")
    assert rows[4][-1] == ""  # no live entry: the projection's status


def test_search_get_context_events_transcript() -> None:
    c = console()
    render.search_hits(
        c,
        {
            "query": "pineapple",
            "total": 7,
            "hits": [
                {
                    "source_ref": "event:2",
                    "kind": "message",
                    "snippet": "about pineapple",
                    "time": "2026-01-01T00:00:00Z",
                }
            ],
            "notes": ["index lags 3 events"],
        },
    )
    render.memory_read(
        c,
        {
            "ref": "file:agent/self.md",
            "kind": "file",
            "title": "self.md",
            "content": "# Me\nhello",
            "size": 10,
            "next_calls": [],
        },
    )
    render.context_summary(
        c,
        [{"turn_id": "turn_1", "round": 0, "used_tokens": 100, "budget_tokens": 1000, "summary": {"full": 2, "excluded": 1},
          "manifest": {"sections": [{"key": "history", "tier": "turn", "representation": "compact", "allocated_tokens": 50, "requested_tokens": 90, "reason": "compacted to fit", "excluded": False}]}}],
    )  # fmt: skip
    events = [
        event("message.received", authority="operator", text="hi [bold]there[/]", sender="operator"),
        event("turn.settled", turn_id="t", outcome="completed", reply="Hello!"),
        event("brief.delivered", kind="progress", text="halfway"),
    ]
    render.events_table(c, events)
    render.transcript(c, "alice", events)
    text = c.export_text()
    assert any(
        [c.strip() for c in line.split("│")[2:]] == ["message.received", "hi [bold]there[/]"]
        for line in text.splitlines()
    ), text
    for expected in (
        "1 of 7 hits for 'pineapple'",
        " 1. event:2  message  2026-01-01T00:00:00Z",
        "note: index lags 3 events",
        "self.md  (file, 10 chars)",
        "# Me",
        "round 0: 100/1000 tokens; full 2, excluded 1",
        "history │ turn │ compact │ 50/90  │ compacted to fit",
        "you: hi [bold]there[/]",
        "alice: Hello!",
        "✉ alice [progress]: halfway",
    ):
        assert expected in text, (expected, text)


def test_turn_watch_follows_the_turn_that_took_the_input() -> None:
    watch = TurnWatch(input_seq=10)
    watch.see(event("turn.started", turn_id="other", inputs=[9]))
    watch.see(event("turn.settled", turn_id="other", outcome="completed"))
    assert not watch.done
    watch.see(event("turn.started", turn_id="mine", inputs=[9, 10]))
    watch.see(event("turn.settled", turn_id="mine", outcome="completed"))
    assert watch.done


# --- the client ------------------------------------------------------------------------------------


def test_sse_parsing() -> None:
    lines = [": ping", "id: 3", "event: event", 'data: {"a": 1}', "", "event: delta", "data: x", "data: y", "", ""]
    assert list(_sse(iter(lines))) == [("event", '{"a": 1}'), ("delta", "x\ny")]


def mock_client(handler: Any) -> ApiClient:
    client = ApiClient("http://daemon", token="s3cret")
    client._http = httpx.Client(
        base_url="http://daemon", transport=httpx.MockTransport(handler), headers=client._http.headers
    )
    return client


def test_client_errors_and_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/agents/nobody/working-memory":
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no agent named 'nobody'"}})
        if request.url.path == "/v1/agents/x/inputs":
            return httpx.Response(
                401, json={"error": {"code": "unauthorized", "message": "missing or wrong bearer token"}}
            )
        if request.url.path == "/v1/agents":
            return httpx.Response(200, json=[agent_state("alice").model_dump(mode="json")])
        return httpx.Response(500, text="oops")

    client = mock_client(handler)
    assert [a.name for a in client.agents()] == ["alice"]
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    with pytest.raises(NotFoundError, match="no agent named 'nobody'"):
        client.working_memory("nobody")
    with pytest.raises(UsageError, match="refused the API token"):
        client.send("x", "hi")
    with pytest.raises(Exception, match=r"the daemon failed \(500\)"):
        client.tasks("y")


def test_client_unreachable() -> None:
    from holon.api.server import free_port

    with (
        ApiClient(f"http://127.0.0.1:{free_port()}", timeout_s=2) as client,
        pytest.raises(DaemonUnreachable, match="does not answer"),
    ):
        client.health()


def test_a_plain_http_client_loads_no_ca_bundle_and_could_verify_nothing() -> None:
    """The daemon's client skips httpx's CA bundle on plain HTTP (``tls_for``): the context it gets
    instead trusts no certificate, so it could never accept a TLS peer unverified; https verifies."""
    ctx = tls_for("http://127.0.0.1:7878")
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0
    assert tls_for("HTTP://localhost:7878/") is ctx  # one context per process
    assert tls_for("https://holon.example:7878") is True
    with ApiClient("http://127.0.0.1:9") as client, pytest.raises(DaemonUnreachable):
        client.agents()  # nothing listens there: the client still reports it as before
