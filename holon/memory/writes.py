"""Writing curated memory files: stamped appends, atomic replaces, archiving, and replay.

Every write is a ``memory.written`` event as well as a file change, so curated memory is
auditable and a replay of those events rebuilds every file (and archive) byte for byte.

**Crash consistency.** A write holds the scope directory's lock while it (1) compares the file
with what the ledger last recorded for it, (2) writes the new file atomically (temp file, fsync,
rename) and (3) appends the event. The file goes first: if holon dies between (2) and (3), the
file holds a change the ledger lacks, never the reverse, so no acknowledged write is ever missing
from disk. Step (1) repairs that gap: whenever a file differs from its last recorded digest (the
first write after the template was copied in, a hand edit by the operator, or a crash between (2)
and (3)), its current content is first recorded as a ``replace`` by ``runtime:memory``. So the
ledger always ends up with every state the file was written in, and ``replay_files`` reproduces
it. (Writing the event first would instead leave an event whose file was never written, and a
hand edit could then only be overwritten or ignored.)

**Archiving.** When a write leaves a file over ``ARCHIVE_AT_BYTES``, its content is copied to
``archive/<stem>-<UTC stamp>.md`` and replaced by a summary: the model's, when a ``summarize``
callable is given and answers sensibly, else a deterministic one keeping the state sections
(headings that are not dated entries) and the newest dated entries that fit. The summary is
computed without the lock (it may be a model call); the swap happens under the lock only if the
file did not change meanwhile, and is recorded as an ``archive`` event naming the archive.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from holon.clock import utc
from holon.errors import HolonError, NotFoundError, UsageError
from holon.ledger import NewEvent
from holon.ledger.events import Authority, MemoryWritten
from holon.logs import get_logger
from holon.memory import files as f
from holon.memory.files import MemoryFile, Op
from holon.memory.markdown import heading_key, headings, split_lines
from holon.projections import Store
from holon.projections.state import AgentState

__all__ = [
    "ARCHIVE_AT_BYTES",
    "SUMMARY_BUDGET_CHARS",
    "Replayed",
    "Summarize",
    "WriteResult",
    "archive_file",
    "check_write",
    "fallback_summary",
    "rebuild_files",
    "replay_files",
    "write_file",
    "write_memory",
]

ARCHIVE_AT_BYTES = 100_000
"""A file larger than this after a write is archived and replaced by a summary."""
SUMMARY_BUDGET_CHARS = 20_000
"""The deterministic summary's size; far below the archive threshold, so it never loops."""
MAX_WRITE_CHARS = 100_000

Summarize = Callable[[str], Awaitable[str]]
"""Turns a file's text into a shorter state document (a model call); optional."""

_DATED = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}")
_ALL_RECORDS = 10_000_000
log = get_logger("holon.memory")


@dataclass(frozen=True, slots=True)
class WriteResult:
    ref: str
    op: Op | str
    size: int
    """Bytes of the file after the write."""
    digest: str
    seq: int
    """The ``memory.written`` event."""
    archive_ref: str | None = None
    """Set when the write pushed the file over the limit and it was archived."""
    archive_seq: int | None = None
    """The ``memory.written`` event of the archive."""

    def describe(self) -> str:
        if self.archive_ref:
            return (
                f"{self.op} on {self.ref} recorded as event:{self.seq}. The file passed {ARCHIVE_AT_BYTES:,} "
                f"bytes, so its full text was archived to {self.archive_ref} and the file now holds a summary "
                f"of {self.size:,} bytes (event:{self.archive_seq}); read it before writing again"
            )
        return f"{self.op} on {self.ref} recorded as event:{self.seq}; the file is now {self.size:,} bytes"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the ledger's view of a file ------------------------------------------------------------


def _sharers(store: Store, agent: AgentState, scope: str) -> list[AgentState]:
    """Agents whose writes reach the same file in ``scope`` as ``agent``'s do."""
    if scope == "agent":
        return [agent]
    agents = store.agents()
    if scope == "operator":
        return agents
    return [a for a in agents if a.workspace == agent.workspace]


def _records(store: Store, agent_ids: list[str]) -> list[int]:
    """Sequence numbers of every ``memory.written`` event of these agents, oldest first."""
    seqs = [
        seq
        for agent_id in agent_ids
        for seq, _type, _turn in store.ledger.recent_index(agent_id, ("memory.written",), limit=_ALL_RECORDS)
    ]
    return sorted(seqs)


def _chunks(seqs: list[int], size: int = 64) -> Iterator[list[int]]:
    for i in range(0, len(seqs), size):
        yield seqs[i : i + size]


