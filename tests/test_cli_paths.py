"""Paths the operator gets wrong are one line and a non-zero exit, never a traceback (finding 11).

``trace export --out`` into a missing directory, onto a directory or under a regular file; a
``--home`` that cannot be a directory (under a regular file) or cannot be read. Tests run as root,
where ``chmod 000`` does not stop reads: an unreadable home is simulated in-process by making
the stat of its database fail with EACCES, which is what a non-root user gets.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from test_cli import assert_error, holon

from holon.cli.main import main

pytestmark = pytest.mark.slow  # every test here starts a process


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("paths") / "home"
    assert holon("--home", path, "init").code == 0
    return path


@pytest.mark.parametrize(
    ("out", "needle"),
    [
        ("/missing/dir/x.jsonl", "the directory /missing/dir does not exist"),
        ("/etc/hostname/x.jsonl", "the directory /etc/hostname does not exist"),
        ("/tmp", "is a directory"),
    ],
)
def test_trace_export_out_is_checked(home: Path, out: str, needle: str) -> None:
    assert_error(holon("--home", home, "trace", "export", "--out", out), 2, needle)


@pytest.mark.parametrize(
    "argv",
    [
        ("ledger", "verify"),
        ("ledger", "tail"),
        ("ledger", "replay"),
        ("trace", "stats"),
        ("trace", "export", "--out", "/tmp/holon-never.jsonl"),
        ("agent", "list"),
        ("daemon", "start"),
        ("init",),
    ],
)
def test_a_home_under_a_regular_file(argv: tuple[str, ...]) -> None:
    r = holon("--home", "/etc/hostname/x", *argv)
    assert r.code != 0
    assert_error(r, r.code, "/etc/hostname")


def test_an_unreadable_home_is_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_stat = Path.stat

    def stat(self: Path, *, follow_symlinks: bool = True):  # type: ignore[no-untyped-def]
        if str(self).startswith(str(home)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_stat(self, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "stat", stat)
    for argv in (["ledger", "verify"], ["trace", "stats"], ["init"]):
        code = main(["--home", str(home), *argv])
        err = capsys.readouterr().err
        assert code != 0 and "Traceback" not in err, (argv, err)
        assert err.startswith("holon: error: ") and "Permission denied" in err and len(err.splitlines()) == 1, err
