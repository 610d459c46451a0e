"""What a memory reference points at, rendered as one markdown document from canonical storage.

Events, episodes, work items and tasks are read from the ledger and its projections, curated
files from disk; never from a search index, so what MemoryGet returns is the record itself. Every
field of an event is rendered, and large texts are resolved from the blob store, so an expanded
episode is lossless: it shows the exact events it covers. Sections are markdown headings, so the
same modes (headers, section, lines, tail) read any document by parts.

A reference to something that does not exist and a reference to another agent's record get the
same ``NotFoundError``: an agent cannot learn what other agents have by probing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

from pydantic import BaseModel

from holon.clock import format_us
from holon.errors import NotFoundError, UsageError
from holon.ledger import Event
from holon.ledger import events as ev
from holon.memory import files
from holon.memory.access import owners_for
from holon.memory.refs import (
    DurableRef,
    EpisodeRef,
    EventRef,
    FileRef,
    Ref,
    RefKind,
    SkillRef,
    TaskRef,
    WorkItemRef,
)
from holon.projections import Store
from holon.projections.durable import stale_at_us
from holon.projections.state import AgentState

__all__ = ["Document", "Part", "resolve"]

_INLINE_CHARS = 160
_EPISODE_ID = re.compile(r"^ep_(\d{1,19})$")
_ALL = 10_000_000


@dataclass(frozen=True, slots=True)
class Part:
    """A named part of a document (an event of an expanded episode), for size summaries."""

    ref: str
    label: str
    size: int


@dataclass(frozen=True, slots=True)
class Document:
    ref: str
    kind: RefKind
    title: str
    text: str
    parts: tuple[Part, ...] = ()


def _refused(ref: Ref, agent: AgentState) -> NotFoundError:
    return NotFoundError(f"nothing at {ref} in {agent.name}'s memory (no such record, or not this agent's)")


def _large(store: Store, value: ev.LargeText | None) -> str:
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or ""
    if resolved.text is None:
        return (
            f"[pruned from the blob store: only a preview of its {resolved.size:,} bytes is kept]\n{resolved.preview}"
        )
    return resolved.text


def _value(store: Store, value: Any) -> str:
    if isinstance(value, ev.BlobRef):
        return _large(store, value)
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json"), ensure_ascii=False)
    if isinstance(value, list | dict):
        plain = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
        data = plain if isinstance(value, list) else value
        flat = json.dumps(data, ensure_ascii=False)
        return flat if len(flat) <= _INLINE_CHARS else json.dumps(data, ensure_ascii=False, indent=2)
    return json.dumps(value)


def _fields(store: Store, payload: ev.PayloadBase, level: int, skip: frozenset[str] = frozenset()) -> list[str]:
    """Every field of ``payload``: short ones as ``name: value`` lines, long ones as subsections."""
    inline, blocks = [], []
    for name, value in payload:
        if name == "type" or name in skip or value is None:
            continue
        text = _value(store, value)
        if isinstance(value, ev.BlobRef) or "\n" in text or len(text) > _INLINE_CHARS:
            blocks.append(f"{'#' * (level + 1)} {name}\n{text.rstrip(chr(10))}")
        else:
            inline.append(f"{name}: {text}")
    return inline + blocks


def render_event(store: Store, event: Event, *, level: int = 1) -> str:
    head = [
        f"{'#' * level} event:{event.seq} · {event.type}",
        f"time: {format_us(event.ts_us)} · origin: {event.origin} (authority {event.authority})",
    ]
    envelope = {"turn": event.turn_id, "work item": event.work_item_id, "task": event.task_id}
    envelope["episode"] = event.episode_id
    links = " · ".join(f"{k}: {v}" for k, v in envelope.items() if v)
    if links:
        head.append(links)
    return "\n".join(head + _fields(store, event.payload, level)) + "\n"


def _own_event(store: Store, agent: AgentState, ref: EventRef) -> Event:
    try:
        event = store.ledger.get(ref.seq)
    except NotFoundError:
        raise _refused(ref, agent) from None
    if event.agent_id != agent.agent_id:
        raise _refused(ref, agent)
    return event


def _event_doc(store: Store, agent: AgentState, ref: EventRef) -> Document:
    event = _own_event(store, agent, ref)
    return Document(str(ref), "event", f"event:{event.seq} {event.type}", render_event(store, event))


def _chunks(seqs: list[int], size: int = 64) -> Iterator[list[int]]:
    for i in range(0, len(seqs), size):
        yield seqs[i : i + size]


def _sealed(store: Store, agent: AgentState, ref: EpisodeRef) -> Event:
    """The ``episode.sealed`` event of ``ref`` among the agent's own (ids are ``ep_<seq_start>``)."""
    m = _EPISODE_ID.match(ref.episode_id)
    start = int(m.group(1)) if m else 0
    index = store.ledger.recent_index(agent.agent_id, ("episode.sealed",), limit=_ALL)
    for chunk in _chunks([seq for seq, _t, _turn in index if seq >= start]):
        for event in store.ledger.get_many(chunk):
            if isinstance(event.payload, ev.EpisodeSealed) and event.payload.episode_id == ref.episode_id:
                return event
    raise _refused(ref, agent)


