"""A home is private by default: directories 0700, files 0600 (issue 14, finding 8).

A fresh home with a running daemon and one agent is walked entry by entry: the database, its
WAL and SHM, the anchor, logs, run files, memory files, the config and every agent file. An
older, looser home is tightened when opened; a stricter umask is respected, never loosened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import holon

from holon.paths import open_private, private_dir, tighten_tree, write_private


def _walk(root: Path) -> Iterator[tuple[Path, int, bool]]:
    yield root, stat.S_IMODE(root.lstat().st_mode), True
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            yield path, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode)


def _loose(root: Path) -> list[str]:
    return [
        f"{p.relative_to(root.parent)} {mode:o}"
        for p, mode, is_dir in _walk(root)
        if mode & ~(0o700 if is_dir else 0o600)
    ]


@pytest.mark.slow
def test_a_home_with_a_running_daemon_and_an_agent_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert holon("--home", home, "init").code == 0
    r = holon("--home", home, "daemon", "start", "--port", "0", timeout=120)
    assert r.code == 0, r
    try:
        assert holon("--home", home, "agent", "create", "alice").code == 0
        names = {p.name for p, _, _ in _walk(home)}
        for expected in ("holon.db", "holon.db-wal", "holon.db-shm", "ledger.anchor", "holon.log",
                         "daemon.json", "daemon.pid", "daemon.out", "operator.md", "holon.toml"):  # fmt: skip
            assert expected in names, (expected, sorted(names))
        assert _loose(home) == []
    finally:
        holon("--home", home, "daemon", "stop", timeout=120)
    assert _loose(home) == []


@pytest.mark.slow
def test_an_older_looser_home_is_tightened_when_opened(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert holon("--home", home, "init").code == 0
    for path, _mode, is_dir in list(_walk(home)):
        os.chmod(path, 0o755 if is_dir else 0o644)
    assert _loose(home)
    assert holon("--home", home, "ledger", "verify").code == 0
    for path in (home, home / "holon.db", home / "ledger.anchor", home / "logs", home / "logs" / "holon.log",
                 home / "holon.toml"):  # fmt: skip
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    assert tighten_tree(home) >= 0 and _loose(home) == []


def test_helpers_respect_a_stricter_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        write_private(tmp_path / "token", "secret")
        os.close(open_private(tmp_path / "log"))
        private_dir(tmp_path / "d" / "e")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o400
    assert stat.S_IMODE((tmp_path / "log").stat().st_mode) == 0o400
    assert stat.S_IMODE((tmp_path / "d" / "e").stat().st_mode) == 0o500
    (tmp_path / "loose").write_text("x")
    os.chmod(tmp_path / "loose", 0o666)
    os.close(open_private(tmp_path / "loose"))
    assert stat.S_IMODE((tmp_path / "loose").stat().st_mode) == 0o600
