"""Curated memory files: where each scope lives, who may do what, and safe reading.

Three scopes, each a directory of markdown files:

    scope      directory                  main file     shared by
    agent      <agent home>/memory/       self.md       nobody: the agent's own notebook (+ notes/<name>.md)
    operator   <holon home>/memory/       operator.md   every agent of this home (the user scope)
    workspace  <agent workspace>/.holon/  memory.md     agents working in the same workspace

Permissions are checked here, at run time, for every read and write, whatever a tool schema
offered: an agent reads its own, the operator and its workspace scope; it appends to and replaces
its own files and the operator file; on the workspace file a foreground agent appends and replaces,
a background agent (``is_background``) only appends, so an unattended job can add what it saw but
never erase what people and other agents wrote. Archives (``<scope dir>/archive/``) are readable,
never writable.

A path is relative to its scope's directory and must stay inside it: ``..``, absolute paths and
symlinks that lead out are refused, and so is a scope directory that is itself a symlink (a
``.holon`` linked to another workspace's or agent's memory). Only ``.md`` files. Writing lives in ``holon.memory.writes``.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from holon.errors import NotFoundError, UsageError
from holon.ledger.events import MemoryScope
from holon.memory.markdown import headings
from holon.memory.refs import SCOPES, FileRef, check_relative_path
from holon.paths import HomePaths
from holon.projections.state import AgentState
from holon.resources import agent_home_template

__all__ = [
    "ARCHIVE_DIR",
    "MAIN_FILE",
    "SCOPES",
    "FileInfo",
    "MemoryFile",
    "Op",
    "Permissions",
    "atomic_create",
    "atomic_write",
    "ensure_operator_file",
    "is_background",
    "list_files",
    "locate",
    "locked",
    "permissions",
    "prompt_files",
    "read_bytes",
    "read_text",
    "scope_dir",
]

Op = Literal["append", "replace"]
Purpose = Literal["read", "append", "replace"]

MAIN_FILE: dict[MemoryScope, str] = {"agent": "self.md", "operator": "operator.md", "workspace": "memory.md"}
ARCHIVE_DIR = "archive"
NOTES_DIR = "notes"


def is_background(agent: AgentState) -> bool:
    """Whether the agent runs unattended (a monitor, or a scheduled agent with ``background`` set).

    The one place that decides it: background agents may only append to the workspace file.
    """
    # Raw, not ``holon.runtime.settings.read_settings``: holon.memory sits below holon.runtime (the
    # import-linter layers). Stored settings are validated on the way in, so this reads a bool.
    return bool(agent.settings.get("background")) or agent.template == "monitor"


@dataclass(frozen=True, slots=True)
class Permissions:
    """What one agent may do in each scope."""

    read: tuple[MemoryScope, ...]
    write: dict[MemoryScope, tuple[Op, ...]]

    @property
    def writable(self) -> tuple[MemoryScope, ...]:
        return tuple(s for s in SCOPES if self.write.get(s))


def permissions(agent: AgentState) -> Permissions:
    read: tuple[MemoryScope, ...] = ("agent", "operator")
    write: dict[MemoryScope, tuple[Op, ...]] = {"agent": ("append", "replace"), "operator": ("append", "replace")}
    if agent.workspace:
        read += ("workspace",)
        write["workspace"] = ("append",) if is_background(agent) else ("append", "replace")
    return Permissions(read, write)


def operator_dir(paths: HomePaths) -> Path:
    return paths.root / "memory"


def scope_dir(paths: HomePaths, agent: AgentState, scope: MemoryScope) -> Path:
    """The directory of ``scope`` as ``agent`` sees it (``NotFoundError`` for a missing workspace)."""
    if scope == "agent":
        return Path(agent.home) / "memory"
    if scope == "operator":
        return operator_dir(paths)
    if not agent.workspace:
        raise NotFoundError(f"agent {agent.name} has no workspace, so it has no workspace memory")
    return Path(agent.workspace) / ".holon"


def ensure_operator_file(paths: HomePaths) -> Path:
    """Create ``<home>/memory/operator.md`` from the template if it is missing; return its path."""
    target = operator_dir(paths) / MAIN_FILE["operator"]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        template = agent_home_template() / "memory" / "operator.md"
        atomic_create(target, template.read_bytes())
    return target


@dataclass(frozen=True, slots=True)
class MemoryFile:
    """A located file: its scope, its path inside the scope directory, and where it is on disk."""

    scope: MemoryScope
    path: str
    location: Path
    root: Path
    """The scope's directory."""

    @property
    def ref(self) -> str:
        return str(FileRef(self.scope, self.path))

    @property
    def name(self) -> str:
        """``scope/path``, as shown in prompts and manifests."""
        return f"{self.scope}/{self.path}"


