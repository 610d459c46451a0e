"""Models made easy (issue 15 items 5 and 6), through the real CLI in subprocesses.

``holon secrets set|list|unset`` (a 0600 file, values from stdin only, names only in output),
``holon model set|list`` and ``holon agent configure assistant`` before ``holon chat`` created
the agent, and ``holon model test`` (one real call through litellm to a loopback fake: latency,
whether the model calls the tool it is asked to call, and clear errors for a refused connection
and an unset key).
"""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.turn_cli import REPO, Result, cli_env, holon, holon_argv

from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

SECRET = "sk-test-7f3a9c21e4b8d05566aa"


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in cli_env().items() if k not in names}


def holon_in(home: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None) -> Result:
    """``holon`` with ``stdin`` piped in (how a value reaches ``secrets set`` in a script)."""
    proc = subprocess.run(
        holon_argv("--home", home, *args),
        input=stdin, capture_output=True, text=True, env=env or cli_env(), cwd=REPO, timeout=170, check=False,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_secrets_are_private_listed_by_name_and_never_taken_from_the_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = holon_in(home, "secrets", "set", "OPENAI_API_KEY", stdin=SECRET + "\n")
    assert r.code == 0 and "stored OPENAI_API_KEY" in r.out, r
    assert SECRET not in r.out + r.err
    path = home / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["secrets"] == {"OPENAI_API_KEY": SECRET}

    listed = holon_in(home, "secrets", "list", "--json")
    assert listed.code == 0 and json.loads(listed.out)["names"] == ["OPENAI_API_KEY"], listed
    assert SECRET not in listed.out
    assert holon_in(home, "secrets", "list").out.strip() == "OPENAI_API_KEY"

    # A value on the command line is refused without being echoed; nothing is stored.
    other = "sk-typed-on-the-command-line-123"
    r = holon_in(home, "secrets", "set", "GROQ_API_KEY", other)
    assert r.code == 2 and "hidden prompt or stdin" in r.err and other not in r.out + r.err, r
    # Only variables agents may name; no empty value.
    r = holon_in(home, "secrets", "set", "PGPASSWORD", stdin="hunter2\n")
    assert r.code == 2 and "allowed_key_envs" in r.err and "hunter2" not in r.err, r
    r = holon_in(home, "secrets", "set", "GROQ_API_KEY", stdin="\n")
    assert r.code == 2 and "no value" in r.err, r
    assert json.loads(holon_in(home, "secrets", "list", "--json").out)["names"] == ["OPENAI_API_KEY"]

    r = holon_in(home, "secrets", "set", "OPENAI_API_KEY", stdin="sk-replaced-value-0001\n")
    assert r.code == 0 and "replaced OPENAI_API_KEY" in r.out, r
    assert holon_in(home, "secrets", "unset", "OPENAI_API_KEY").out.strip() == "removed OPENAI_API_KEY"
    assert holon_in(home, "secrets", "unset", "OPENAI_API_KEY").out.strip() == "OPENAI_API_KEY was not stored"
    assert "no secrets stored" in holon_in(home, "secrets", "list").out


def test_model_set_before_chat_creates_assistant_and_model_list_shows_where_its_key_is(tmp_path: Path) -> None:
    home = tmp_path / "home"  # not even initialised: `model set` is the first command
    env = env_without("OPENAI_API_KEY")
    r = holon(home, "model", "set", "openai/gpt-4o-mini", "--api-key-env", "OPENAI_API_KEY", env=env)
    assert r.code == 0 and "created assistant: openai/gpt-4o-mini" in r.out, r
    assert "run `holon secrets set OPENAI_API_KEY`" in r.out, r  # the key is nowhere yet

    def listed() -> dict[str, dict[str, object]]:
        out = holon(home, "model", "list", "--json", env=env)
        assert out.code == 0, out
        return {a["agent"]: a for a in json.loads(out.out)["agents"]}

    assert listed()["assistant"] == {
        "agent": "assistant", "model": "openai/gpt-4o-mini", "source": "agent", "api_base": None,
        "api_key_env": "OPENAI_API_KEY", "key": "missing",
    }  # fmt: skip
    assert holon_in(home, "secrets", "set", "OPENAI_API_KEY", stdin=SECRET, env=env).code == 0
    assert listed()["assistant"]["key"] == "holon secrets"
    text = holon(home, "model", "list", env=env).out
    assert "assistant  openai/gpt-4o-mini  (agent)  key OPENAI_API_KEY (holon secrets)" in text, text
    assert "ollama_chat/llama3.2 --api-base http://127.0.0.1:11434" in text and SECRET not in text

    # `set` again: the three model settings together (the API base left out falls back).
    r = holon(home, "model", "set", "ollama_chat/llama3.2", "--api-base", "http://127.0.0.1:11434", env=env)
    assert r.code == 0 and "set assistant: ollama_chat/llama3.2  at http://127.0.0.1:11434" in r.out, r
    assert listed()["assistant"]["api_key_env"] is None
    # Same validation as `agent configure`: a variable off the allow-list is refused.
    r = holon(home, "model", "set", "openai/x", "--api-key-env", "PGPASSWORD", env=env)
    assert r.code == 2 and "allowed_key_envs" in r.err, r
    r = holon(home, "model", "set", "openai/x", "--agent", "nobody", env=env)
    assert r.code == 3 and "holon agent create nobody" in r.err, r


def test_agent_configure_assistant_before_chat_creates_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    r = holon(home, "agent", "configure", "assistant", "--model", "openai/gpt-4o-mini", "--max-rounds", "20")
    assert r.code == 0 and r.out.startswith("created assistant (agt_"), r
    shown = holon(home, "agent", "show", "assistant", "--json").json()["agent"]
    assert shown["settings"] == {"model": "openai/gpt-4o-mini", "max_rounds": 20}, shown
    r = holon(home, "agent", "configure", "assistant", "--max-rounds", "5")
    assert r.code == 0 and r.out.startswith("configured assistant:"), r
    r = holon(home, "agent", "configure", "bob", "--max-rounds", "5")
    assert r.code == 3 and "no agent named 'bob'" in r.err, r


@pytest.mark.slow
def test_model_test_reports_latency_and_whether_tool_calls_work(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    script = [{"tool_calls": [{"name": "ping", "arguments": {"text": "hello"}}]}, {"content": "I would rather chat."}]
    with FakeLLM(script) as fake:
        good = holon(home, "model", "test", "--model", "openai/fake", "--api-base", fake.url, "--json")
        data = good.json()
        assert data["tool_calls"] is True and data["tool_called"] == "ping" and data["latency_ms"] > 0, data
        text = holon(home, "model", "test", "--model", "openai/fake", "--api-base", fake.url)
        assert text.code == 0 and "tool calls: NO" in text.out and "answered:   in " in text.out, text
        [request, _] = fake.requests
    assert [t["function"]["name"] for t in request["tools"]] == ["ping"], request  # one tool, one call each

    refused = holon(home, "model", "test", "--model", "openai/fake", "--api-base", "http://127.0.0.1:9/v1")
    assert refused.code == 6 and "connection failed" in refused.err and "nothing answered at" in refused.err, refused
    assert "Traceback" not in refused.err

    env = env_without("GROQ_API_KEY")
    unset = holon(home, "model", "test", "--model", "groq/llama-3.3-70b", "--api-key-env", "GROQ_API_KEY", env=env)
    assert unset.code == 6, unset
    assert "GROQ_API_KEY is not set in this command's environment (pid " in unset.err, unset
    assert "nor in holon secrets: run `holon secrets set GROQ_API_KEY`" in unset.err, unset
