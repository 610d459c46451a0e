"""Memory references: the opaque strings a model copies from search hits and prompts.

    event:<seq>                 one ledger event               event:1234
    episode:<episode_id>        a sealed episode               episode:ep_118
    work_item:<id>              a work item                    work_item:wi_0193a5c2...
    task:<id>                   a background task              task:task_0193a5c2...
    durable:<id>                a durable memory entry         durable:mem-3f2a9c1b04d7
    skill:<id>                  an accepted skill's SKILL.md   skill:skill-3f2a9c1b04
    file:<scope>/<path>         a curated file or an archive   file:agent/self.md
                                                               file:operator/operator.md
                                                               file:workspace/memory.md
                                                               file:agent/archive/self-20261122T103100Z.md

``parse_ref`` turns any string into one of these or raises ``UsageError`` saying what is wrong; a
string from a model may be anything (NUL bytes, lone surrogates, 100 KB), and none of it raises
anything else. Parsing checks form only: whether the thing exists, and is the caller's, is
MemoryGet's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from holon.errors import UsageError
from holon.ledger.events import MemoryScope

__all__ = [
    "MAX_REF_CHARS",
    "EpisodeRef",
    "EventRef",
    "FileRef",
    "Ref",
    "RefKind",
    "TaskRef",
    "DurableRef",
    "SkillRef",
    "WorkItemRef",
    "check_relative_path",
    "parse_ref",
    "parse_scope",
]

MAX_REF_CHARS = 1_000
_MAX_SEQ = 2**63 - 1  # SQLite's largest integer
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
_SKILL_ID = re.compile(r"^[a-z0-9][a-z0-9\-]{0,63}$")  # as ``SkillDraft.skill_id``: one directory name
_SEGMENT = re.compile(r"^[^\x00-\x1f\x7f/\\:*?\"<>|]+$")
SCOPES: tuple[MemoryScope, ...] = ("agent", "operator", "workspace")


def parse_scope(scope: str | None) -> tuple[MemoryScope, ...]:
    """A ``scope`` argument (CLI ``--scope``, MCP, API) as the scopes to search: every scope when
    none is named; ``UsageError`` for an unknown one."""
    match scope:
        case None:
            return ()
        case "agent" | "operator" | "workspace":
            return (scope,)
    raise UsageError(f"unknown scope {scope!r}; scopes: agent, operator, workspace")


RefKind = Literal["event", "episode", "work_item", "task", "file", "durable", "skill"]
_EXAMPLES = (
    "event:123, episode:ep_45, work_item:wi_..., task:task_..., durable:mem-..., skill:skill-..., file:agent/self.md"
)


@dataclass(frozen=True, slots=True)
class EventRef:
    seq: int
    kind: Literal["event"] = "event"

    def __str__(self) -> str:
        return f"event:{self.seq}"


@dataclass(frozen=True, slots=True)
class EpisodeRef:
    episode_id: str
    kind: Literal["episode"] = "episode"

    def __str__(self) -> str:
        return f"episode:{self.episode_id}"


@dataclass(frozen=True, slots=True)
class WorkItemRef:
    work_item_id: str
    kind: Literal["work_item"] = "work_item"

    def __str__(self) -> str:
        return f"work_item:{self.work_item_id}"


@dataclass(frozen=True, slots=True)
class TaskRef:
    task_id: str
    kind: Literal["task"] = "task"

    def __str__(self) -> str:
        return f"task:{self.task_id}"


@dataclass(frozen=True, slots=True)
class FileRef:
    scope: MemoryScope
    path: str
    """Relative to the scope's directory, ``/``-separated, checked by ``check_relative_path``."""
    kind: Literal["file"] = "file"

    def __str__(self) -> str:
        return f"file:{self.scope}/{self.path}"


@dataclass(frozen=True, slots=True)
class DurableRef:
    entry_id: str
    kind: Literal["durable"] = "durable"

    def __str__(self) -> str:
        return f"durable:{self.entry_id}"


