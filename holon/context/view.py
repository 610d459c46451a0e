"""``TurnView``: everything a prompt may be made of, gathered from the store as plain values.

``gather`` is the only I/O of context assembly. Every read is a primary-key lookup, an indexed
projection query, or a bounded backwards walk of the agent's own index, so its cost depends on
the window, not on the length of history. Large texts are resolved here, so the section builder
and the assembler stay pure.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from holon.context.render import InputView
from holon.ledger import Event
from holon.ledger import events as ev
from holon.ledger.query import EventQuery
from holon.memory.files import prompt_files
from holon.memory.recall import Recall, RecallLimits, recall
from holon.projections import Store
from holon.projections.episodes import flat_excerpt
from holon.projections.fold import working_memory_view
from holon.projections.state import (
    AgentState,
    EpisodeDrafts,
    KeyPoint,
    TaskProjection,
    ThreadStart,
    WaitProjection,
    WorkItemState,
)

__all__ = ["EpisodeLine", "EpisodeView", "HistoryTurn", "RoundView", "ToolEvidence", "TurnView", "gather", "refresh"]

#: A work item in one of these is open (listed in working memory; paused unless it is the thread).
OPEN_STATUSES = ("open", "blocked")

MAX_HISTORY = 60
"""Candidate past turns, newest first, of any thread (the sections decide which fit the turn)."""
MAX_EPISODES = 50


@dataclass(frozen=True, slots=True)
class HistoryTurn:
    turn_id: str
    started_seq: int
    settled_seq: int
    work_item_id: str | None
    inputs: tuple[InputView, ...]
    reply: str
    outcome: str
    thread: str = ""
    """The work item id, or the conversation thread (``conv:<seq>``) the turn belonged to."""

    def __hash__(self) -> int:
        # A settled turn is its id and its seqs: hashing those, not its texts, keeps the caches
        # keyed by turns (renderings, texts) cheap. Equal turns still hash equal.
        return hash((self.turn_id, self.started_seq, self.settled_seq))


@dataclass(frozen=True, slots=True)
class EpisodeLine:
    """A line of an episode's summary and the events it quotes (none for what it only counts)."""

    text: str
    refs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EpisodeView:
    episode_id: str
    seq: int
    seq_start: int
    seq_end: int
    work_item_id: str | None
    topic: str
    summary: str
    boundary: str
    lines: tuple[EpisodeLine, ...] = ()
    """The summary as lines with the events each quotes, so a prompt can leave out what its
    past turns already show."""
    thread: str = ""
    """The work item, or the conversation thread the episode began in (``conv:<seq>``)."""
    sources: tuple[int, ...] | None = None
    """Seqs of the events the summary quotes; ``None`` for episodes sealed before they were recorded."""

    def __hash__(self) -> int:
        # A sealed episode never changes: its id, seq and thread identify it (keeps the caches
        # keyed by episodes cheap). Equal episodes still hash equal.
        return hash((self.episode_id, self.seq, self.thread))


@dataclass(frozen=True, slots=True)
class ToolEvidence:
    call_id: str
    tool: str
    arguments: str
    status: str
    output: str
    called_seq: int
    result_seq: int | None


@dataclass(frozen=True, slots=True)
class RoundView:
    """One model round of the current turn: what the model said and the tool calls it made."""

    index: int
    content: str | None
    calls: tuple[ToolEvidence, ...]