def _writable_path(scope: MemoryScope, path: str) -> bool:
    parts = path.split("/")
    if scope == "agent" and len(parts) == 2 and parts[0] == NOTES_DIR:
        return True
    return path == MAIN_FILE[scope]


def _check(agent: AgentState, scope: MemoryScope, path: str, purpose: Purpose) -> None:
    perms = permissions(agent)
    if scope not in perms.read:
        raise UsageError(f"agent {agent.name} has no {scope} memory (its scopes: {', '.join(perms.read)})")
    if purpose == "read":
        return
    allowed = perms.write.get(scope, ())
    if purpose not in allowed:
        why = "a background agent only appends to the workspace file" if allowed else "it is read-only"
        raise UsageError(f"agent {agent.name} may not {purpose} {scope} memory: {why}")
    if path.split("/", maxsplit=1)[0] == ARCHIVE_DIR:
        raise UsageError(f"file:{scope}/{path} is an archive: archives are read-only")
    if not _writable_path(scope, path):
        allowed_paths = f"{MAIN_FILE[scope]} or notes/<name>.md" if scope == "agent" else MAIN_FILE[scope]
        raise UsageError(f"file:{scope}/{path} cannot be written: in the {scope} scope write {allowed_paths}")


def _check_scope_root(scope: MemoryScope, root: Path) -> str:
    """Refuse a scope directory (``<workspace>/.holon``, ``<agent home>/memory``) that is a symlink
    or resolves outside its parent: following one would let an agent read and write memory that
    is not its own, e.g. another agent's private notes (issue 14, finding 11). Returns the
    directory's real path.

    A directory that is not a symlink resolves to its name under its parent's real path (what
    ``os.path.realpath`` of it gives), so it cannot lead outside; only the parent is resolved
    (each resolution is an ``lstat`` per part of the path: the prompt's files are located every
    turn, issue 18)."""
    parent = os.path.realpath(root.parent)
    if root.is_symlink():
        raise UsageError(f"the {scope} memory directory {root} is a symlink or leads outside {root.parent}; refused")
    return os.path.join(parent, root.name)


def _resolves_inside(real_root: str, target: Path, rel: str) -> bool:
    """Whether ``target`` (``rel`` under a scope directory whose real path is ``real_root``) resolves
    inside ``real_root``. When no part of ``rel`` is a symlink it resolves to ``real_root/rel``
    (as ``os.path.realpath`` would: a missing part and everything after it is taken as it is), so
    one ``lstat`` per part answers; a symlink among them is resolved whole."""
    path = real_root
    for part in rel.split("/"):
        path = os.path.join(path, part)
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            return True
        if link:
            return os.path.commonpath([real_root, os.path.realpath(target)]) == real_root
    return True


def locate(
    paths: HomePaths, agent: AgentState, scope: MemoryScope, path: str | None = None, *, purpose: Purpose = "read"
) -> MemoryFile:
    """Check that ``agent`` may ``purpose`` the file and that it stays inside its scope; locate it.

    ``path`` defaults to the scope's main file. Raises ``UsageError`` for anything refused.
    """
    if scope not in SCOPES:
        raise UsageError(f"unknown memory scope {scope!r}; scopes: {', '.join(SCOPES)}")
    rel = check_relative_path(path if path is not None else MAIN_FILE[scope])
    _check(agent, scope, rel, purpose)
    root = scope_dir(paths, agent, scope)
    if scope == "operator":
        ensure_operator_file(paths)
        real_root = os.path.realpath(root)
    else:
        real_root = _check_scope_root(scope, root)
    target = root / rel
    if not _resolves_inside(real_root, target, rel):
        raise UsageError(f"file:{scope}/{rel} leads outside the {scope} memory directory (a symlink?); refused")
    return MemoryFile(scope, rel, target, root)


