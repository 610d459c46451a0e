"""``holon chat`` in a real pseudo-terminal (pexpect) against a real daemon and a ``FakeLLM``.

On a home with no daemon running, ``holon chat`` starts one in the background; the test types a
message and sees the reply streamed (several writes), sees a tool call and its result drawn
live, aborts a slow reply with Ctrl-C, runs slash
commands, and quits with ``/quit`` (exit 0). The daemon is stopped in teardown.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from helpers.daemon import chat_home, state
from helpers.turn_cli import cli_env, holon_argv

from holon.api.server import free_port

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

PROMPT = "alice>"
_ESC = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"


def words(text: str) -> str:
    """A pattern for ``text`` written in pieces: terminal escapes may sit between its words."""
    return (r"\s" + _ESC).join(re.escape(w) for w in text.split())


def _step(body: dict[str, Any]) -> dict[str, Any]:
    message = body["messages"][-1]
    last = str(message.get("content", ""))
    if message.get("role") == "tool":
        return {"content": ["The command ", "ran."], "chunk_delay": 0.05}
    if "use a tool" in last:
        return {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo tool-output-42"}}]}
    if "slowly" in last:
        return {"content": ["Thinking ", "very ", "slowly ", "..."], "chunk_delay": 2.0}
    return {"content": ["Hello ", "from ", "the fake ", "model."], "chunk_delay": 0.05}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    with chat_home(tmp_path, _step) as home:
        yield home


def test_chat_in_a_pty(home: Path) -> None:
    env = cli_env(HOLON_API_PORT=str(free_port()), PROMPT_TOOLKIT_NO_CPR="1")
    argv = holon_argv("--home", home, "chat")
    child = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=120, dimensions=(40, 120))
    child.logfile_read = sys.stdout  # shown by pytest when the test fails
    try:
        child.expect("starting a daemon")
        child.expect(PROMPT)
        assert state(home).get("state") == "running"

        child.sendline("Hello there")
        # The reply arrives as the model generates it: one write per delta, not one at the end.
        child.expect(words("Hello from the fake model."))
        child.expect(PROMPT)

        # A tool call and its result appear live, one compact line each, before the final reply.
        child.sendline("Please use a tool")
        child.expect("⚙ " + _ESC + "run_command")
        child.expect("echo tool-output-42")
        child.expect(r"✓ ok \d+ ms: ")
        child.expect("exit code: 0 tool-output-42")
        child.expect(words("The command ran."))
        child.expect(PROMPT)

        child.sendline("Please answer slowly")
        child.expect("Thinking")
        child.sendcontrol("c")  # Ctrl-C during a reply aborts the turn
        child.expect("aborting")
        child.expect(r"turn failed: aborted by the operator")
        child.expect(PROMPT)

        child.sendline("/agents")
        child.expect(r"alice\s+│\s+aborted\s+│\s+openai/fake\s+│\s+3\s")
        child.expect(PROMPT)
        child.sendline("/state")
        child.expect('"last_outcome"')
        child.expect(PROMPT)
        child.sendline("/search hello")
        child.expect(r"\d+ of \d+ hits for 'hello'")
        child.expect(PROMPT)
        child.sendline("/help")
        child.expect("/transcript")
        child.expect("Ctrl-D quits")
        child.expect(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