@dataclass(frozen=True, slots=True)
class TurnView:
    agent: AgentState
    agents_md: str
    memory_files: tuple[tuple[str, str], ...]
    """The main curated file of each scope the agent reads, as (``scope/path``, text)."""
    tools: tuple[dict[str, Any], ...]
    working_memory: dict[str, Any]
    work_item: WorkItemState | None
    open_items: tuple[WorkItemState, ...]
    thread: str
    key_points: tuple[KeyPoint, ...]
    history: tuple[HistoryTurn, ...]
    episodes: tuple[EpisodeView, ...]
    tasks: tuple[TaskProjection, ...]
    waits: tuple[WaitProjection, ...]
    inputs: tuple[InputView, ...]
    last_turn: HistoryTurn | None
    resumed: tuple[RoundView, ...] = ()
    rounds: tuple[RoundView, ...] = field(default_factory=tuple)
    recall: Recall = field(default_factory=Recall)
    """Durable-memory entries chosen for this turn, and those left out (RFC 0006)."""
    skills: tuple[tuple[str, str, str], ...] = ()
    """Accepted skills as (id, name, description); their ``SKILL.md`` is under ``skills/<id>/``."""


def _text(store: Store, value: ev.LargeText | None) -> str:
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or ""
    return resolved.text if resolved.text is not None else f"[body pruned; preview]\n{resolved.preview}"


def input_view(store: Store, e: Event) -> InputView:
    p = e.payload
    text = _text(store, p.text) if isinstance(p, ev.MessageReceived) else ""
    return InputView(e.seq, e.ts_us, e.authority, e.origin, text)


_MEMO_LIMIT = 20_000


def _memo(store: Store) -> dict[object, Any]:
    if len(store.memo) > _MEMO_LIMIT:
        store.memo.clear()
    return store.memo


#: How many of each type's newest entries ``_recent_index`` reads to extend what it kept.
_PEEK = 4


def _recent_index(
    store: Store, agent_id: str, types: tuple[str, ...], *, limit: int, before: int
) -> list[tuple[int, str, str | None]]:
    """``store.ledger.recent_index(agent_id, types, limit=limit, before=before)``, kept per agent.

    What lies below a committed seq never changes, so the index read for an earlier ``before``
    is extended with what came since (each type's ``_PEEK`` newest entries reach back past it,
    or are all there is) instead of being read again; when more came, it is read whole."""
    memo = _memo(store)
    key = ("recent_index", agent_id, types, limit)
    kept = memo.get(key)
    if kept is not None and kept[0] <= before:
        upto, found = kept
        fresh: list[tuple[int, str, str | None]] = []
        for type_ in types:
            rows = store.ledger.recent_index(agent_id, (type_,), limit=_PEEK, before=before)
            new = [r for r in rows if r[0] >= upto]
            if len(new) == _PEEK:  # maybe more than that came: read it whole
                break
            fresh += new
        else:
            index = sorted(found + fresh)[-limit:] if fresh else found
            memo[key] = (before, index)
            return index
    index = store.ledger.recent_index(agent_id, types, limit=limit, before=before)
    memo[key] = (before, index)
    return index


def _history(store: Store, agent_id: str, before: int) -> list[HistoryTurn]:
    """Recent settled turns, oldest first. A settled turn never changes, so each is read once."""
    index = _recent_index(store, agent_id, ("turn.started", "turn.settled"), limit=MAX_HISTORY * 3, before=before)
    memo = _memo(store)
    started = {turn_id: seq for seq, type_, turn_id in index if type_ == "turn.started"}
    out = []
    for seq, type_, turn_id in index:
        if type_ != "turn.settled" or turn_id not in started:
            continue
        key = ("history_turn", seq)
        if key not in memo:
            memo[key] = _read_turn(store, started[turn_id], seq)
        if memo[key] is not None:
            out.append(memo[key])
    return out


def _read_turn(store: Store, started_seq: int, settled_seq: int) -> HistoryTurn | None:
    start, settled = store.ledger.get_many([started_seq, settled_seq])
    p, sp = settled.payload, start.payload
    assert isinstance(p, ev.TurnSettled) and isinstance(sp, ev.TurnStarted)
    # A turn whose inputs were re-queued (interrupted, or failed transiently) is not history: its
    # inputs come back as a later turn's inputs and must not be shown twice.
    if p.outcome == "interrupted" or p.requeue:
        return None
    inputs = tuple(input_view(store, i) for i in store.ledger.get_many(sp.inputs))
    return HistoryTurn(p.turn_id, start.seq, settled.seq, start.work_item_id, inputs, _text(store, p.reply), p.outcome)