def locate_ref(paths: HomePaths, agent: AgentState, ref: FileRef, *, purpose: Purpose = "read") -> MemoryFile:
    return locate(paths, agent, ref.scope, ref.path, purpose=purpose)


def read_bytes(file: MemoryFile) -> bytes | None:
    """The file's bytes, or ``None`` when it does not exist."""
    try:
        return file.location.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as e:
        raise UsageError(f"{file.ref} is a directory, not a file") from e
    except OSError as e:
        raise NotFoundError(f"cannot read {file.ref}: {e.strerror}") from e


def decode(data: bytes, file: MemoryFile) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{file.ref} is not valid UTF-8 text (byte {e.start}); fix it by hand") from e


def read_text(file: MemoryFile) -> str:
    """The file's text; ``NotFoundError`` when it does not exist."""
    data = read_bytes(file)
    if data is None:
        raise NotFoundError(f"no file {file.ref} in this memory")
    return decode(data, file)


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A visible file as the prompt lists it: where it is, how big, what its headings are."""

    scope: MemoryScope
    path: str
    size: int
    """Bytes."""
    headings: tuple[str, ...]
    """Heading lines (``## Preferences``), in order."""

    @property
    def ref(self) -> str:
        return str(FileRef(self.scope, self.path))


def _markdown_under(root: Path) -> Iterator[str]:
    if not root.is_dir():
        return
    for p in sorted(root.rglob("*.md")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            yield rel


def list_files(paths: HomePaths, agent: AgentState) -> list[FileInfo]:
    """Every markdown file the agent may read: main files, notes and archives, scope by scope."""
    out = []
    for scope in permissions(agent).read:
        root = scope_dir(paths, agent, scope)
        if scope == "operator":
            ensure_operator_file(paths)
        for rel in _markdown_under(root):
            try:
                file = locate(paths, agent, scope, rel)
                text = read_text(file)
            except (UsageError, NotFoundError):
                continue  # unsafe names, symlinks out, unreadable or non-UTF-8 files are not listed
            marks = tuple(f"{'#' * h.level} {h.text}" for h in headings(text))
            out.append(FileInfo(scope, rel, len(text.encode("utf-8")), marks))
    return out


def prompt_files(paths: HomePaths, agent: AgentState) -> list[tuple[MemoryFile, str]]:
    """The main file of each readable scope that exists, with its text, for the prompt."""
    out = []
    for scope in permissions(agent).read:
        try:
            file = locate(paths, agent, scope)
            out.append((file, read_text(file)))
        except (UsageError, NotFoundError):
            continue
    return out


# --- low-level file operations ------------------------------------------------------------------


def atomic_write(target: Path, data: bytes) -> None:
    """Replace ``target`` with ``data`` so that readers see the old or the new file, never a mix.

    A temporary file in the same directory is written, flushed to disk, then renamed over the
    target; the directory is synced so the rename survives a power loss.
    """
    tmp = _durable_temp(target, data)
    try:
        # Memory is private: 0600 unless the file exists with a stricter mode (mkstemp made it 0600).
        mode = stat.S_IMODE(target.stat().st_mode) & 0o600 if target.exists() else 0o600
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def atomic_create(target: Path, data: bytes) -> bool:
    """Create ``target`` with ``data`` unless it exists; False when it did (it is left alone).

    ``atomic_write`` would replace a file another writer created and appended to meanwhile; this
    links a complete temporary file into place, which fails instead of overwriting.
    """
    tmp = _durable_temp(target, data)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(target.parent)
    return True


def _durable_temp(target: Path, data: bytes) -> str:
    """A private (0600) temporary file beside ``target`` holding ``data``, flushed to disk."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on a scope directory: one writer at a time, across threads and processes.

    ``flock`` on the directory itself leaves no lock file behind in a workspace. Writers hold it
    only for a read-modify-write and its ledger append (milliseconds), never across a model call.
    """
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
