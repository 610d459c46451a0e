"""Agent settings over the CLI (issue 14, finding 5): the same checks as the HTTP API, exit 2 with one line.

The documented commands work out of the box; every bad value is exit 2 naming the option's setting
and never echoing the value; arbitrary option values (hypothesis, through ``holon.cli.main.main``
in-process: the console script's own entry point) never give a traceback.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from helpers.props import examples
from helpers.turn_cli import cli_env, db_rows, holon, quick_home
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from holon.cli.main import main

SECRET = "sk-canary-0a1b2c3d4e5f60718293"


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
def test_the_readme_command_works_out_of_the_box(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert holon(home, "init").code == 0
    assert holon(home, "agent", "create", "assistant").code == 0
    r = holon(home, "agent", "configure", "assistant", "--model", "openai/gpt-4o-mini", "--api-key-env",
              "OPENAI_API_KEY", "--json")  # fmt: skip
    assert r.code == 0, r
    assert json.loads(r.out)["settings"] == {"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}
    r = holon(home, "agent", "create", "other", "--model", "anthropic/claude-sonnet-4", "--api-key-env",
              "ANTHROPIC_API_KEY")  # fmt: skip
    assert r.code == 0, r


BAD = [
    (["--api-key-env", SECRET], "api_key_env"),
    (["--api-key-env", "PGPASSWORD"], "api_key_env"),
    (["--api-key-env", "DATABASE_URL"], "api_key_env"),
    (["--api-key-env", "OPENAI_API_KEY", "--api-base", f"https://{SECRET}.example/v1"], "api_base"),
    (["--api-base", f"https://user:{SECRET}@127.0.0.1/v1"], "api_base"),
    (["--api-base", "ftp://127.0.0.1/"], "api_base"),
    (["--model", f"huggingface/https://{SECRET}/x"], "model"),
    (["--model", f"{SECRET} with spaces"], "model"),
    (["--max-cost-per-turn-usd", "inf"], "max_cost_per_turn_usd"),
    (["--budget-cost-per-day-usd", "inf"], "budget_cost_per_day_usd"),
    (["--unset", "api_key"], "api_key"),
    (["--unset", "diagnostic"], "diagnostic"),
]


@pytest.mark.slow
def test_bad_values_are_exit_2_with_one_line_naming_the_setting(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "bob")
    before = db_rows(home, "SELECT count(*) FROM events")
    for args, field in BAD:
        r = holon(home, "agent", "configure", "bob", *args)
        assert r.code == 2, (args, r)
        line = _one_error_line(r.err)
        assert f"'{field}'" in line and SECRET not in line, (args, line)
    for args, field in [
        (a, f) for a, f in BAD if a[0] in ("--api-key-env", "--api-base", "--model", "--budget-cost-per-day-usd")
    ]:
        r = holon(home, "agent", "create", "bad", *args)
        assert r.code == 2 and f"'{field}'" in _one_error_line(r.err) and SECRET not in r.err, (args, r)
    assert db_rows(home, "SELECT count(*) FROM events") == before  # nothing recorded
    assert not (home / "agents" / "bad").exists()
    for log in (home / "logs").glob("*"):
        assert SECRET not in log.read_text(errors="replace"), log


@pytest.mark.slow
def test_an_allowed_variable_from_the_environment_config(tmp_path: Path) -> None:
    home = quick_home(tmp_path, "bob")
    env = cli_env(HOLON_MODEL_ALLOWED_KEY_ENVS='["MY_KEY"]', HOLON_MODEL_ALLOWED_API_BASES='["llm.example.com"]')
    r = holon(home, "agent", "configure", "bob", "--api-key-env", "MY_KEY", "--api-base", "https://llm.example.com/v1",
              env=env)  # fmt: skip
    assert r.code == 0, r
    r = holon(home, "agent", "show", "bob")  # without the allow-list: shown, and not used
    assert r.code == 0 and "problem:" in r.out and "allowed_key_envs" in r.out, r


# --- hostile option values, in-process ------------------------------------------------------------

MARK = "qzx"
_OPTIONS = {
    "--model": "text",
    "--api-base": "text",
    "--api-key-env": "text",
    "--temperature": "number",
    "--max-output-tokens": "number",
    "--context-window": "number",
    "--max-rounds": "number",
    "--max-tokens-per-turn": "number",
    "--max-cost-per-turn-usd": "number",
    "--budget-turns-per-day": "number",
    "--budget-tokens-per-day": "number",
    "--budget-cost-per-day-usd": "number",
    "--unset": "text",
}
_number = st.sampled_from(
    ["inf", "-inf", "nan", "1e999", "-1", "0", "0.5", "201", "1e3", "many", "true"]
) | st.integers(-(10**15), 10**15).map(str)
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30).map(
    lambda t: MARK + t
)
_option = st.sampled_from(sorted(_OPTIONS)).flatmap(
    lambda o: st.tuples(
        st.just(o),
        _number
        if _OPTIONS[o] == "number"
        else (_text | st.sampled_from(["OPENAI_API_KEY", "http://127.0.0.1:1/v1", "openai/x"])),
    )
)
_counter = itertools.count()


@pytest.fixture(scope="module")
def cli_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return quick_home(tmp_path_factory.mktemp("cli"), "bob")


@pytest.mark.slow
@hsettings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=st.lists(_option, min_size=1, max_size=3))
def test_arbitrary_option_values_never_give_a_traceback(
    cli_home: Path, options: list[tuple[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    args = [a for pair in options for a in pair]
    for command in (["agent", "configure", "bob"], ["agent", "create", f"n{next(_counter)}"]):
        if command[1] == "create" and any(o in ("--unset", "--temperature", "--max-rounds") for o, _ in options):
            continue  # options configure has and create has not
        code = main(["--home", str(cli_home), *command, *args])
        out, err = capsys.readouterr()
        assert code in (0, 2), (args, code, out, err)
        assert "Traceback" not in err and "Traceback" not in out
        unsets = any(o == "--unset" for o, _ in options)  # an unknown name (not a value) is shown
        for line in err.splitlines():
            if line.startswith("holon: error:") and not unsets:  # holon's refusals never quote a value
                assert MARK not in line, (args, line)