def _thread_of(work_item_id: str | None, seq: int, conv_starts: list[ThreadStart], conv_seqs: list[int]) -> str:
    if work_item_id is not None:
        return work_item_id
    at = bisect.bisect_right(conv_seqs, seq)
    return conv_starts[at - 1].thread if at else "conv:0"


#: Which line of an episode's summary quotes an event of each type (besides requests and the last reply).
_LINE_OF_TYPE = {
    "tool.called": "commands",
    "tool.resulted": "commands",
    "task.created": "commands",
    "task.resulted": "commands",
    "file.touched": "files",
    "decision.recorded": "decisions",
    "follow_up.changed": "follow_ups",
}


def _episode_view(store: Store, e: Event) -> EpisodeView:
    """A sealed episode as lines, each with the events it quotes: the operator's requests (matched
    to the messages among its ``sources``, or in its range for episodes sealed before sources were
    recorded) and the last reply (its ``turn.settled``)."""
    p = e.payload
    assert isinstance(p, ev.EpisodeSealed)
    said: dict[str, int] = {}
    last_settled: int | None = None
    quoted = (
        store.ledger.get_many(p.sources)
        if p.sources is not None
        else store.ledger.find(
            EventQuery(
                agent_id=e.agent_id, types=("message.received", "turn.settled"), after=p.seq_start - 1, upto=p.seq_end
            )
        )
    )
    by_kind: dict[str, list[str]] = {}
    for m in quoted:
        kind = _LINE_OF_TYPE.get(m.type)
        if kind is not None:
            by_kind.setdefault(kind, []).append(f"event:{m.seq}")
        if isinstance(m.payload, ev.MessageReceived) and m.authority == "operator":
            said.setdefault(flat_excerpt(m.payload.text, 160), m.seq)
        elif isinstance(m.payload, ev.TurnSettled) and m.payload.reply is not None:
            last_settled = m.seq
    ended = p.boundary.replace("_", " ")
    # A conversation's topic is its first request, which a line below quotes (with its ref): the
    # heading names only a work item's title, so the layout can leave that line out alone.
    title = p.topic if p.work_item_id is not None and p.topic else "conversation"
    lines = [EpisodeLine(f"# Episode {p.episode_id} ({title}; events {p.seq_start}-{p.seq_end}): "
                         f"{p.turns} turns, {p.tool_calls} tool calls; ended: {ended}.")]  # fmt: skip
    lines += [EpisodeLine(f"Operator: {x}", (f"event:{said[x]}",) if x in said else ()) for x in p.excerpts]
    if p.commands:
        shown = "; ".join(f"{str(c.get('command', ''))[:80]} (exit {c.get('exit_code')})" for c in p.commands[-5:])
        lines.append(EpisodeLine(f"Commands: {shown}.", tuple(by_kind.get("commands", ()))))
    if p.files:
        lines.append(EpisodeLine("Files: " + ", ".join(p.files) + ".", tuple(by_kind.get("files", ()))))
    if p.decisions:
        lines.append(
            EpisodeLine("Decisions: " + "; ".join(p.decisions[-5:]) + ".", tuple(by_kind.get("decisions", ())))
        )
    if p.follow_ups:
        text = "Follow-ups: " + "; ".join(p.follow_ups[-5:]) + "."
        lines.append(EpisodeLine(text, tuple(by_kind.get("follow_ups", ()))))
    if p.last_reply:
        refs = (f"event:{last_settled}",) if last_settled is not None else ()
        lines.append(EpisodeLine(f"Last reply: {p.last_reply}", refs))
    return EpisodeView(
        p.episode_id, e.seq, p.seq_start, p.seq_end, p.work_item_id, p.topic or "", p.summary, p.boundary,
        lines=tuple(lines), sources=None if p.sources is None else tuple(p.sources),
    )  # fmt: skip