def last_record(store: Store, agent: AgentState, file: MemoryFile) -> MemoryWritten | None:
    """The newest ``memory.written`` event for ``file`` (by any agent sharing it), if any."""
    seqs = _records(store, [a.agent_id for a in _sharers(store, agent, file.scope)])
    for chunk in _chunks(seqs[::-1]):
        for event in store.ledger.get_many(chunk):
            p = event.payload
            if isinstance(p, MemoryWritten) and p.scope == file.scope and p.path == file.path:
                return p
    return None


def _append_event(
    store: Store, agent: AgentState, payload: MemoryWritten, *, origin: str, authority: Authority, turn_id: str | None
) -> int:
    event = NewEvent(agent.agent_id, payload, origin=origin, authority=authority, turn_id=turn_id)
    return store.append(event)[0].seq


def _adopt(store: Store, agent: AgentState, file: MemoryFile, current: bytes | None, turn_id: str | None) -> None:
    """Record the file's current content if the ledger does not have it (see the module docstring)."""
    record = last_record(store, agent, file)
    data = current or b""
    if (record is None and current is None) or (record is not None and record.digest == _sha(data)):
        return
    text = f.decode(data, file)
    payload = MemoryWritten(
        scope=file.scope, path=file.path, op="replace", text=text, size=len(data), digest=_sha(data)
    )
    _append_event(store, agent, payload, origin="runtime:memory", authority="runtime", turn_id=turn_id)


# --- composing the new content ----------------------------------------------------------------


def _stamp(store: Store, agent: AgentState, origin: str, turn_id: str | None) -> str:
    when = utc(store.ledger.clock.now_us()).strftime("%Y-%m-%d %H:%M UTC")
    source = agent.name if origin.startswith("agent:") else origin
    return f"{when} · {source}" + (f" · turn {turn_id}" if turn_id else "")


def _entry(current: str, text: str, stamp: str) -> str:
    """An appended entry: a dated level-2 heading naming its source, then the text."""
    sep = "" if not current or current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
    return f"{sep}## {stamp}\n{text.strip()}\n"


def _replace_section(current: str, heading: str, text: str) -> str:
    """``current`` with the section titled ``heading`` (exact, case-insensitive) holding ``text``.

    The heading line stays; the old body and subsections go. A missing section is added as a
    ``##`` section before the first dated entry, so state stays above the log.
    """
    want = heading_key(heading)
    body = text.strip("\n")
    lines = split_lines(current)
    first = body.split("\n", 1)[0]
    if first.startswith("#") and heading_key(first) == want:
        body = body.split("\n", 1)[1].strip("\n") if "\n" in body else ""
    match = next((h for h in headings(current) if " ".join(h.text.split()).casefold() == want), None)
    if match is not None:
        head = "".join(lines[: match.line])
        head = head if head.endswith("\n") else head + "\n"
        rest = "".join(lines[match.end_line :])
        return head + body + "\n" + ("\n" + rest if rest and not rest.startswith("\n") else rest)
    title = " ".join(heading.lstrip("#").split())
    new = f"## {title}\n{body}\n"
    dated = next((h for h in headings(current) if _DATED.match(h.text)), None)
    if dated is None:
        sep = "" if not current or current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
        return current + sep + new
    before, after = "".join(lines[: dated.line - 1]), "".join(lines[dated.line - 1 :])
    return before + new + "\n" + after


def check_write(op: Op, text: str, heading: str | None) -> None:
    """Refuse a write that no file could take (unknown op, empty or oversized text, bad heading)."""
    if op not in ("append", "replace"):
        raise UsageError(f"unknown operation {op!r}: use append or replace")
    if not text.strip():
        raise UsageError(f"refusing an empty {op}: a memory file is never emptied (write the new text)")
    if len(text) > MAX_WRITE_CHARS:
        raise UsageError(f"the text is {len(text):,} characters; one write takes at most {MAX_WRITE_CHARS:,}")
    if heading is not None and op != "replace":
        raise UsageError("heading goes with op 'replace' (it replaces that section); an append goes at the end")
    if heading is not None and not heading.strip("# \t"):
        raise UsageError("heading is empty: give the text of the section's heading, e.g. 'Preferences'")


