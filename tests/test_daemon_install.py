"""``holon daemon install --user`` and ``contrib/holon.service`` (issue 15, "Runs where daemons run").

The command runs for real with ``HOME`` pointed at a temporary directory: it writes the shipped
unit to ``~/.config/systemd/user/holon.service`` with this holon's executable and the chosen home
filled in, and says what to run next (it never runs ``systemctl`` itself). ``systemd-analyze
verify`` checks the written unit where that program exists.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.turn_cli import REPO, cli_env, holon_argv

from holon.daemon.unit import NEXT_STEP, holon_command, render_unit, systemd_quote

pytestmark = pytest.mark.timeout(120)

CONTRIB = REPO / "contrib" / "holon.service"


def _install(fake_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(HOME=str(fake_home))
    env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run(
        holon_argv("daemon", "install", *args),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def _settings(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def _verify(unit: Path) -> None:
    """``systemd-analyze verify`` on the unit, where the program exists."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    problems = [line for line in r.stderr.splitlines() if unit.name in line or "holon" in line]
    assert r.returncode == 0 and not problems, (r.returncode, r.stdout, r.stderr)


@pytest.mark.slow
def test_install_writes_the_unit_for_this_holon_and_home(tmp_path: Path) -> None:
    user_home, holon_home = tmp_path / "user", tmp_path / "holon home"
    r = _install(user_home, "--user", "--home", str(holon_home))
    assert r.returncode == 0, r.stderr
    unit = user_home / ".config" / "systemd" / "user" / "holon.service"
    text = unit.read_text(encoding="utf-8")
    settings = _settings(text)
    exe = holon_argv()[0]
    assert settings["ExecStart"] == [f"{exe} serve"], settings["ExecStart"]
    assert Path(exe).is_absolute() and Path(exe).exists()
    assert settings["Environment"] == [f'"HOLON_HOME={holon_home}"']
    assert settings["Restart"] == ["on-failure"] and settings["Type"] == ["simple"]
    assert settings["WantedBy"] == ["default.target"]
    # Everything else is the shipped unit, line for line.
    shipped = CONTRIB.read_text(encoding="utf-8").splitlines()
    written = text.splitlines()
    assert len(written) == len(shipped)
    assert [a for a, b in zip(written, shipped, strict=True) if a != b] == [
        f"ExecStart={exe} serve", f'Environment="HOLON_HOME={holon_home}"'
    ]  # fmt: skip
    assert NEXT_STEP in r.stdout and "holon init" in r.stdout  # the home does not exist yet
    _verify(unit)


@pytest.mark.slow
def test_dry_run_prints_the_unit_and_writes_nothing(tmp_path: Path) -> None:
    r = _install(tmp_path, "--user", "--dry-run", "--home", str(tmp_path / "h"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# holon as a systemd user service") and "[Service]" in r.stdout
    assert f"Environment=HOLON_HOME={tmp_path / 'h'}" in r.stdout
    assert not (tmp_path / ".config").exists()


@pytest.mark.slow
def test_install_needs_user(tmp_path: Path) -> None:
    r = _install(tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("holon: error:") and "--user" in r.stderr, r
    assert not (tmp_path / ".config").exists()


def test_the_shipped_unit_runs_the_user_installed_holon_on_the_default_home() -> None:
    settings = _settings(CONTRIB.read_text(encoding="utf-8"))
    assert settings["ExecStart"] == ["%h/.local/bin/holon serve"]  # pip install --user, pipx
    assert settings["Environment"] == ["HOLON_HOME=%h/.holon"]


@pytest.mark.slow
def test_paths_with_blanks_percent_and_dollar_stay_one_argument(tmp_path: Path) -> None:
    exe = tmp_path / "my tools" / "holon"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    home = tmp_path / "50% of $HOME"
    text = render_unit([str(exe)], home)
    assert f'ExecStart="{tmp_path}/my tools/holon" serve' in text
    assert f'Environment="HOLON_HOME={tmp_path}/50%% of $$HOME"' in text
    unit = tmp_path / "holon.service"
    unit.write_text(text)
    _verify(unit)


def test_quoting_and_command() -> None:
    assert systemd_quote("/usr/bin/holon") == "/usr/bin/holon"
    assert systemd_quote('a "b"\\c') == '"a \\"b\\"\\\\c"'
    assert holon_command("/nowhere/python-script", "/nowhere/bin/python") == [
        "/nowhere/bin/python",
        "-m",
        "holon.cli.main",
    ]