def _rounds(store: Store, events: list[Event]) -> tuple[RoundView, ...]:
    results = {e.payload.call_id: e for e in events if isinstance(e.payload, ev.ToolResulted)}
    rounds = []
    for e in events:
        p = e.payload
        if not isinstance(p, ev.ModelResponded) or p.error:
            continue
        calls = []
        for c in p.tool_calls:
            r = results.get(c.call_id)
            rp = r.payload if r is not None else None
            calls.append(
                ToolEvidence(
                    c.call_id,
                    c.tool,
                    c.arguments,
                    rp.status if isinstance(rp, ev.ToolResulted) else "interrupted",
                    _text(store, rp.output) if isinstance(rp, ev.ToolResulted) else "(no result recorded)",
                    e.seq,
                    r.seq if r is not None else None,
                )
            )
        rounds.append(RoundView(p.round, _text(store, p.content) or None, tuple(calls)))
    return tuple(rounds)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def gather(
    store: Store,
    agent_id: str,
    *,
    inputs: list[int],
    started_seq: int,
    tools: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    current: Sequence[Event] = (),
    started_us: int | None = None,
) -> TurnView:
    """Read what a turn of ``agent_id`` (started at ``started_seq``, at ``started_us`` when the
    caller has that event) may show the model. The reads share one look at the ledger's head
    (``Ledger.reading``): rows the projector holds are served from memory."""
    with store.ledger.reading():
        return _gather(store, agent_id, inputs, started_seq, tools, current, started_us)


def _gather(
    store: Store,
    agent_id: str,
    inputs: list[int],
    started_seq: int,
    tools: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    current: Sequence[Event],
    started_us: int | None,
) -> TurnView:
    agent = store.agent_state(agent_id) or store.agent(agent_id)
    home = Path(agent.home)
    wm, item = _working_memory(store, agent_id)
    active = wm.get("active_work_item")
    drafts = store.episode_drafts(agent_id)
    thread = drafts.thread if drafts is not None and drafts.thread else (active or f"conv:{started_seq}")
    if active:
        thread = active
    # The key points of this thread, and those stated or accepted in words in plain conversation,
    # which hold in every thread (a work item's stay with it, and so does a proposal accepted only
    # by carrying on). Superseded ones too: the prompt marks them so.
    key_points = (
        tuple(k for k in drafts.key_points if k.thread == thread or (k.explicit and k.thread.startswith("conv:")))
        if isinstance(drafts, EpisodeDrafts)
        else ()
    )
    conv = (
        [k for k in drafts.thread_starts if k.thread.startswith("conv:")] if isinstance(drafts, EpisodeDrafts) else []
    )
    seqs = [k.seq for k in conv]
    memo = _memo(store)
    history = [
        _in_thread(memo, t, _thread_of(t.work_item_id, t.started_seq, conv, seqs))
        for t in _history(store, agent_id, started_seq)
    ]
    episodes = []
    for seq, _type, _turn in _recent_index(
        store, agent_id, ("episode.sealed",), limit=MAX_EPISODES, before=started_seq
    ):
        key = ("episode", seq)
        if key not in memo:
            memo[key] = _episode_view(store, store.ledger.get(seq))
        view = memo[key]
        episodes.append(_in_thread(memo, view, _thread_of(view.work_item_id, view.seq_start, conv, seqs)))
    resumed: tuple[RoundView, ...] = ()
    if agent.resume_from_seq is not None:
        interrupted = [
            e for e in store.ledger.read(agent.resume_from_seq - 1, agent_id=agent_id) if e.seq < started_seq
        ]
        resumed = _rounds(store, interrupted)
    memory = tuple((file.name, text) for file, text in prompt_files(store.paths, agent))
    input_events = store.ledger.get_many(inputs)
    query = " ".join(_text(store, e.payload.text) for e in input_events if isinstance(e.payload, ev.MessageReceived))
    if isinstance(item, WorkItemState):
        query += f" {item.title} {item.objective}"
    now_us = started_us if started_us is not None else _turn_time(store, started_seq)
    return TurnView(
        agent=agent,
        agents_md=_read(home / "AGENTS.md") or "",
        memory_files=memory,
        tools=tuple(tools),
        working_memory=wm,
        work_item=item,
        open_items=tuple(store.work_items(agent_id=agent_id, status=OPEN_STATUSES)),
        thread=thread,
        key_points=key_points,
        history=tuple(history[-MAX_HISTORY:]),
        episodes=tuple(episodes),
        tasks=tuple(store.tasks(agent_id=agent_id, status="running")),
        waits=tuple(store.waits(agent_id=agent_id, status="pending")),
        inputs=tuple(input_view(store, e) for e in input_events),
        last_turn=history[-1] if history else None,
        resumed=resumed,
        rounds=_rounds(store, list(current)),
        recall=recall(store, agent, query, now_us, _limits(store)),
        skills=_skills(home),
    )