def write_file(
    store: Store,
    agent: AgentState,
    scope: str,
    path: str | None,
    op: Op,
    text: str,
    *,
    origin: str,
    authority: Authority,
    turn_id: str | None = None,
    heading: str | None = None,
) -> WriteResult:
    """Append to or replace a curated file for ``agent`` and record it (``UsageError`` when refused).

    ``append`` adds ``text`` as a stamped entry at the end; ``replace`` writes ``text`` as the whole
    file, or, with ``heading``, as that section's new text.
    """
    check_write(op, text, heading)
    file = f.locate(store.paths, agent, scope, path, purpose=op)  # type: ignore[arg-type]  # checked there
    with f.locked(file.root):
        before = f.read_bytes(file)
        _adopt(store, agent, file, before, turn_id)
        current = f.decode(before or b"", file)
        if op == "append":
            added = _entry(current, text, _stamp(store, agent, origin, turn_id))
            new = current + added
        else:
            new = _replace_section(current, heading, text) if heading else text.rstrip("\n") + "\n"
            added = new
        data = new.encode("utf-8")
        file.location.parent.mkdir(parents=True, exist_ok=True)
        f.atomic_write(file.location, data)
        payload = MemoryWritten(scope=file.scope, path=file.path, op=op, text=added, size=len(data), digest=_sha(data))
        seq = _append_event(store, agent, payload, origin=origin, authority=authority, turn_id=turn_id)
    return WriteResult(file.ref, op, len(data), _sha(data), seq)


async def write_memory(
    store: Store,
    agent: AgentState,
    scope: str,
    path: str | None,
    op: Op,
    text: str,
    *,
    origin: str,
    authority: Authority,
    turn_id: str | None = None,
    heading: str | None = None,
    summarize: Summarize | None = None,
    archive_at: int = ARCHIVE_AT_BYTES,
) -> WriteResult:
    """``write_file``, then archive the file if the write took it past ``archive_at`` bytes."""
    result = write_file(
        store, agent, scope, path, op, text, origin=origin, authority=authority, turn_id=turn_id, heading=heading
    )
    if result.size <= archive_at:
        return result
    file = f.locate(store.paths, agent, scope, path)  # type: ignore[arg-type]  # checked by write_file
    archived = await archive_file(store, agent, file, summarize=summarize, turn_id=turn_id, archive_at=archive_at)
    if archived is None:
        return result
    return dataclasses.replace(
        result,
        size=archived.size,
        digest=archived.digest,
        archive_ref=archived.archive_ref,
        archive_seq=archived.seq,
    )


# --- archiving ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Block:
    text: str
    dated: bool


def _blocks(text: str) -> list[_Block]:
    """The text cut at headings; a dated entry keeps the deeper headings inside it."""
    lines = split_lines(text)
    cuts: list[tuple[int, bool]] = []
    inside_dated: int | None = None
    for h in headings(text):
        if inside_dated is not None and h.level > inside_dated:
            continue
        dated = bool(_DATED.match(h.text))
        inside_dated = h.level if dated else None
        cuts.append((h.line, dated))
    out = []
    if not cuts or cuts[0][0] > 1:
        out.append(_Block("".join(lines[: (cuts[0][0] - 1) if cuts else len(lines)]), False))
    for k, (line, dated) in enumerate(cuts):
        end = cuts[k + 1][0] - 1 if k + 1 < len(cuts) else len(lines)
        out.append(_Block("".join(lines[line - 1 : end]), dated))
    return [b for b in out if b.text]


def fallback_summary(text: str, *, budget: int = SUMMARY_BUDGET_CHARS) -> str:
    """A deterministic summary: the state sections in full, then the newest dated entries that fit.

    State sections too large for half the budget keep only their heading; whatever is left out is
    in the archive, which the note added by ``archive_file`` names.
    """
    blocks = _blocks(text)
    keep = [False] * len(blocks)
    shown = [b.text for b in blocks]
    used = 0
    for i, b in enumerate(blocks):
        if not b.dated:
            if used + len(b.text) > budget // 2:
                first = b.text.split("\n", 1)[0]
                shown[i] = f"{first}\n[this section's text is in the archive]\n" if first.startswith("#") else ""
            keep[i] = True
            used += len(shown[i])
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].dated and used + len(blocks[i].text) <= budget:
            keep[i] = True
            used += len(blocks[i].text)
        elif blocks[i].dated:
            break  # the newest entries only: stop at the first that does not fit
    summary = "".join(s if s.endswith("\n") else s + "\n" for s, k in zip(shown, keep, strict=True) if k and s)
    if len(summary) > budget:
        cut = summary[:budget].rsplit("\n", 1)[0]
        summary = cut + "\n[the rest is in the archive]\n"
    return summary


def _with_note(summary: str, note: str) -> str:
    """``summary`` with ``note`` under its title line (or first, when it has none)."""
    first, _, rest = summary.partition("\n")
    if first.startswith("# "):
        return f"{first}\n\n{note}\n\n{rest.lstrip(chr(10))}"
    return f"{note}\n\n{summary}"