def _covered(store: Store, agent: AgentState, p: ev.EpisodeSealed) -> Iterator[Event]:
    for event in store.ledger.read(p.seq_start - 1, agent_id=agent.agent_id, chunk=200):
        if event.seq > p.seq_end:
            return
        yield event


def _episode_doc(store: Store, agent: AgentState, ref: EpisodeRef, *, expand: bool) -> Document:
    sealed = _sealed(store, agent, ref)
    p = sealed.payload
    assert isinstance(p, ev.EpisodeSealed)
    title = p.topic or p.work_item_id or p.boundary
    lines = [
        f"# {ref} · {title}",
        f"covers event:{p.seq_start} to event:{p.seq_end} of this agent; sealed as event:{sealed.seq} "
        f"at {format_us(sealed.ts_us)}",
        *_fields(store, p, 1, skip=frozenset({"episode_id", "seq_start", "seq_end"})),
    ]
    parts: list[Part] = []
    if expand:
        rendered = [(e, render_event(store, e, level=3)) for e in _covered(store, agent, p)]
        parts = [Part(f"event:{e.seq}", e.type, len(text)) for e, text in rendered]
        lines.append(f"## Events event:{p.seq_start} to event:{p.seq_end} ({len(parts)} events, exact)")
        lines += [text.rstrip("\n") for _e, text in rendered]
    return Document(str(ref), "episode", f"{ref} {title}", "\n".join(lines) + "\n", tuple(parts))


def _work_item_doc(store: Store, agent: AgentState, ref: WorkItemRef) -> Document:
    item = store.work_item(ref.work_item_id)
    if item is None or item.agent_id != agent.agent_id:
        raise _refused(ref, agent)
    lines = [
        f"# {ref} · {item.title}",
        f"status: {item.status} · opened {format_us(item.opened_us)} (event:{item.opened_seq}) · "
        f"updated {format_us(item.updated_us)}"
        + (f" · completed {format_us(item.completed_us)}" if item.completed_us else ""),
        f"objective: {item.objective}",
    ]
    if item.delivery_target:
        lines.append(f"deliver to: {item.delivery_target}")
    if item.plan:
        lines += ["## Plan", *(f"{i}. {step}" for i, step in enumerate(item.plan, start=1))]
    if item.todos:
        lines += ["## Todos", *(f"- {t.id} [{t.status}] {t.text}" for t in item.todos)]
    if item.constraints:
        lines += ["## Constraints", *(f"- {c}" for c in item.constraints)]
    if item.report is not None:
        lines += ["## Report", _large(store, item.report)]
    return Document(str(ref), "work_item", f"{ref} {item.title}", "\n".join(lines) + "\n")