def _working_memory(store: Store, agent_id: str) -> tuple[dict[str, Any], WorkItemState | None]:
    """``store.working_memory(agent_id)`` and its active work item, each row read once."""
    state = store.working_memory_state(agent_id)
    active = state.active_work_item if state is not None else None
    item = store.work_item(active) if active else None
    return working_memory_view(state, item), item


_Threaded = TypeVar("_Threaded", HistoryTurn, EpisodeView)


def _in_thread(memo: dict[object, Any], value: _Threaded, thread: str) -> _Threaded:
    """``value`` with its thread: the same object every turn (kept in the store's memo), so the
    caches keyed by turns and episodes find it by identity."""
    key = ("in_thread", id(value), thread)
    hit = memo.get(key)
    if hit is None or hit[0] is not value:
        hit = memo[key] = (value, value if value.thread == thread else dataclasses.replace(value, thread=thread))
    return hit[1]


def _turn_time(store: Store, started_seq: int) -> int:
    """The turn's own time (its ``turn.started``), so a rebuilt prompt is the same prompt."""
    found = store.ledger.get_many([started_seq]) or store.ledger.tail(1)
    return found[0].ts_us if found else 0


def _limits(store: Store) -> RecallLimits:
    s = store.settings.evolve
    return RecallLimits(limit=s.recall_limit, operator_cap=s.recall_operator_cap, pending=s.recall_pending)


#: Most skills listed in the catalog.
MAX_SKILLS = 30


def _skills(home: Path) -> tuple[tuple[str, str, str], ...]:
    out = []
    root = home / "skills"
    if not root.is_dir():
        return ()
    for skill in sorted(root.iterdir())[:MAX_SKILLS]:
        text = _read(skill / "SKILL.md")
        if text is None:
            continue
        meta = dict(
            line.split(":", 1) for line in text.split("---")[1].splitlines() if ":" in line
        ) if text.startswith("---") and text.count("---") >= 2 else {}  # fmt: skip
        name = meta.get("name", skill.name).strip()
        out.append((skill.name, name[:120], meta.get("description", "").strip()[:300]))
    return tuple(out)


def refresh(store: Store, view: TurnView, rounds: tuple[RoundView, ...]) -> TurnView:
    """The view for the next round of the same turn: state tools may have changed, re-read."""
    agent_id = view.agent.agent_id
    with store.ledger.reading():
        wm, item = _working_memory(store, agent_id)
        open_items = tuple(store.work_items(agent_id=agent_id, status=OPEN_STATUSES))
        tasks = tuple(store.tasks(agent_id=agent_id, status="running"))
        waits = tuple(store.waits(agent_id=agent_id, status="pending"))
    return dataclasses.replace(
        view, working_memory=wm, work_item=item, open_items=open_items, tasks=tasks, waits=waits, rounds=rounds
    )
