"""Where the operator meets the embedded local model, ``holon chat`` says what it can and cannot do
and the one command that switches to a capable model (issue 15 item 5). A real ``holon chat`` in a
pseudo-terminal (pexpect) on a fresh home whose agent names no model; the daemon it starts is
stopped in teardown.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pexpect
import pytest
from helpers.turn_cli import cli_env, holon, holon_argv, quick_home

from holon.api.server import free_port
from holon.cli.chat_cmd import model_notice
from holon.config import ModelDefaults
from holon.runtime.providers.local import LOCAL_MODEL_NOTICE, local_model_available

pytestmark = pytest.mark.timeout(90)

_GAP = r"(?:\s|\x1b\[[0-9;?]*[A-Za-z])+"


def spaced(text: str) -> str:
    """``text`` as the terminal shows it: wrapped anywhere between words, escapes in between."""
    return _GAP.join(re.escape(w) for w in text.split())


def test_the_notice_is_for_the_local_model_only() -> None:
    assert model_notice({"model": "openai/gpt-4o-mini"}, ModelDefaults()) is None
    assert model_notice({}, ModelDefaults(model="openai/gpt-4o-mini")) is None
    notice = model_notice({}, ModelDefaults())
    assert notice is not None and ("holon model set" in notice or "holon agent configure" in notice)
    assert "cannot reliably call tools" in LOCAL_MODEL_NOTICE and "holon model set openai/" in LOCAL_MODEL_NOTICE


@pytest.mark.slow
def test_chat_on_the_local_model_says_what_it_cannot_do_and_how_to_switch(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "alice")  # no model named anywhere
    env = cli_env(HOLON_API_PORT=str(free_port()), PROMPT_TOOLKIT_NO_CPR="1")
    argv = holon_argv("--home", home, "chat")
    child = pexpect.spawn(argv[0], argv[1:], env=env, encoding="utf-8", timeout=60, dimensions=(40, 120))
    child.logfile_read = sys.stdout
    try:
        child.expect("starting a daemon")
        if local_model_available():
            child.expect(
                spaced("alice: The embedded local model (SmolLM2-135M) is an offline smoke test, not an agent brain")
            )
            child.expect(spaced("it cannot reliably call tools"))
            child.expect(spaced("`holon model set openai/gpt-4o-mini --api-key-env OPENAI_API_KEY`"))
            child.expect(spaced("in this chat: `/model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY`"))
        else:
            child.expect(spaced("alice: no model is configured and the local model is not installed"))
        child.expect("alice>")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
        stopped = holon(home, "daemon", "stop")
    assert stopped.code == 0, stopped
