"""``holon config show`` (issue 15 item 8): the effective configuration with each value's source,
through the real CLI; a secret pasted into the config is never printed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from helpers.turn_cli import cli_env, holon

pytestmark = pytest.mark.slow  # every test here starts a process

PASTED = "ghp_Canary0123456789abcdef"  # a token pasted where a variable's name belongs


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    (home / "holon.toml").write_text(
        '[model]\nmodel = "openai/gpt-4o-mini"\n'
        f'api_key_env = "{PASTED}"\n'
        'api_base = "https://user:pw@llm.example/v1?key=abc"\n'
        "[runtime]\nmax_rounds = 7\n",
        encoding="utf-8",
    )
    return home


def test_config_show_names_each_values_source_and_hides_secrets(tmp_path: Path) -> None:
    home = _home(tmp_path)
    env = cli_env(HOLON_API_PORT="9999", HOLON_RUNTIME_MAX_ROUNDS="9")
    r = holon(home, "config", "show", "--json", env=env)
    data = r.json()
    s = data["settings"]
    assert data["config_file"] == str(home / "holon.toml") and data["config_file_exists"] is True
    assert s["model"]["model"] == {"value": "openai/gpt-4o-mini", "source": "file", "from": str(home / "holon.toml")}
    assert s["api"]["port"] == {"value": 9999, "source": "env", "from": "HOLON_API_PORT"}
    assert s["runtime"]["max_rounds"]["value"] == 9 and s["runtime"]["max_rounds"]["source"] == "env"  # env wins
    assert s["api"]["host"] == {"value": "127.0.0.1", "source": "default", "from": "default"}
    assert s["model"]["api_key_env"]["value"] == "(hidden)"
    assert s["model"]["api_base"]["value"] == "https://***@llm.example/v1?***"
    assert s["model"]["allowed_key_envs"]["value"][0] == "OPENAI_API_KEY"

    text = holon(home, "config", "show", env=env)
    assert text.code == 0, text
    assert "port = 9999  # from HOLON_API_PORT" in text.out
    assert f'model = "openai/gpt-4o-mini"  # from {home / "holon.toml"}' in text.out
    body = "\n".join(line for line in text.out.splitlines() if not line.startswith("# holon home"))
    parsed = tomllib.loads(body)  # the human form is TOML too
    assert parsed["ledger"]["synchronous"] == "NORMAL" and parsed["api"]["port"] == 9999
    for out in (r.out, text.out, r.err, text.err):
        assert PASTED not in out and "pw@" not in out and "key=abc" not in out


def test_config_show_reports_a_bad_config_in_one_line(tmp_path: Path) -> None:
    home = _home(tmp_path)
    r = holon(home, "config", "show", env=cli_env(HOLON_API_PORT="many"))
    assert r.code != 0 and "Traceback" not in r.err and "HOLON_API_PORT" in r.err, r
