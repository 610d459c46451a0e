"""Where a holon home keeps its files, how the home is chosen, and how its files stay private.

A home holds conversations, memory and credentials, so it is private by default (RFC 0001,
"Private by default"): directories ``0700``, files ``0600``. Files are created with those modes
(``os.open``/``mkdir`` with a mode, so there is no window where they are readable), a stricter
umask is respected (the mode is ``wanted & ~umask``), and an existing home that is looser is
tightened when it is opened. ``private_dir``, ``write_private`` and ``open_private`` are the
helpers every writer of the home uses (the API token file included). No heavy imports here.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "HomePaths",
    "inherited_umask",
    "open_private",
    "private_dir",
    "private_umask",
    "resolve_home",
    "tighten",
    "tighten_tree",
    "write_private",
]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_STARTED_WITH: dict[str, int] = {}
"""The umask the process had before ``private_umask`` (key ``"umask"``)."""


@dataclass(frozen=True, slots=True)
class HomePaths:
    """Where a holon home keeps its files."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "holon.db"

    @property
    def anchor(self) -> Path:
        """The last committed seq and hash, kept outside the database (see ``holon.ledger.anchor``)."""
        return self.root / "ledger.anchor"

    @property
    def config(self) -> Path:
        return self.root / "holon.toml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def agents(self) -> Path:
        return self.root / "agents"

    def agent_home(self, name: str) -> Path:
        return self.agents / name


def resolve_home(home: str | Path | None = None, environ: Mapping[str, str] | None = None) -> HomePaths:
    env = os.environ if environ is None else environ
    raw = home or env.get("HOLON_HOME") or "~/.holon"
    return HomePaths(Path(raw).expanduser().absolute())


# --- private files ------------------------------------------------------------------------------


def _umask() -> int:
    """The process umask (read by setting and restoring it: there is no other portable way)."""
    current = os.umask(0o077)
    os.umask(current)
    return current


def private_umask() -> int:
    """Make every file this process creates private from now on (``umask |= 0o077``).

    Called once at the CLI entry point, so files made by any part of holon (and libraries it
    calls) are owner-only even where no explicit mode is given. Returns the umask holon started
    with, which ``inherited_umask`` keeps for child processes that are not holon's own (agent
    commands run in the operator's workspace with the operator's umask).
    """
    current = _umask()
    started = _STARTED_WITH.setdefault("umask", current)
    os.umask(current | 0o077)
    return started


def inherited_umask() -> int:
    """The umask the process started with (before ``private_umask``); pass it to foreign children."""
    return _STARTED_WITH.get("umask", _umask())


def _loose(mode: int, wanted: int) -> bool:
    return bool(stat.S_IMODE(mode) & ~wanted)


def tighten(path: Path, *, is_dir: bool | None = None) -> None:
    """Remove group/other bits from ``path`` when it has any (never loosens; symlinks untouched)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            return
        directory = stat.S_ISDIR(st.st_mode) if is_dir is None else is_dir
        wanted = PRIVATE_DIR_MODE if directory else PRIVATE_FILE_MODE
        if _loose(st.st_mode, wanted):
            os.chmod(path, stat.S_IMODE(st.st_mode) & wanted)


def tighten_tree(root: Path) -> int:
    """``tighten`` ``root`` and everything under it (symlinks are neither followed nor changed).

    Returns how many entries were tightened. Used once when the daemon starts on an older home."""
    changed = 0

    def walk(entries: Iterator[os.DirEntry[str]]) -> None:
        nonlocal changed
        for entry in entries:
            if entry.is_symlink():
                continue
            st = entry.stat(follow_symlinks=False)
            wanted = PRIVATE_DIR_MODE if entry.is_dir(follow_symlinks=False) else PRIVATE_FILE_MODE
            if _loose(st.st_mode, wanted):
                os.chmod(entry.path, stat.S_IMODE(st.st_mode) & wanted)
                changed += 1
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError), os.scandir(entry.path) as inner:
                    walk(inner)

    if root.is_dir() and not root.is_symlink():
        before = root.stat().st_mode
        tighten(root, is_dir=True)
        changed += int(_loose(before, PRIVATE_DIR_MODE))
        with contextlib.suppress(OSError), os.scandir(root) as top:
            walk(top)
    return changed


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as ``0700``; tighten it when it exists looser."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=PRIVATE_DIR_MODE)
    tighten(path, is_dir=True)
    return path


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """``os.open`` creating ``path`` as ``0600`` (tightening an existing file); returns the fd."""
    fd = os.open(path, flags | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        st = os.fstat(fd)
        if _loose(st.st_mode, PRIVATE_FILE_MODE):
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes | str, *, fsync: bool = True) -> None:
    """Replace ``path`` atomically with ``data`` as a ``0600`` file (readers see old or new, never a mix)."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
