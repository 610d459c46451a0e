"""The dashboard over real HTTP (RFC 0009): login, sessions, CSRF, Host, CSP, escaping, pages.

The real daemon behind the real API on 127.0.0.1 (``server``: in this process, a FakeClock, echo
model), reached with plain httpx clients that hold no bearer header: what a browser sends.
The browser itself is ``test_dashboard_browser.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
from helpers.api_server import ApiServer
from helpers.turn_cli import holon

from holon.api.dashboard.pages import local_path
from holon.api.dashboard.security import CSP, CSRF_HEADER
from holon.api.dashboard.sessions import CODE_TTL_S, MAX_SESSIONS, SESSION_TTL_S, Sessions
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry
from holon.repl.client import tls_for
from holon.runtime.agents import create_agent


def _browser(server: ApiServer) -> httpx.Client:
    """A client like a browser: no bearer header, cookies kept, redirects not followed."""
    return httpx.Client(base_url=server.url, timeout=10, follow_redirects=False, verify=tls_for(server.url))


def _login(server: ApiServer, c: httpx.Client) -> str:
    """Log ``c`` in with a one-time code; the page's CSRF token."""
    with server.client() as api:
        r = api.post("/v1/dashboard/login")
    assert r.status_code == 200, r.text
    path = r.json()["path"]
    r = c.get(path)
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    page = c.get("/")
    assert page.status_code == 200, page.text
    found = re.search(r'<meta name="holon-csrf" content="([^"]+)">', page.text)
    assert found
    return found.group(1)


@pytest.fixture
def browser(server: ApiServer) -> Iterator[httpx.Client]:
    with _browser(server) as c:
        yield c


def _make(server: ApiServer, name: str = "ada") -> None:
    with server.client() as api:
        assert api.post("/v1/agents", json={"name": name}).status_code == 201


# --- sessions (pure) ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_login_code_opens_one_session_once_and_expires() -> None:
    clock = Clock()
    sessions = Sessions(now=clock)
    code = sessions.new_code()
    session = sessions.redeem(code)
    assert session is not None and sessions.get(session.session_id) is session
    assert sessions.redeem(code) is None  # spent
    late = sessions.new_code()
    clock.t += CODE_TTL_S + 1
    assert sessions.redeem(late) is None
    assert sessions.redeem("") is None and sessions.redeem("x" * 500) is None


def test_sessions_expire_when_unused_and_are_bounded() -> None:
    clock = Clock()
    sessions = Sessions(now=clock)
    first = sessions.open()
    clock.t += SESSION_TTL_S - 1
    assert sessions.get(first.session_id) is first  # use renews it
    clock.t += SESSION_TTL_S - 1
    assert sessions.get(first.session_id) is first
    clock.t += SESSION_TTL_S + 1
    assert sessions.get(first.session_id) is None
    opened = [sessions.open() for _ in range(MAX_SESSIONS + 5)]
    assert sessions.get(opened[0].session_id) is None and sessions.get(opened[-1].session_id) is not None
    assert Sessions.csrf_ok(opened[-1], opened[-1].csrf)
    assert not Sessions.csrf_ok(opened[-1], None) and not Sessions.csrf_ok(opened[-1], opened[-2].csrf)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "/"),
        ("/agents/ada", "/agents/ada"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("agents", "/"),
        ("/a\nb", "/"),
        ("/login?next=/login", "/"),
    ],
)
def test_login_only_ever_returns_to_a_local_path(given: str | None, expected: str) -> None:
    assert local_path(given) == expected


# --- login -------------------------------------------------------------------------------------


def test_a_page_without_a_session_goes_to_the_login_page(server: ApiServer, browser: httpx.Client) -> None:
    r = browser.get("/agents/ada")
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/agents/ada"
    login = browser.get("/login?next=/agents/ada")
    assert login.status_code == 200 and 'id="login-form"' in login.text
    assert login.headers["content-security-policy"] == CSP
    # The dashboard's own data paths answer 401, not a redirect; the API stays bearer-only.
    assert browser.get("/ui/fragments/agents").status_code == 401
    assert browser.get("/ui/events").status_code == 401
    assert browser.get("/v1/agents").status_code == 401


def test_a_login_code_sets_a_strict_httponly_cookie_once(server: ApiServer, browser: httpx.Client) -> None:
    assert browser.post("/v1/dashboard/login", json={}).status_code == 401  # minting a code needs the token
    with server.client() as api:
        path = api.post("/v1/dashboard/login").json()["path"]
    r = browser.get(path + "&next=/agents")
    assert r.status_code == 303 and r.headers["location"] == "/agents"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert cookie.startswith(f"holon_session_{server.port_number}=")
    assert browser.get("/").status_code == 200
    with _browser(server) as other:
        again = other.get(path)
        assert again.status_code == 401 and "used or has expired" in again.text
        assert "set-cookie" not in again.headers