def _task_doc(store: Store, agent: AgentState, ref: TaskRef) -> Document:
    task = store.task(ref.task_id)
    if task is None or task.agent_id != agent.agent_id:
        raise _refused(ref, agent)
    status = f"kind: {task.kind} · state: {task.state}" + (
        f" · exit code: {task.exit_code}" if task.exit_code is not None else ""
    )
    lines = [
        f"# {ref} · {task.title}",
        status,
        f"created {format_us(task.created_us)} · updated {format_us(task.updated_us)}",
    ]
    if task.detail:
        lines.append(f"detail: {task.detail}")
    if task.spec:
        lines += ["## Spec", json.dumps(task.spec, ensure_ascii=False, indent=2)]
    if task.output is not None:
        lines += ["## Output", _large(store, task.output)]
    return Document(str(ref), "task", f"{ref} {task.title}", "\n".join(lines) + "\n")


def _file_doc(store: Store, agent: AgentState, ref: FileRef) -> Document:
    file = files.locate(store.paths, agent, ref.scope, ref.path)
    try:
        text = files.read_text(file)
    except NotFoundError:
        raise NotFoundError(f"no file {ref} in {agent.name}'s memory") from None
    return Document(str(ref), "file", str(ref), text)


def _durable_doc(store: Store, agent: AgentState, ref: DurableRef) -> Document:
    """A durable memory entry the agent may recall (its own, its workspace's or the operator's)."""
    s = store.durable_entry(ref.entry_id)
    if s is None or s.entry.owner not in owners_for(agent) or s.status == "forgotten":
        raise _refused(ref, agent)
    e = s.entry
    stale = stale_at_us(s)
    lines = [
        f"# {ref} · {e.kind} ({e.scope} scope)",
        e.text,
        "## Provenance",
        f"status: {s.status}" + (f" (superseded by durable:{s.superseded_by})" if s.superseded_by else ""),
        f"observed {format_us(e.observed_us)} · last verified {format_us(s.verified_us)} · "
        f"stale after {format_us(stale) if stale is not None else 'never'} · verification: {e.verification}",
        f"source: {s.source}"
        + (f" (proposal {s.proposal_id})" if s.proposal_id else "")
        + f" · confidence {e.confidence:.2f}",
        "evidence: " + (", ".join(f"event:{q}" for q in e.evidence) or "none"),
    ]
    if s.verified_by:
        lines.append("seen again in: " + ", ".join(f"event:{q}" for q in s.verified_by))
    return Document(str(ref), "durable", f"{ref} {e.subject}", "\n".join(lines) + "\n")


#: Largest SKILL.md read (an accepted skill is at most 20,000 characters; leave room for edits by hand).
_MAX_SKILL_BYTES = 200_000


def _skill_doc(agent: AgentState, ref: SkillRef) -> Document:
    """An accepted skill of the agent's own: ``skills/<id>/SKILL.md`` under its home. Drafts
    (``evolve/skills/``) are not readable: only what the operator accepted is a skill."""
    root = os.path.realpath(Path(agent.home) / "skills")
    target = os.path.realpath(Path(root) / ref.skill_id / "SKILL.md")
    if os.path.commonpath([root, target]) != root:  # a symlink out of skills/
        raise _refused(ref, agent)
    try:
        with open(target, "rb") as f:
            data = f.read(_MAX_SKILL_BYTES + 1)
    except OSError:
        raise _refused(ref, agent) from None
    if len(data) > _MAX_SKILL_BYTES:
        raise UsageError(f"{ref} is larger than {_MAX_SKILL_BYTES:,} bytes; it was edited by hand, fix it there")
    text = data.decode("utf-8", errors="replace")
    return Document(str(ref), "skill", f"{ref} (skills/{ref.skill_id}/SKILL.md)", text)


def resolve(store: Store, agent: AgentState, ref: Ref, *, expand: bool = False) -> Document:
    """The document ``ref`` points at, if it is ``agent``'s to read (``NotFoundError`` otherwise)."""
    match ref:
        case EventRef():
            return _event_doc(store, agent, ref)
        case EpisodeRef():
            return _episode_doc(store, agent, ref, expand=expand)
        case WorkItemRef():
            return _work_item_doc(store, agent, ref)
        case TaskRef():
            return _task_doc(store, agent, ref)
        case FileRef():
            return _file_doc(store, agent, ref)
        case DurableRef():
            return _durable_doc(store, agent, ref)
        case SkillRef():
            return _skill_doc(agent, ref)
        case _:
            assert_never(ref)
