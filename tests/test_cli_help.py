"""Help text and start-up cost of the CLI (issue 15 items 8 and 11), through real subprocesses.

* Every command's ``--help`` at 80 columns shows each option name whole, keeps every ``[section]``
  reference of its help text (rich markup used to swallow ``[api]``: ``(default:  host)``), and
  shows no ``<bool>`` value for a flag.
* ``holon --help`` (and a command's ``--help``) imports none of the heavy libraries: the CLI
  starts fast because commands import what they need inside the function. (A test on imports,
  not on time: ``holon bench cli`` measures the time.)
* Shell completion is offered (``--install-completion``, ``--show-completion``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import typer
from helpers.turn_cli import REPO, cli_env

from holon.cli.main import app

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

HEAVY = ("sqlmodel", "sqlalchemy", "litellm", "fastapi", "uvicorn", "starlette", "httpx", "rich", "structlog")
#: typer (0.2x) checks every non-flag option's value with a pydantic TypeAdapter once it parses
#: past the root, so only the root's ``--help`` (answered before that) can do without pydantic.
ROOT_ONLY = ("pydantic",)


def _commands() -> list[tuple[tuple[str, ...], object]]:
    """Every command path (``("agent", "list")``) with its click command, groups included."""
    root = typer.main.get_command(app)
    out: list[tuple[tuple[str, ...], object]] = []

    def walk(path: tuple[str, ...], cmd: object) -> None:
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk((*path, name), sub)

    walk((), root)
    return out


def _help(path: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = cli_env(COLUMNS="80", LINES="40", TERM="xterm-256color")
    return subprocess.run(
        [sys.executable, "-m", "holon.cli.main", *path, "--help"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_every_commands_help_shows_whole_option_names_and_its_section_references() -> None:
    commands = _commands()
    assert len(commands) > 40, [p for p, _ in commands]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda pc: _help(pc[0]), commands))
    problems: list[str] = []
    for (path, cmd), proc in zip(commands, results, strict=True):
        where = "holon " + " ".join(path) if path else "holon"
        if proc.returncode != 0 or "Traceback" in proc.stderr:
            problems.append(f"{where} --help: exit {proc.returncode}: {proc.stderr[-300:]}")
            continue
        text = proc.stdout
        if "<bool>" in text:
            problems.append(f"{where}: a flag shows <bool>")
        if "(default:  " in text:
            problems.append(f"{where}: markup swallowed a [section] reference")
        if any(len(line) > 80 for line in text.splitlines()):
            problems.append(f"{where}: a line wider than 80 columns")
        for param in getattr(cmd, "params", []):
            if getattr(param, "hidden", False):
                continue
            for name in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if name.startswith("-") and not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text):
                    problems.append(f"{where}: option {name} is not shown whole")
            for ref in re.findall(r"\[[a-z_]+\]", getattr(param, "help", None) or ""):
                if ref not in text:
                    problems.append(f"{where}: {ref} of {param.name}'s help is missing")
    assert not problems, "\n".join(problems)


def _imported(*args: str) -> set[str]:
    """Top-level packages imported by ``python -X importtime -m holon.cli.main ARGS``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "holon.cli.main", *args],
        capture_output=True, text=True, env=cli_env(COLUMNS="80"), cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "holon" in names and "typer" in names, sorted(names)  # the parse saw the imports
    return names


@pytest.mark.parametrize(
    "args",
    [("--help",), ("agent", "--help"), ("agent", "list", "--help"), ("daemon", "status", "--help"),
     ("config", "show", "--help"), ("run", "--help"), ("chat", "--help")],
)  # fmt: skip
def test_help_imports_nothing_heavy(args: tuple[str, ...]) -> None:
    heavy = sorted(_imported(*args) & {*HEAVY, *(ROOT_ONLY if args == ("--help",) else ())})
    assert not heavy, f"holon {' '.join(args)} imported {heavy}"


def test_shell_completion_is_offered() -> None:
    proc = _help(())
    assert "--install-completion" in proc.stdout and "--show-completion" in proc.stdout, proc.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "holon.cli.main", "--show-completion", "bash"],
        # The shell named, not guessed from the parent processes (a detached run has no shell above it).
        capture_output=True, text=True, env=cli_env(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"), cwd=REPO,
        timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0 and "complete" in shown.stdout, (shown.stdout, shown.stderr)
