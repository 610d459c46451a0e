"""The dashboard in a real headless Chromium against a real ``holon serve`` (RFC 0009, "How it is tested").

Debian's ``chromium`` driven by its ``chromedriver`` through Selenium: the driver path is given
and ``SE_OFFLINE`` is set, so selenium-manager never looks for (or downloads) a browser. The
daemon's agents talk to a loopback ``FakeLLM`` that echoes. Screenshots of every page go to
``test-artifacts/dashboard/`` (gitignored) for a person to look at.

``--host-resolver-rules`` maps ``evil.test`` to 127.0.0.1 inside this browser: exactly what a DNS
rebinding attack achieves, without any DNS.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.served import Served, echo_script, serve_home
from helpers.turn_cli import cli_env, holon, open_store

from holon.api.server import free_port
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.ledger.events import DurableEntry
from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "dashboard"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,800", "--host-resolver-rules=MAP evil.test 127.0.0.1",
)  # fmt: skip
WAIT_S = 60

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
    # CI installs them and sets HOLON_TEST_BROWSER=1: there a missing browser fails the run, never skips.
    missing = "Debian's chromium and chromium-driver are not installed (.ci/run installs them)"
    if os.environ.get("HOLON_TEST_BROWSER") == "1":
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)

from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # Any: selenium's WebDriver
    monkeypatch.setenv("SE_OFFLINE", "true")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with FakeLLM(echo_script) as fake, serve_home(tmp_path, fake, "ada") as s:
        yield s


def shot(driver: Any, test: str, name: str) -> None:
    """The whole page (not only the window) as ``test-artifacts/dashboard/<test>/<name>.png``."""
    folder = ARTIFACTS / test
    folder.mkdir(parents=True, exist_ok=True)
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    data = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    (folder / f"{name}.png").write_bytes(base64.b64decode(data["data"]))


#: How chromedriver sometimes reports an element re-rendered between finding it and reading it,
#: instead of a ``StaleElementReferenceException`` (seen once in a full run, in the proposals badge).
_GONE_NODE = "does not belong to the document"


def wait(driver: Any, what: str, cond: Any) -> Any:
    """``cond(driver)``'s first truthy value. Parts of the page are re-rendered live, so an element
    found a moment ago may be gone (stale, or in chromedriver's other words ``_GONE_NODE``): that
    attempt just counts as not yet. Any other driver error fails the wait at once."""

    def attempt(d: Any) -> Any:
        try:
            return cond(d)
        except WebDriverException as e:
            if _GONE_NODE in str(e.msg):
                return False
            raise

    try:
        waiting = WebDriverWait(
            driver, WAIT_S, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
        )
        return waiting.until(attempt)
    except TimeoutException as e:
        raise AssertionError(f"timed out waiting for {what}; page: {driver.page_source[:3000]}") from e


def login(driver: Any, s: Served) -> None:
    """``holon dashboard --url`` gives a one-time URL; opening it logs the browser in."""
    r = holon(s.home, "dashboard", "--url")
    assert r.code == 0, r
    url = r.out.strip()
    assert url.startswith(f"{s.url}/login?code="), url
    driver.get(url)
    wait(driver, "the agents page", lambda d: d.find_elements(By.ID, "agent-rows"))


def login_by_opening(driver: Any, s: Served, tmp_path: Path) -> None:
    """``holon dashboard`` opens the one-time URL with ``webbrowser``: here ``$BROWSER`` is a script
    that writes it down, and the test's Chromium opens what it wrote."""
    opened = tmp_path / "opened.txt"
    command = tmp_path / "browser.sh"
    command.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    command.chmod(0o755)
    r = holon(s.home, "dashboard", env=cli_env(BROWSER=str(command)))
    assert r.code == 0 and "opened the dashboard" in r.out, r
    url = opened.read_text()
    assert url.startswith(f"{s.url}/login?code=") and url in r.out, url
    driver.get(url)
    wait(driver, "the agents page", lambda d: d.find_elements(By.ID, "agent-rows"))
    driver.get(url)  # a code opens one session, once
    wait(driver, "the spent code's answer", lambda d: "used or has expired" in d.page_source)


def entries(driver: Any, kind: str) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, f"#conversation .entry.{kind} .text")]


