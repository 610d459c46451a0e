"""The operator REPL end to end, against a real daemon process: briefs from background agents
appear while the operator sits at the prompt, and the event stream survives the daemon dying.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from helpers.daemon import fake_home, state, submit
from helpers.turn_cli import cli_env, holon, holon_argv, open_store, wait_for

from holon.api.server import free_port
from holon.api.token import read_token
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.repl.client import ApiClient
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    with FakeLLM(lambda body: {"content": "Hello from the fake model."}) as fake:
        home = fake_home(tmp_path, fake, "alice")
        try:
            yield home
        finally:
            holon(home, "daemon", "stop")


def test_a_background_brief_appears_while_the_operator_waits_at_the_prompt(home: Path) -> None:
    with open_store(home) as store:
        nightly = create_agent(store, "nightly", settings={"background": True})
    env = cli_env(HOLON_API_PORT=str(free_port()), PROMPT_TOOLKIT_NO_CPR="1")
    argv = holon_argv("--home", home, "chat", "alice")
    child = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=120, dimensions=(40, 160))
    child.logfile_read = sys.stdout
    try:
        child.expect("alice>")
        with open_store(home) as store:  # another process, as a background turn would
            store.append(
                NewEvent(
                    nightly.agent_id,
                    ev.BriefDelivered(kind="result", text="The nightly report is ready."),
                    origin="agent:nightly",
                    authority="agent",
                )
            )
        # Nothing typed: the brief shows up above the prompt.
        child.expect(r"nightly \[result\]: ")
        child.expect(r"The nightly report is ready\.")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_the_event_stream_resumes_after_the_daemon_is_killed_and_restarted(home: Path) -> None:
    port = free_port()
    env = cli_env(HOLON_API_PORT=str(port))  # the test's environment (PYTHONPATH: this checkout)
    assert holon(home, "daemon", "start", env=env).code == 0
    client = ApiClient(f"http://127.0.0.1:{port}", token=read_token(home))
    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def follow() -> None:
        try:
            for kind, item in client.stream_events("alice", after=0, retries=40):
                if kind == "event":
                    seen.append(item.seq)
                if stop.is_set() and len(seen) >= target[0]:
                    return
        except BaseException as e:  # reported to the test
            errors.append(e)

    target = [0]
    with httpx_client(port, home) as http:
        assert http.post("/v1/agents/alice/pause").status_code == 200  # inputs queue; a known set of events
    submit(home, "alice", "one", "two")
    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    wait_for("the first events", lambda: len(seen) >= 3, timeout=30)

    os.kill(state(home)["pid"], signal.SIGKILL)  # the daemon dies mid-stream
    submit(home, "alice", "three", "four")  # appended while nobody serves the stream
    assert holon(home, "daemon", "start", env=env).code == 0
    submit(home, "alice", "five")
    with open_store(home) as store:
        expected = [e.seq for e in store.ledger.read(0, agent_id=store.agent("alice").agent_id)]
    target[0] = len(expected)
    stop.set()
    wait_for("the stream to catch up", lambda: len(seen) >= len(expected) or errors, timeout=60)
    reader.join(10)
    assert not errors, errors
    assert seen == expected, "every event exactly once, in order"


def httpx_client(port: int, home: Path) -> Any:
    import httpx

    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {read_token(home)}"})