async def _summary_body(text: str, summarize: Summarize | None, archive_at: int) -> tuple[str, str]:
    """(summary, how it was made). A model summary that fails, is empty or too long falls back."""
    if summarize is not None:
        try:
            candidate = await summarize(text)
        except (HolonError, TimeoutError) as e:
            log.warning("memory.summary_failed", error=str(e))
        else:
            if candidate.strip() and len(candidate.encode("utf-8")) <= archive_at // 2:
                return candidate.strip() + "\n", "a summary written by the model"
            log.warning("memory.summary_rejected", chars=len(candidate))
    dated = sum(1 for b in _blocks(text) if b.dated)
    summary = fallback_summary(text)
    kept = sum(1 for b in _blocks(summary) if b.dated)
    return summary, f"the state sections and the newest {kept} of {dated} dated entries"


def _archive_path(store: Store, file: MemoryFile) -> str:
    stamp = utc(store.ledger.clock.now_us()).strftime("%Y%m%dT%H%M%SZ")
    stem = file.path.rsplit("/", 1)[-1].removesuffix(".md")
    base = f"{f.ARCHIVE_DIR}/{stem}-{stamp}"
    candidate, n = f"{base}.md", 2
    while (file.root / candidate).exists():
        candidate, n = f"{base}-{n}.md", n + 1
    return candidate


async def archive_file(
    store: Store,
    agent: AgentState,
    file: MemoryFile,
    *,
    summarize: Summarize | None = None,
    turn_id: str | None = None,
    archive_at: int = ARCHIVE_AT_BYTES,
) -> WriteResult | None:
    """Archive ``file`` if it is over ``archive_at`` bytes; ``None`` when it is not (or changed meanwhile)."""
    data = f.read_bytes(file)
    if data is None or len(data) <= archive_at:
        return None
    body, how = await _summary_body(f.decode(data, file), summarize, archive_at)
    with f.locked(file.root):
        if f.read_bytes(file) != data:
            return None  # written again while the summary was made: the next write archives it
        _adopt(store, agent, file, data, turn_id)
        archive = _archive_path(store, file)
        (file.root / archive).parent.mkdir(parents=True, exist_ok=True)
        f.atomic_write(file.root / archive, data)
        ref = f"file:{file.scope}/{archive}"
        when = utc(store.ledger.clock.now_us()).strftime("%Y-%m-%d %H:%M UTC")
        note = (
            f"> Archived {when}: this file reached {len(data):,} bytes. Its full text is in {ref} "
            f"(read it with memory_get); kept here: {how}."
        )
        summary = _with_note(body, note).encode("utf-8")
        f.atomic_write(file.location, summary)
        payload = MemoryWritten(
            scope=file.scope,
            path=file.path,
            op="archive",
            text=summary.decode("utf-8"),
            size=len(summary),
            digest=_sha(summary),
            archive=archive,
        )
        seq = _append_event(store, agent, payload, origin="runtime:memory", authority="runtime", turn_id=turn_id)
    return WriteResult(file.ref, "archive", len(summary), _sha(summary), seq, archive_ref=ref, archive_seq=seq)


# --- replay ------------------------------------------------------------------------------------


@dataclass
class Replayed:
    """What the ``memory.written`` events say every curated file (and archive) contains."""

    files: dict[Path, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """Events whose digest does not match the replayed content, or whose text was pruned."""


def replay_files(store: Store) -> Replayed:
    """Fold every ``memory.written`` event in ledger order into file contents, by absolute path."""
    agents = {a.agent_id: a for a in store.agents()}
    out = Replayed()
    unknown: set[Path] = set()
    for chunk in _chunks(_records(store, list(agents)), 256):
        for event in store.ledger.get_many(chunk):
            p = event.payload
            assert isinstance(p, MemoryWritten)
            try:
                root = f.scope_dir(store.paths, agents[event.agent_id], p.scope)
            except NotFoundError as e:
                out.problems.append(f"event:{event.seq}: {e}")
                continue
            target = root / p.path
            resolved = store.ledger.resolve(p.text)
            text = resolved if isinstance(resolved, str) else (resolved.text if resolved is not None else None)
            if text is None:
                out.problems.append(f"event:{event.seq}: its text was pruned from the blob store")
                unknown.add(target)
                out.files.pop(target, None)
                continue
            if p.op == "append":
                if target in unknown:
                    continue
                new = out.files.get(target, "") + text
            else:
                if p.op == "archive" and p.archive is not None and target not in unknown:
                    out.files[root / p.archive] = out.files.get(target, "")
                new = text
                unknown.discard(target)
            if _sha(new.encode("utf-8")) != p.digest:
                out.problems.append(
                    f"event:{event.seq}: replayed content of {p.scope}/{p.path} differs from its digest"
                )
            out.files[target] = new
    return out


def rebuild_files(store: Store) -> Replayed:
    """Write every file ``replay_files`` knows back to disk (after a loss), atomically each."""
    replayed = replay_files(store)
    for path, text in replayed.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        f.atomic_write(path, text.encode("utf-8"))
    return replayed