def test_the_token_typed_into_the_login_page_opens_a_session(server: ApiServer, browser: httpx.Client) -> None:
    wrong = browser.post("/login", json={"token": "nope", "next": "/"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert browser.post("/login", data={"token": server.token}).status_code == 415  # never a form
    r = browser.post("/login", json={"token": server.token, "next": "//evil.example"})
    assert r.status_code == 204 and r.headers["location"] == "/"
    assert browser.get("/").status_code == 200


def test_logout_ends_the_session(server: ApiServer, browser: httpx.Client) -> None:
    csrf = _login(server, browser)
    assert browser.post("/logout", json={}).status_code == 403  # no CSRF token
    assert browser.post("/logout", json={}, headers={CSRF_HEADER: csrf}).status_code == 204
    assert browser.get("/").status_code == 303


# --- pages -------------------------------------------------------------------------------------


def test_the_agents_page_shows_state_model_and_spend(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    _login(server, browser)
    r = browser.get("/")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
    assert 'href="/agents/ada"' in r.text and 'class="state">idle<' in r.text
    assert "no budget (foreground)" in r.text and 'data-action="pause"' in r.text
    # No inline script or style anywhere: every <script> has a src, no on* handlers, no style attributes.
    assert all('src="/ui/static/' in tag for tag in re.findall(r"<script[^>]*>", r.text))
    assert not re.search(r"\son[a-z]+=", r.text) and " style=" not in r.text
    assert browser.get("/ui/fragments/agents").text.count("<tr") == 1
    assert browser.get("/ui/static/dashboard.js").status_code == 200
    assert browser.get("/ui/static/dashboard.js").headers["content-security-policy"] == CSP


def test_a_foreground_agents_day_stays_current_on_the_agents_page(server: ApiServer, browser: httpx.Client) -> None:
    """The row's "Today" comes from the daemon's per-day spending cache; a turn settled after the
    first render counts (it did only for background agents, so a foreground row stayed at 0)."""
    _make(server, "ada")
    csrf = _login(server, browser)
    assert "· 0 turns" in browser.get("/ui/fragments/agents", params={"agent": "ada"}).text
    assert browser.post("/ui/agents/ada/messages", json={"text": "hi"}, headers={CSRF_HEADER: csrf}).status_code == 202
    server.wait_idle()
    assert "· 1 turns" in browser.get("/ui/fragments/agents", params={"agent": "ada"}).text


def test_the_agent_page_deep_links_and_escapes_ledger_text(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    csrf = _login(server, browser)
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    r = browser.post(
        "/ui/agents/ada/timers", json={"schedule": "every 1h", "prompt": evil}, headers={CSRF_HEADER: csrf}
    )
    assert r.status_code == 201, r.text
    page = browser.get("/agents/ada")
    assert page.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page.text
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert 'id="conversation"' in page.text and 'data-stream="/ui/agents/ada/events"' in page.text
    missing = browser.get("/agents/nobody")
    assert missing.status_code == 404 and 'id="missing"' in missing.text and "nobody" in missing.text


# --- changes need the CSRF token, JSON, and this daemon's Host and Origin ------------------------


def test_a_change_needs_the_session_and_its_csrf_token(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    csrf = _login(server, browser)
    assert browser.post("/ui/agents/ada/pause", json={}).status_code == 403  # cookie alone
    assert browser.post("/ui/agents/ada/pause", json={}, headers={CSRF_HEADER: "wrong"}).status_code == 403
    with _browser(server) as stranger:  # the header without the session
        assert stranger.post("/ui/agents/ada/pause", json={}, headers={CSRF_HEADER: csrf}).status_code == 403
    # What a cross-site form can send: refused before any route (not JSON).
    form = browser.post("/ui/agents/ada/pause", data={"x": "1"}, headers={CSRF_HEADER: csrf})
    assert form.status_code == 415
    foreign = browser.post(
        "/ui/agents/ada/pause", json={}, headers={CSRF_HEADER: csrf, "Origin": "http://evil.example"}
    )
    assert foreign.status_code == 403
    with server.client() as api:
        assert api.get("/v1/agents/ada").json()["status"]["state"] == "idle"
    ok = browser.post("/ui/agents/ada/pause", json={}, headers={CSRF_HEADER: csrf, "Origin": server.url})
    assert ok.status_code == 200 and ok.json()["settings"]["paused"] is True
    assert browser.post("/ui/agents/ada/resume", json={}, headers={CSRF_HEADER: csrf}).status_code == 200


def test_a_foreign_host_is_refused_on_pages_and_api(server: ApiServer, browser: httpx.Client) -> None:
    """DNS rebinding: a page at evil.example re-resolved to 127.0.0.1 sends ``Host: evil.example``."""
    _login(server, browser)
    for path in ("/", "/login", "/ui/static/dashboard.js", "/v1/health", "/v1/agents"):
        r = browser.get(path, headers={"Host": f"evil.example:{server.port_number}"})
        assert r.status_code == 403 and "DNS rebinding" in r.json()["error"]["message"], path


def test_create_message_timer_cancel_and_delete_from_the_dashboard(server: ApiServer, browser: httpx.Client) -> None:
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    r = browser.post("/ui/agents", json={"name": "bob", "schedule": "every 2h", "prompt": "check"}, headers=h)
    assert r.status_code == 201, r.text
    sent = browser.post("/ui/agents/bob/messages", json={"text": "hello <b>"}, headers=h)
    assert sent.status_code == 202 and sent.json()["seq"] > 0
    with server.client() as api:
        event = api.get("/v1/ledger/tail", params={"n": 50}).json()
    received = [e for e in event if e["type"] == "message.received" and e["payload"]["text"] == "hello <b>"]
    assert received and received[0]["payload"]["channel"] == "dashboard"
    timers = browser.get("/agents/bob").text
    assert "every 7200s" in timers
    timer_id = re.search(r'data-timer="([^"]+)"', timers)
    assert timer_id
    assert browser.delete(f"/ui/agents/bob/timers/{timer_id.group(1)}", headers=h).status_code == 415  # not JSON
    cancelled = browser.request("DELETE", f"/ui/agents/bob/timers/{timer_id.group(1)}", json={}, headers=h)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    bad = browser.post("/ui/agents/bob/timers", json={"schedule": "whenever"}, headers=h)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_request"
    assert browser.request("DELETE", "/ui/agents/bob", json={}, headers=h).status_code == 204
    assert browser.get("/agents/bob").status_code == 404


def test_dashboard_routes_stay_out_of_the_openapi_document(server: ApiServer) -> None:
    with server.client() as api:
        paths = api.get("/v1/openapi.json").json()["paths"]
        assert "/v1/dashboard/login" in paths
        assert not [p for p in paths if not p.startswith("/v1/")]
        assert api.get("/v1/nope").status_code == 404
    with httpx.Client(base_url=server.url) as bare:
        for path in ("/nope", "/agentsx", "/uix", "/v1/agents"):  # outside the dashboard: the API's rule
            assert bare.get(path).status_code == 401, path


@pytest.mark.slow
def test_holon_dashboard_names_the_missing_daemon(tmp_path) -> None:
    r = holon(tmp_path / "home", "dashboard", "--url")
    assert r.code != 0 and "Traceback" not in r.err, r
    assert "no daemon serves the home" in r.err and "holon serve" in r.err


def test_holon_s_own_agents_show_only_when_asked(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    assert server.port is not None
    store = server.port.store
    server.call(lambda: create_agent(store, "doctor", settings={"diagnostic": True}, internal=True))  # as diagnose does
    _login(server, browser)
    page = browser.get("/")
    assert 'data-agent="ada"' in page.text and 'data-agent="doctor"' not in page.text
    everything = browser.get("/", params={"all": "true"})
    assert (
        'data-agent="doctor"' in everything.text and 'data-refresh="/ui/fragments/agents?all=true"' in everything.text
    )
    assert 'data-agent="doctor"' in browser.get("/ui/fragments/agents", params={"all": "true"}).text


def test_the_rows_fragment_renders_only_the_agents_asked_for(server: ApiServer, browser: httpx.Client) -> None:
    """The agents page refreshes only the rows whose events arrived: ``?agent=`` (ids or names)
    gives those rows, with the row of the background agent whose budget a child spends, and no
    "no agents" row when none is left (a deleted agent: the page removes its row)."""
    for name in ("ada", "bob"):
        _make(server, name)
    assert server.port is not None
    store = server.port.store
    boss = server.call(lambda: create_agent(store, "boss", settings={"background": True}))
    server.call(lambda: create_agent(store, "kid", settings={"background": True}, parent_id=boss.agent_id))
    _login(server, browser)
    ada = store.agent("ada")

    def rows(*agents: str) -> list[str]:
        r = browser.get("/ui/fragments/agents", params=[("agent", a) for a in agents])
        assert r.status_code == 200, r.text
        return re.findall(r'<tr data-agent="([^"]+)" data-agent-id="([^"]+)"', r.text)

    assert rows(ada.agent_id) == [("ada", ada.agent_id)]
    assert [n for n, _ in rows("bob", ada.agent_id)] == ["ada", "bob"]
    assert [n for n, _ in rows("kid")] == ["boss", "kid"]  # the child spends its owner's budget
    assert rows("agt_gone") == [] and "No agents" not in browser.get("/ui/fragments/agents?agent=x").text
    assert browser.get("/ui/fragments/agents").text.count("<tr") == 4  # no ``agent``: the whole table
    too_many = browser.get("/ui/fragments/agents", params=[("agent", f"a{i}") for i in range(201)])
    assert too_many.status_code == 400 and "at most 200" in too_many.text, too_many.text
    page = browser.get("/")
    assert f'data-agent-id="{ada.agent_id}"' in page.text
    foreign = browser.get("/ui/fragments/agents", params={"agent": "ada"}, headers={"Host": "evil.test"})
    assert foreign.status_code == 403  # the rows, like every path, only for this daemon's Host


# --- the ledger page ---------------------------------------------------------------------------


def test_the_ledger_page_filters_pages_escapes_and_verifies(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    _make(server, "bob")
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    assert (
        browser.post("/ui/agents/ada/messages", json={"text": "<script>alert(1)</script> hi"}, headers=h).status_code
        == 202
    )
    server.wait_idle()
    page = browser.get("/ledger")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hi" in page.text and "<script>alert" not in page.text
    seqs = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', page.text)]
    assert seqs == sorted(seqs, reverse=True) and seqs[-1] == 1
    messages = browser.get("/ledger", params={"type": "message.received", "agent": "ada"}).text
    assert messages.count("<tr data-seq=") == 1 and "message.received" in messages
    assert "agent.created" not in browser.get("/ledger", params={"type": "message.received"}).text.split("<tbody>")[1]
    older = browser.get("/ledger", params={"before": 3}).text
    assert re.findall(r'<tr data-seq="(\d+)"', older) == ["2", "1"]
    assert browser.get("/ledger", params={"type": "no.such"}).status_code == 400
    seq = seqs[-1]
    event = browser.get(f"/ledger/{seq}")
    assert event.status_code == 200 and "agent.created" in event.text and 'id="event-json"' in event.text
    assert browser.get("/ledger/999999").status_code == 404
    assert browser.post("/ui/ledger/verify", json={}).status_code == 403  # no CSRF token
    verified = browser.post("/ui/ledger/verify", json={}, headers=h)
    assert verified.status_code == 200 and verified.json()["ok"] is True and verified.json()["events"] >= len(seqs)


# --- the proposals inbox -----------------------------------------------------------------------


def _propose(server: ApiServer, agent: str, n: int, text: str) -> str:
    """A pending memory proposal from ``agent`` (as the evolve worker records one)."""
    assert server.port is not None
    store = server.port.store
    proposal_id = f"prop-test-{n}"
    entry = DurableEntry(scope="operator", kind="preference", subject=f"subject {n}", text=text, owner="operator",
                         evidence=[1], observed_us=1)  # fmt: skip
    payload = ev.ProposalCreated(proposal_id=proposal_id, kind="memory", entry=entry, reason="seen twice")
    server.call(lambda: store.append(NewEvent(store.agent(agent).agent_id, payload)))
    return proposal_id


def test_the_proposals_inbox_accepts_once_and_dismisses(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    first = _propose(server, "ada", 1, "<script>alert(1)</script> prefers short answers")
    second = _propose(server, "ada", 2, "likes tables")
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    inbox = browser.get("/proposals")
    assert inbox.status_code == 200 and 'id="proposals-badge" href="/proposals"' in inbox.text
    assert re.search(r"Proposals <b>2</b>", inbox.text)
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt; prefers short answers" in inbox.text
        and "<script>alert" not in inbox.text
    )
    assert 'href="/ledger/1"' in inbox.text and inbox.text.count('data-action="accept"') == 2
    assert browser.post(f"/ui/proposals/{first}/accept", json={}).status_code == 403  # no CSRF token
    accepted = browser.post(f"/ui/proposals/{first}/accept", json={}, headers=h)
    assert accepted.status_code == 200 and accepted.json()["outcome"] == "accepted", accepted.text
    again = browser.post(f"/ui/proposals/{first}/accept", json={}, headers=h)
    assert again.status_code == 409 and "already accepted" in again.json()["error"]["message"]
    with server.client() as api:
        durable = api.get("/v1/memory/durable").json()
    assert [e["entry"]["text"] for e in durable] == ["<script>alert(1)</script> prefers short answers"]
    assert 'class="accept-edit" data-proposal="prop-test-2"' in browser.get("/proposals").text
    third = _propose(server, "ada", 3, "likes graphs")
    edited = browser.post(f"/ui/proposals/{third}/accept", json={"text": "likes bar graphs"}, headers=h)
    assert edited.status_code == 200 and edited.json()["outcome"] == "accepted"
    with server.client() as api:
        texts = {e["entry"]["text"] for e in api.get("/v1/memory/durable").json()}
    assert "likes bar graphs" in texts and "likes graphs" not in texts
    dismissed = browser.post(f"/ui/proposals/{second}/dismiss", json={"reason": "no"}, headers=h)
    assert dismissed.status_code == 200 and dismissed.json()["outcome"] == "dismissed"
    assert "No pending proposals" in browser.get("/proposals").text
    everything = browser.get("/proposals", params={"status": "all"}).text
    assert everything.count("data-proposal=") >= 2 and "accepted" in everything and "dismissed" in everything
    assert re.search(r"Proposals <b>0</b>", everything)
    assert browser.post("/ui/proposals/prop-nope/accept", json={}, headers=h).status_code == 404


# --- what the model saw ------------------------------------------------------------------------


def test_what_the_model_saw_matches_the_context_api(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    assert browser.get("/agents/ada/context").status_code == 404  # no turn yet: a page saying so
    for text in ("first <b>question</b>", "second question"):
        assert browser.post("/ui/agents/ada/messages", json={"text": text}, headers=h).status_code == 202
        server.wait_idle()
    with server.client() as api:
        expected = api.get("/v1/agents/ada/context").json()  # what holon context show --json prints
    page = browser.get("/agents/ada/context")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    item = expected[0]
    assert item["turn_id"] in page.text and f'data-used="{item["used_tokens"]}"' in page.text
    shown = dict(re.findall(r'<tr data-key="([^"]+)" data-allocated="(\d+)"', page.text))
    assert shown == {s["key"]: str(s["allocated_tokens"]) for s in item["manifest"]["sections"]}
    bar = dict(re.findall(r'data-key="([^"]+)" data-tokens="(\d+)"', page.text))
    assert bar == {s["key"]: str(s["allocated_tokens"]) for s in item["manifest"]["sections"] if s["allocated_tokens"]}
    assert " style=" not in page.text  # the bar's widths are SVG attributes, not inline styles
    assert "first &lt;b&gt;question&lt;/b&gt;" in page.text and "<b>question" not in page.text
    assert "same as the previous turn" in page.text  # the stable prefix against the first turn
    # The diff against the first turn's prompt: the stable system message, the new input added.
    round0 = page.text.split('data-round="1"')[0]
    assert 'class="diff-msg diff-same stable"' in round0 and "(the stable prefix)" in round0
    assert re.search(r'<span class="line-added">\+ [^<]*second question', round0), round0[-3000:]
    # The tools' schemas as sent: every tool of the request, its JSON as the model got it.
    with server.client() as api:
        rendered = api.get("/v1/agents/ada/context", params={"render": "true"}).json()[0]["prompt"]
    sent = [t["function"]["name"] for t in rendered["tools"]]
    assert sent and re.findall(r'<li class="tool-same" data-tool="([^"]+)"', round0) == sent
    assert "&#34;parameters&#34;" in round0 or "&quot;parameters&quot;" in round0
    turns = re.findall(r'<option value="(turn_[^"]+)"', page.text)
    assert len(turns) == 2 and turns[0] == item["turn_id"]
    older = browser.get("/agents/ada/context", params={"turn": turns[1]})
    assert older.status_code == 200 and "No earlier turn to compare with" in older.text


def test_the_prompt_diff_aligns_messages_and_diffs_lines() -> None:
    from holon.api.dashboard.prompt_diff import MAX_LINES, diff_prompts, diff_tools

    system = {"role": "system", "content": "You are ada.\nBe brief."}
    ctx_a = {"role": "system", "content": "notes:\n- one\n- two\n- three"}
    ctx_b = {"role": "system", "content": "notes:\n- one\n- 2\n- three\n- four"}
    q1, a1, q2 = ({"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                  {"role": "user", "content": "q2"})  # fmt: skip
    blocks = diff_prompts([system, ctx_b, q1, a1, q2], [system, ctx_a, q1])
    assert [(b.kind, b.index, b.before, b.stable) for b in blocks] == [
        ("same", 0, 0, True), ("changed", 1, 1, False), ("same", 2, 2, False), ("added", 3, None, False),
        ("added", 4, None, False),
    ]  # fmt: skip
    changed = blocks[1]
    assert [(x.op, x.text) for x in changed.lines] == [
        ("same", "notes:"), ("same", "- one"), ("removed", "- two"), ("added", "- 2"), ("same", "- three"),
        ("added", "- four"),
    ]  # fmt: skip
    assert (changed.added, changed.removed) == (2, 1)
    gone = diff_prompts([system], [system, q1])
    assert [(b.kind, b.before) for b in gone] == [("same", 0), ("removed", 1)] and gone[1].lines[0].text == "q1"
    assert all(b.kind == "added" and not b.stable for b in diff_prompts([q1], []))
    big = diff_prompts([{"role": "user", "content": "\n".join(map(str, range(1000)))}], [])
    assert len(big[0].lines) == MAX_LINES and big[0].hidden == 1000 - MAX_LINES
    calls = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
    assert "[tool call f] {}" in diff_prompts([calls], [])[0].lines[0].text
    t1 = {"type": "function", "function": {"name": "a", "parameters": {}}}
    t2 = {"type": "function", "function": {"name": "b", "parameters": {}}}
    t2b = {"type": "function", "function": {"name": "b", "parameters": {"x": 1}}}
    t3 = {"type": "function", "function": {"name": "c", "parameters": {}}}
    assert [(c.name, c.kind) for c in diff_tools([t1, t2b, t3], [t1, t2])] == [
        ("a", "same"),
        ("b", "changed"),
        ("c", "added"),
    ]
    assert [(c.name, c.kind) for c in diff_tools([t1], [t1, t2])] == [("a", "same"), ("b", "removed")]
    assert [c.kind for c in diff_tools([t1, t2], None)] == ["same", "same"]


def test_the_stable_prefix_and_the_bar() -> None:
    from holon.api.dashboard.context_page import bar, shared_prefix

    a = [{"role": "system", "content": "S"}, {"role": "user", "content": "hello there"}]
    b = [{"role": "system", "content": "S"}, {"role": "user", "content": "hello you"}]
    assert shared_prefix(a, b) == (1, 6) and shared_prefix(a, a) == (2, 0) and shared_prefix(a, []) == (0, 0)
    segments = bar(
        [
            {"key": "x", "allocated_tokens": 50},
            {"key": "y", "allocated_tokens": 0},
            {"key": "z", "allocated_tokens": 25},
        ],
        100,
    )
    assert [(s.key, s.x, s.width) for s in segments] == [("x", 0.0, 500.0), ("z", 500.0, 250.0)]


# --- memory ------------------------------------------------------------------------------------


def test_memory_search_reads_durable_entries_and_forget(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    assert browser.post("/ui/agents/ada/messages", json={"text": "zebras <i>stripes</i>"}, headers=h).status_code == 202
    server.wait_idle()
    with server.client() as api:
        expected = api.get("/v1/agents/ada/memory/search", params={"q": "zebras", "limit": 20}).json()
    assert expected["hits"]
    page = browser.get("/agents/ada/memory", params={"q": "zebras"})
    assert page.status_code == 200
    assert re.findall(r'<li data-ref="([^"]+)"', page.text) == [hit["source_ref"] for hit in expected["hits"]]
    assert "zebras &lt;i&gt;stripes&lt;/i&gt;" in page.text and "<i>stripes" not in page.text
    ref = expected["hits"][0]["source_ref"]
    got = browser.get("/agents/ada/memory/get", params={"ref": ref})
    assert got.status_code == 200 and 'id="memory-content"' in got.text and "zebras &lt;i&gt;" in got.text
    notebook = browser.get("/agents/ada/memory/get", params={"ref": "file:agent/self.md"})
    assert notebook.status_code == 200 and "# Self" in notebook.text
    assert browser.get("/agents/ada/memory/get", params={"ref": "file:../../etc/passwd"}).status_code == 404
    proposal = _propose(server, "ada", 7, "Prefers <b>bold</b> summaries")
    assert browser.post(f"/ui/proposals/{proposal}/accept", json={}, headers=h).status_code == 200
    page = browser.get("/agents/ada/memory").text
    entry_id = re.search(r'<li class="card status-active" data-entry="([^"]+)"', page)
    assert entry_id and "Prefers &lt;b&gt;bold&lt;/b&gt; summaries" in page and 'href="/ledger/1"' in page
    assert browser.post(f"/ui/memory/durable/{entry_id.group(1)}/forget", json={}).status_code == 403
    forgot = browser.post(f"/ui/memory/durable/{entry_id.group(1)}/forget", json={"reason": "old"}, headers=h)
    assert forgot.status_code == 200 and forgot.json()["status"] == "forgotten"
    assert 'data-status="active"' not in browser.get("/agents/ada/memory").text  # no longer recalled
    forgotten = browser.get("/agents/ada/memory", params={"status": "forgotten"}).text
    assert f'data-entry="{entry_id.group(1)}" data-status="forgotten"' in forgotten
    assert 'data-action="forget"' not in forgotten  # only an active entry can be forgotten
    assert entry_id.group(1) in browser.get("/agents/ada/memory", params={"status": "all"}).text
    # The search's filters, as the tool's: kinds and a scope.
    only_files = browser.get("/agents/ada/memory", params={"q": "zebras", "kind": "file"}).text
    assert re.findall(r'<li data-ref="([^"]+)"', only_files) == []
    with server.client() as api:
        messages = api.get(
            "/v1/agents/ada/memory/search", params={"q": "zebras", "kind": "message", "limit": 20}
        ).json()
    assert messages["hits"]
    shown = browser.get("/agents/ada/memory", params={"q": "zebras", "kind": "message", "scope": "agent"}).text
    assert re.findall(r'<li data-ref="([^"]+)"', shown) == [hit["source_ref"] for hit in messages["hits"]]
    assert 'value="message" checked' in shown and '<option value="agent" selected>' in shown
    window = {"q": "zebras", "since": "2000-01-01T00:00:00Z", "until": "2999-01-01T00:00:00Z"}
    with server.client() as api:
        in_window = api.get("/v1/agents/ada/memory/search", params={**window, "limit": 20}).json()["hits"]
    assert in_window and re.findall(
        r'<li data-ref="([^"]+)"', browser.get("/agents/ada/memory", params=window).text
    ) == [hit["source_ref"] for hit in in_window]
    for empty in ({"since": "2999-01-01"}, {"until": "2000-01-01"}, {"work_item": "wi_none"}):
        assert (
            re.findall(
                r'<li data-ref="([^"]+)"', browser.get("/agents/ada/memory", params={"q": "zebras", **empty}).text
            )
            == []
        )
    for bad in (
        {"status": "nope"},
        {"scope": "nope"},
        {"q": "zebras", "kind": "nope"},
        {"q": "zebras", "since": "soon"},
    ):
        refused = browser.get("/agents/ada/memory", params=bad)
        assert refused.status_code == 400 and 'id="memory-error"' in refused.text, bad


# --- traces ------------------------------------------------------------------------------------


def test_traces_per_day_spans_and_exports(server: ApiServer, browser: httpx.Client) -> None:
    from holon.trace.export import trace_stats
    from holon.trace.spans import TraceFilter

    _make(server, "ada")
    csrf = _login(server, browser)
    for text in ("one", "two"):
        assert (
            browser.post("/ui/agents/ada/messages", json={"text": text}, headers={CSRF_HEADER: csrf}).status_code == 202
        )
        server.wait_idle()
    assert server.port is not None
    store = server.port.store
    expected = server.call(lambda: trace_stats(store, TraceFilter()))
    page = browser.get("/traces")
    assert page.status_code == 200 and expected["turns"] == 2
    assert f"{expected['turns']} turns on " in page.text
    row = re.search(r'<tr data-agent="ada">(.*?)</tr>', page.text, re.S)
    assert row and f'<td class="num">{expected["agents"]["ada"]["turns"]}</td>' in row.group(1)
    assert 'id="chart-tokens"' in page.text and " style=" not in page.text
    # The daily charts: one bar per day of the span, today's holding the day's turns, tokens and cost.
    from holon.trace.export import DAY_US, daily_stats

    today = re.search(r'name="day" value="([0-9-]+)"', page.text)
    assert today
    turns = re.search(r'data-series="turns">(.*?)</div>\s*\n\s*(?:<h3|</section)', page.text, re.S)
    assert turns and turns.group(1).count('class="hbar"') == 7
    assert f'aria-label="{today.group(1)}: 2"' in turns.group(1)
    flt = TraceFilter(None, 0, 3 * DAY_US)
    assert [d["turns"] for d in server.call(lambda: daily_stats(store, flt))] == [0, 0, 0]
    three = browser.get("/traces", params={"span": 3})
    assert three.status_code == 200 and three.text.count('data-series="tokens"') == 1
    assert browser.get("/traces", params={"span": 40}).status_code in (400, 422)
    other_day = browser.get("/traces", params={"day": "2001-01-01"})
    assert other_day.status_code == 200 and "0 turns on 2001-01-01" in other_day.text
    assert browser.get("/traces", params={"day": "yesterday"}).status_code == 400
    halo = browser.get("/ui/traces/export", params={"format": "halo-jsonl", "agent": "ada"})
    assert halo.status_code == 200 and "attachment" in halo.headers["content-disposition"]
    spans = [json.loads(line) for line in halo.text.splitlines()]
    assert spans and any(s["name"].startswith("llm") for s in spans)
    otlp = browser.get("/ui/traces/export", params={"format": "otlp-json"})
    assert otlp.status_code == 200 and len(otlp.text.splitlines()) == 2 and "resourceSpans" in otlp.text
    turn_id = re.search(r"Turn <code>(turn_[0-9a-f]+)</code>", browser.get("/agents/ada/context").text)
    assert turn_id
    spans_page = browser.get(f"/agents/ada/turns/{turn_id.group(1)}/spans")
    assert spans_page.status_code == 200 and "AGENT" in spans_page.text and "LLM" in spans_page.text
    assert browser.get("/agents/ada/turns/turn_nope/spans").status_code == 404
    # The slowest tools link to their turn's spans through the turn's agent.
    from holon.api.dashboard.traces_page import _turn_agents

    port = server.port
    assert server.call(lambda: _turn_agents(port, [turn_id.group(1), "turn_nope"])) == {turn_id.group(1): "ada"}


def test_each_error_kind_links_to_the_spans_of_its_turns() -> None:
    """The traces page's error taxonomy: each kind's turns (``trace_stats``' ``turns``) link to their
    spans through their agent; a turn whose agent is gone shows as its id, escaped like the rest."""
    from holon.api.dashboard.render import render
    from holon.api.dashboard.traces_page import BAR_WIDTH, bars

    error = {"source": "memory_get", "error": "nothing at <x>", "count": 3, "example": "nothing at <x>",
             "turns": ["turn_a", "turn_b"]}  # fmt: skip
    stats = {"turns": 3, "agents": {}, "model_start": {"n": 0}, "slowest_tools": [], "errors": [error]}
    html = render(
        "traces.html", page="traces", csrf="c", proposals=0, stats=stats, charts={k: bars({}) for k in ("turns", "tokens", "cost")},
        day="2026-11-28", agent="", agents=[], bar_width=BAR_WIDTH, owners={"turn_a": "ada"}, daily={}, span=7,
    )  # fmt: skip
    assert '<a class="error-turn" href="/agents/ada/turns/turn_a/spans">turn_a</a>' in html
    assert "<code>turn_b</code> and more" in html and "nothing at &lt;x&gt;" in html


def test_a_curated_file_is_edited_as_memory_write_would(server: ApiServer, browser: httpx.Client) -> None:
    _make(server, "ada")
    csrf = _login(server, browser)
    h = {CSRF_HEADER: csrf}
    view = browser.get("/agents/ada/memory/get", params={"ref": "file:agent/self.md"})
    assert 'id="file-form"' in view.text and 'data-ref="file:agent/self.md"' in view.text
    body = {"ref": "file:agent/self.md", "text": "# Self\n\nLikes <em>tea</em>.\n"}
    assert browser.post("/ui/agents/ada/memory/file", json=body).status_code == 403  # no CSRF token
    r = browser.post("/ui/agents/ada/memory/file", json=body, headers=h)
    assert r.status_code == 200, r.text
    view = browser.get("/agents/ada/memory/get", params={"ref": "file:agent/self.md"})
    assert "Likes &lt;em&gt;tea&lt;/em&gt;." in view.text
    with server.client() as api:
        written = api.get("/v1/ledger/tail", params={"n": 5, "type": "memory.written"}).json()
    assert written and written[-1]["origin"] == "operator:dashboard" and written[-1]["authority"] == "operator"
    for ref in ("event:1", "file:agent/../../etc/passwd", "file:nowhere/x.md"):
        refused = browser.post("/ui/agents/ada/memory/file", json={"ref": ref, "text": "x"}, headers=h)
        assert refused.status_code == 400, (ref, refused.text)
    # An edit that takes the file past the archive limit archives it, as memory_write does.
    big = "# Self\n\n" + "\n".join(f"- {i}: caf\u00e9 " + "\u00e9" * 90 for i in range(520)) + "\n"
    assert len(big) <= 100_000 < len(big.encode())
    r = browser.post("/ui/agents/ada/memory/file", json={"ref": "file:agent/self.md", "text": big}, headers=h)
    assert r.status_code == 200, r.text
    archived = r.json()
    assert archived["archive_ref"] and archived["size"] < 100_000, archived
    assert browser.get("/agents/ada/memory/get", params={"ref": archived["archive_ref"]}).status_code == 200
    part = browser.get("/agents/ada/memory/get", params={"ref": "file:agent/self.md", "mode": "headers"})
    assert part.status_code == 200 and 'id="file-form"' not in part.text  # only a whole read is editable
    # A note (the page's new-note form writes through the same route): listed, read, edited.
    note = {"ref": "file:agent/notes/trips.md", "text": "# Trips\n\nLisbon <b>in May</b>.\n"}
    assert browser.post("/ui/agents/ada/memory/file", json=note).status_code == 403  # no CSRF token
    assert browser.post("/ui/agents/ada/memory/file", json=note, headers=h).status_code == 200
    listed = browser.get("/agents/ada/memory").text
    assert 'data-file="file:agent/notes/trips.md"' in listed and 'data-file="file:agent/self.md"' in listed
    view = browser.get("/agents/ada/memory/get", params={"ref": "file:agent/notes/trips.md"})
    assert 'id="file-form"' in view.text and "Lisbon &lt;b&gt;in May&lt;/b&gt;." in view.text