@dataclass(frozen=True, slots=True)
class SkillRef:
    """An accepted skill of the reading agent (``skills/<id>/SKILL.md`` under its home)."""

    skill_id: str
    kind: Literal["skill"] = "skill"

    def __str__(self) -> str:
        return f"skill:{self.skill_id}"


Ref = EventRef | EpisodeRef | WorkItemRef | TaskRef | FileRef | DurableRef | SkillRef


def check_relative_path(path: str) -> str:
    """``path`` if it is a safe relative path to a markdown file, else ``UsageError``.

    Safe: ``/``-separated segments of printable characters, none empty, ``.``, ``..`` or starting
    with a dot; ending in ``.md``; at most 300 characters. Symlinks are checked where the path is
    resolved against its directory (``holon.memory.files``), not here.
    """
    if not path:
        raise UsageError("the file path is empty; e.g. self.md or notes/deploys.md")
    if len(path) > 300:
        raise UsageError(f"the file path is {len(path)} characters long; at most 300")
    if path.startswith("/") or "\\" in path:
        raise UsageError(f"file path {path!r} must be relative to its scope, with '/' between folders")
    for segment in path.split("/"):
        if segment in ("", ".", "..") or segment.startswith(".") or not _SEGMENT.match(segment):
            raise UsageError(
                f"file path {path!r} is not allowed: no '..', empty or hidden parts, or control characters"
            )
    if not path.endswith(".md"):
        raise UsageError(f"file path {path!r} is not a markdown file: memory files end in .md")
    return path


def _id(kind: str, value: str, ref: str) -> str:
    if not _ID.match(value):
        raise UsageError(f"{ref} is not a valid {kind} reference: the id after '{kind}:' is malformed")
    return value


def _file(body: str, ref: str) -> FileRef:
    scope, sep, path = body.partition("/")
    if not sep or scope not in SCOPES:
        raise UsageError(
            f"{ref} is not a valid file reference: use file:<scope>/<path> with scope "
            f"{', '.join(SCOPES)} (e.g. file:agent/self.md)"
        )
    return FileRef(scope, check_relative_path(path))  # checked against SCOPES


def _event(body: str, ref: str) -> EventRef:
    if not body.isascii() or not body.isdigit() or len(body) > 19 or not 1 <= int(body) <= _MAX_SEQ:
        raise UsageError(f"{ref} is not a valid event reference: use event:<sequence number>, e.g. event:123")
    return EventRef(int(body))


def parse_ref(ref: str) -> Ref:
    """Parse ``ref``; ``UsageError`` says what is wrong with a malformed one (and nothing else is raised)."""
    if not isinstance(ref, str):
        raise UsageError(f"a reference is a string like {_EXAMPLES}")
    if len(ref) > MAX_REF_CHARS:
        raise UsageError(f"the reference is {len(ref):,} characters long; references are at most {MAX_REF_CHARS:,}")
    try:
        ref.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("the reference contains characters that are not valid text (lone surrogates)") from None
    shown = ref.strip()
    kind, sep, body = shown.partition(":")
    if not sep:
        raise UsageError(f"{_preview(ref)} is not a memory reference; references look like {_EXAMPLES}")
    match kind:
        case "event":
            return _event(body, _preview(ref))
        case "episode":
            return EpisodeRef(_id("episode", body, _preview(ref)))
        case "work_item":
            return WorkItemRef(_id("work_item", body, _preview(ref)))
        case "task":
            return TaskRef(_id("task", body, _preview(ref)))
        case "file":
            return _file(body, _preview(ref))
        case "durable":
            return DurableRef(_id("durable", body, _preview(ref)))
        case "skill":
            if not _SKILL_ID.match(body):
                raise UsageError(
                    f"{_preview(ref)} is not a valid skill reference: use skill:<id> as the skills catalog lists it"
                )
            return SkillRef(body)
    raise UsageError(f"unknown reference kind {_preview(kind)}; references look like {_EXAMPLES}")


def _preview(text: str) -> str:
    """A short, printable form of hostile input for an error message."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:80])
    return repr(clean + ("..." if len(text) > 80 else ""))