def send(driver: Any, text: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, "#message-form textarea")
    box.send_keys(text)
    driver.find_element(By.CSS_SELECTOR, "#message-form button[type=submit]").click()


def test_agents_page_live_view_and_inert_script(served: Served, browser: Any) -> None:
    test = "live"
    browser.get(served.url + "/")
    wait(browser, "the login page", lambda d: d.find_elements(By.ID, "login-form"))
    shot(browser, test, "0-login")
    login(browser, served)
    wait(browser, "ada's row", lambda d: row_state(d, "ada") == "idle")
    assert "openai/fake" in browser.find_element(By.CSS_SELECTOR, 'tr[data-agent="ada"]').text
    shot(browser, test, "1-agents")

    click(browser, 'tr[data-agent="ada"] a')
    wait(browser, "the live view", lambda d: d.find_elements(By.ID, "conversation"))
    assert browser.current_url == served.url + "/agents/ada"
    send(browser, "hello dashboard")
    wait(browser, "the operator's message", lambda d: "hello dashboard" in entries(d, "in"))
    wait(browser, "the streamed reply", lambda d: "echo: hello dashboard" in entries(d, "out"))
    shot(browser, test, "2-agent-live")

    evil = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
    send(browser, evil)
    wait(browser, "the script message as text", lambda d: evil in entries(d, "in"))
    wait(browser, "its echo", lambda d: any(evil[:40] in t for t in entries(d, "out")))
    assert browser.execute_script("return window.__pwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "#conversation script, #conversation img")

    # What the model saw, from the turn's link: the budget's numbers are `holon context show --json`'s.
    links = browser.find_elements(By.CSS_SELECTOR, "#conversation .entry.turn a")
    turn_id = links[-1].get_attribute("href").rsplit("turn=", 1)[1]
    links[-1].click()
    wait(browser, "what the model saw", lambda d: d.find_elements(By.CSS_SELECTOR, "table.sections"))
    r = holon(served.home, "context", "show", "ada", "--turn", turn_id, "--json")
    assert r.code == 0, r
    shown = json.loads(r.out)
    item = shown[0] if isinstance(shown, list) else shown
    rows = browser.find_elements(By.CSS_SELECTOR, "section.round[data-round='0'] table.sections tbody tr")
    on_page = {row.get_attribute("data-key"): int(row.get_attribute("data-allocated")) for row in rows}
    assert on_page == {s["key"]: s["allocated_tokens"] for s in item["manifest"]["sections"]}
    used = browser.find_element(By.CSS_SELECTOR, "section.round[data-round='0'] .used").get_attribute("data-used")
    assert int(used) == item["used_tokens"]
    segments = browser.find_elements(By.CSS_SELECTOR, "section.round[data-round='0'] svg.budget-bar rect.seg")
    assert sum(int(seg.get_attribute("data-tokens")) for seg in segments) == sum(on_page.values())
    # Its diff against the turn before: the stable prefix marked, the new input an added line (as text).
    diff = "section.round[data-round='0'] ol.diff"
    assert browser.find_elements(By.CSS_SELECTOR, f"{diff} li.diff-same.stable")
    added = [e.text for e in browser.find_elements(By.CSS_SELECTOR, f"{diff} .line-added")]
    assert any(evil[:40] in t for t in added), added
    assert browser.execute_script("return window.__pwned === undefined")
    tools = browser.find_elements(By.CSS_SELECTOR, "section.round[data-round='0'] ul.tools-sent li[data-tool]")
    assert tools and {t.get_attribute("data-tool") for t in tools} >= {"memory_search"}
    shot(browser, test, "2b-what-the-model-saw")
    click(browser, "section.round[data-round='0'] a.spans-link")
    wait(browser, "the turn's spans", lambda d: d.find_elements(By.CSS_SELECTOR, "#spans li.kind-AGENT"))
    shot(browser, test, "2c-spans")
    browser.get(served.url + "/traces")
    wait(browser, "the day's traces", lambda d: d.find_elements(By.CSS_SELECTOR, '#trace-agents tr[data-agent="ada"]'))
    shot(browser, test, "2d-traces")
    browser.get(served.url + "/agents/ada")
    wait(browser, "the history", lambda d: "echo: hello dashboard" in entries(d, "out"))

    # A timer added from the page appears in its timers list.
    type_into(browser, "#timer-form input[name=schedule]", "every 1h")
    click(browser, "#timer-form button[type=submit]")
    wait(browser, "the new timer", lambda d: d.find_elements(By.CSS_SELECTOR, "#timers li[data-timer]"))
    shot(browser, test, "3-agent-timer")

    # The ledger: the message's event is there as text, the chain verifies, one event opens in full.
    browser.get(served.url + "/ledger?type=message.received")
    wait(browser, "the ledger page", lambda d: d.find_elements(By.ID, "ledger-rows"))
    assert evil in browser.find_element(By.ID, "ledger-rows").text
    click(browser, 'button[data-action="verify"]')
    wait(browser, "verify's answer", lambda d: "intact" in d.find_element(By.ID, "verify-result").text)
    shot(browser, test, "3b-ledger")
    click(browser, "#ledger-rows tbody tr a")
    wait(browser, "one event", lambda d: d.find_elements(By.ID, "event-json"))
    assert "message.received" in browser.find_element(By.ID, "event-json").text
    shot(browser, test, "3c-event")
    browser.get(served.url + "/agents/ada")

    # Memory: search as the agent's tool would (the index follows the ledger: searched again until
    # it has the message), then one hit read in full with MemoryGet.
    def found(d: Any) -> bool:
        d.get(served.url + "/agents/ada/memory")
        type_into(d, "#memory-search input[name=q]", "dashboard")
        click(d, "#memory-search button[type=submit]")
        wait(d, "the search's answer", lambda d2: "q=dashboard" in d2.current_url)
        return any("hello dashboard" in h.text for h in d.find_elements(By.CSS_SELECTOR, "#memory-hits li"))

    wait(browser, "a search hit", found)
    shot(browser, test, "3d-memory-search")
    click(browser, "#memory-hits li a")
    wait(browser, "the MemoryGet view", lambda d: "dashboard" in d.find_element(By.ID, "memory-content").text)
    shot(browser, test, "3e-memory-get")
    # A new note from the memory page: written as memory_write would, then shown for editing.
    browser.get(served.url + "/agents/ada/memory")
    type_into(browser, "#note-form input[name=name]", "trips")
    type_into(browser, "#note-form textarea[name=text]", "# Trips\nLisbon in May <b>x</b>")
    click(browser, "#note-form button[type=submit]")
    wait(browser, "the note", lambda d: "Lisbon in May <b>x</b>" in d.find_element(By.ID, "memory-content").text)
    assert browser.find_elements(By.ID, "file-form")
    browser.get(served.url + "/agents/ada/memory")
    assert browser.find_elements(By.CSS_SELECTOR, 'li[data-file="file:agent/notes/trips.md"]')
    shot(browser, test, "3f-memory-files")
    browser.get(served.url + "/agents/ada")

    # A reload keeps the conversation (read back from the ledger) and the session.
    wait(browser, "the history", lambda d: "echo: hello dashboard" in entries(d, "out"))
    browser.set_window_size(390, 844)  # a phone: every page again
    shot(browser, test, "4-agent-phone")
    phone_pages = {
        "5-agents-phone": "/", "5b-context-phone": f"/agents/ada/context?turn={turn_id}",
        "5c-spans-phone": f"/agents/ada/turns/{turn_id}/spans", "5d-memory-phone": "/agents/ada/memory?q=dashboard",
        "5e-proposals-phone": "/proposals", "5f-traces-phone": "/traces", "5g-ledger-phone": "/ledger",
        "5h-event-phone": "/ledger/1",
    }  # fmt: skip
    for name, path in phone_pages.items():
        browser.get(served.url + path)
        wait(browser, path, lambda d: d.find_elements(By.TAG_NAME, "main"))
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390 + 1, path
        shot(browser, test, name)


def type_into(driver: Any, css: str, text: str) -> None:
    """Type into the field ``css`` finds (focused first: a live refresh never replaces a panel
    the operator is typing in), again if a refresh replaced it before it had the focus."""

    def attempt(d: Any) -> bool:
        found = d.find_elements(By.CSS_SELECTOR, css)
        if found:
            found[0].click()
            found[0].send_keys(text)
        return bool(found)

    wait(driver, f"typing into {css}", attempt)


def click(driver: Any, css: str) -> None:
    """Click the element ``css`` finds, again if a live refresh replaced it in between."""

    def attempt(d: Any) -> bool:
        found = d.find_elements(By.CSS_SELECTOR, css)
        if found:
            found[0].click()
        return bool(found)

    wait(driver, f"a click on {css}", attempt)


def row_state(driver: Any, name: str) -> str:
    rows = driver.find_elements(By.CSS_SELECTOR, f'tr[data-agent="{name}"] .state')
    return rows[0].text if rows else ""


def test_create_pause_resume_and_delete_from_the_agents_page(served: Served, browser: Any) -> None:
    test = "manage"
    login(browser, served)
    form = browser.find_element(By.ID, "create-agent")
    form.find_element(By.NAME, "name").send_keys("bob")
    form.find_element(By.NAME, "schedule").send_keys("every 2h")
    form.find_element(By.NAME, "prompt").send_keys("Look at the weather")
    shot(browser, test, "1-create-form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, "bob's page", lambda d: d.current_url == served.url + "/agents/bob")
    wait(browser, "bob's timer", lambda d: "every 7200s" in d.find_element(By.ID, "timers").text)
    shot(browser, test, "2-created")

    browser.get(served.url + "/")
    wait(browser, "bob's row", lambda d: row_state(d, "bob"))
    # Only the rows of agents whose events arrive are re-rendered: ada's row stays the same node.
    browser.execute_script("document.querySelector('tr[data-agent=\"ada\"]').holonMark = 1")
    ada_untouched = "return document.querySelector('tr[data-agent=\"ada\"]').holonMark === 1"
    click(browser, 'button[data-action="pause"][data-agent="bob"]')
    wait(browser, "bob paused", lambda d: row_state(d, "bob") == "paused")
    shot(browser, test, "3-paused")
    click(browser, 'button[data-action="resume"][data-agent="bob"]')
    wait(browser, "bob resumed", lambda d: row_state(d, "bob") not in ("", "paused"))
    with served.client() as api:  # an input to bob: its events arrive over the page's stream
        assert api.post("/v1/agents/bob/messages", json={"text": "hi bob"}).is_success
    bob_today = 'tr[data-agent="bob"] td[data-label="Today"]'
    wait(
        browser, "bob's turn on its row", lambda d: d.find_element(By.CSS_SELECTOR, bob_today).text.endswith(" 1 turns")
    )
    assert browser.execute_script(ada_untouched)

    click(browser, 'button[data-action="delete"][data-agent="bob"]')
    browser.switch_to.alert.accept()  # "Delete agent bob ...?"
    wait(browser, "bob gone", lambda d: not d.find_elements(By.CSS_SELECTOR, 'tr[data-agent="bob"]'))
    assert browser.execute_script(ada_untouched)
    assert browser.find_element(By.ID, "agent-count").text == "1 agent"  # was "2 agents" when loaded
    browser.get(served.url + "/agents/bob")
    wait(browser, "the missing page", lambda d: d.find_elements(By.ID, "missing"))
    shot(browser, test, "4-deleted")
    with served.client() as api:
        assert [a["name"] for a in api.get("/v1/agents").json()] == ["ada"]


def test_accept_a_proposal_and_see_it_durable(served: Served, browser: Any) -> None:
    """The issue's check: accept a proposal in the inbox, then ``holon memory inspect`` shows it durable."""
    test = "proposals"
    with open_store(served.home) as store:  # as the evolve worker records one (another process: the ledger)
        entry = DurableEntry(scope="operator", kind="preference", subject="answers", text="Prefers short answers.",
                             owner="operator", evidence=[1], observed_us=1)  # fmt: skip
        payload = ev.ProposalCreated(proposal_id="prop-browser", kind="memory", entry=entry, reason="said so twice")
        store.append(NewEvent(store.agent("ada").agent_id, payload))
        other = entry.model_copy(update={"subject": "charts", "text": "Likes charts."})
        payload = ev.ProposalCreated(proposal_id="prop-edit", kind="memory", entry=other, reason="asked for one")
        store.append(NewEvent(store.agent("ada").agent_id, payload))
    login(browser, served)

    def listed(d: Any) -> bool:
        d.get(served.url + "/proposals")
        return bool(d.find_elements(By.CSS_SELECTOR, 'li[data-proposal="prop-browser"]'))

    wait(browser, "the proposal in the inbox", listed)
    assert browser.find_element(By.CSS_SELECTOR, "#proposals-badge b").text == "2"
    shot(browser, test, "1-inbox")
    click(browser, 'li[data-proposal="prop-edit"] details summary')
    box = browser.find_element(By.CSS_SELECTOR, 'form.accept-edit[data-proposal="prop-edit"] textarea')
    box.clear()
    box.send_keys("Likes bar charts.")
    click(browser, 'form.accept-edit[data-proposal="prop-edit"] button[type=submit]')
    wait(browser, "one left", lambda d: d.find_element(By.CSS_SELECTOR, "#proposals-badge b").text == "1")
    click(browser, 'button[data-action="accept"][data-proposal="prop-browser"]')
    wait(browser, "the empty inbox", lambda d: "No pending proposals" in d.find_element(By.ID, "proposals").text)
    assert browser.find_element(By.CSS_SELECTOR, "#proposals-badge b").text == "0"
    shot(browser, test, "2-accepted")
    r = holon(served.home, "memory", "inspect", "--json")
    assert r.code == 0, r
    assert "Prefers short answers." in r.out and "Likes bar charts." in r.out and "Likes charts." not in r.out


@contextlib.contextmanager
def foreign_site(html: str) -> Iterator[str]:
    """Another origin on this machine serving one page (the attacker's)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_cross_site_requests_and_foreign_hosts_are_refused(served: Served, browser: Any, tmp_path: Path) -> None:
    test = "refused"
    login_by_opening(browser, served, tmp_path)  # the browser holds a session cookie: the attacks ride on it
    form = (
        f'<form method="post" action="{served.url}/ui/agents/ada/pause">'
        '<input name="x" value="1"><button id="go" type="submit">go</button></form>'
    )
    with foreign_site(form) as attacker:
        browser.get(attacker)
        browser.find_element(By.ID, "go").click()
        wait(browser, "the refusal", lambda d: "forbidden" in d.page_source or "unsupported" in d.page_source)
        shot(browser, test, "1-cross-site-form")
        browser.get(attacker)
        outcome = browser.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch(arguments[0], {method: "POST", credentials: "include",
                                 headers: {"Content-Type": "application/json"}, body: "{}"})
              .then((r) => done("status " + r.status), (e) => done("blocked " + e.name));
            """,
            f"{served.url}/ui/agents/ada/pause",
        )
        assert outcome.startswith("blocked"), outcome  # the CORS preflight is never answered
    with served.client() as api:
        assert api.get("/v1/agents/ada").json()["status"]["state"] == "idle"

    # DNS rebinding: evil.test resolves to 127.0.0.1, the daemon sees Host: evil.test.
    port = served.url.rsplit(":", 1)[1]
    for path in ("/", "/v1/agents"):
        browser.get(f"http://evil.test:{port}{path}")
        wait(browser, "the Host refusal", lambda d: "DNS rebinding" in d.page_source)
    shot(browser, test, "2-foreign-host")
