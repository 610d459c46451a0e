"""Episodes: completed stretches of work, sealed deterministically at boundaries.

A per-agent draft accumulates what happens (turns, operator requests, commands with exit codes,
files, decisions, follow-ups, the last reply). The reducer closes the draft at a boundary, in
event order, and moves it to ``ready``:

* ``work_item_completed``: the work item completed (the event ends the episode);
* ``work_switched``: another work item was opened or picked (the event starts the next one);
* ``wait_began``: the agent registered a wait (the event ends the episode);
* ``turn_cap``: ``TURN_CAP`` turns in one episode;
* ``idle_gap``: plain conversation resumed after ``IDLE_GAP_US`` of silence.

The projector's derive step turns each ready draft into an immutable ``episode.sealed`` event
that points back to its ledger range (``seq_start`` .. ``seq_end``); folding that event removes
the draft from ``ready``. No model is involved; a model-written summary may be added later as a
separate event, and nothing depends on it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections.state import CommandRun, Draft, EpisodeDrafts, KeyPoint, WorkItemState

__all__ = [
    "EPISODE_TYPES",
    "IDLE_GAP_US",
    "KEY_POINTS",
    "TURN_CAP",
    "apply_episode_drafts",
    "is_key_point",
    "is_topic_switch",
    "sealed_payload",
]

TURN_CAP = 20
IDLE_GAP_US = 30 * 60 * 1_000_000
_KEEP = 20
_EXCERPTS = 3
_EXIT = re.compile(r"^exit code: (-?\d+)")
KEY_POINTS = 40

# Operator statements that set something lasting: decisions, rules, preferences. Deterministic
# markers in English and Chinese; a miss only means the statement ages out with its turns.
_KEY = re.compile(
    r"(\b(decid\w*|decision|we('ll| will) (use|go with)|let'?s (use|go with)|always|never|must|"
    r"do not|don'?t ever|from now on|the rule is|i prefer|make sure)\b|决定|必须|不要|总是|永远|以后都|规则|我更喜欢)",
    re.IGNORECASE,
)
# Explicit changes of subject in plain conversation.
_TOPIC = re.compile(
    r"^\s*(new topic|different topic|change of topic|another (topic|question|thing)|switching (topics?|gears)|"
    r"unrelated|back to|going back to|returning to|换个话题|另一个问题|换个问题|新话题|说点别的|回到)",
    re.IGNORECASE,
)


def is_key_point(text: str) -> bool:
    return bool(_KEY.search(text))


def is_topic_switch(text: str) -> bool:
    return bool(_TOPIC.search(text))


#: Event types the draft reducer looks at.
EPISODE_TYPES = frozenset(
    {
        "message.received",
        "turn.started",
        "turn.settled",
        "tool.called",
        "tool.resulted",
        "file.touched",
        "decision.recorded",
        "follow_up.changed",
        "work_item.opened",
        "work_item.picked",
        "work_item.completed",
        "wait.registered",
        "task.created",
        "task.resulted",
        "episode.sealed",
    }
)


def _short(value: ev.LargeText | None, n: int) -> str:
    text = value if isinstance(value, str) else (value.preview if value is not None else "")
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _meaningful(d: Draft) -> bool:
    return bool(d.turns or d.tool_calls or d.excerpts)


def _close(state: EpisodeDrafts, boundary: str) -> EpisodeDrafts:
    d = state.current
    if d is None:
        return state
    ready = [*state.ready, d.model_copy(update={"boundary": boundary})] if _meaningful(d) else state.ready
    return state.model_copy(update={"current": None, "ready": ready})


def _push(items: list[str], item: str) -> list[str]:
    return [*[x for x in items if x != item], item][-_KEEP:]


def _fold(d: Draft, event: Event) -> Draft:
    p = event.payload
    up: dict[str, Any] = {"last_seq": event.seq, "last_us": event.ts_us}
    match p:
        case ev.MessageReceived() if event.authority == "operator" and len(d.excerpts) < _EXCERPTS:
            up["excerpts"] = [*d.excerpts, _short(p.text, 200)]
        case ev.TurnStarted() if event.work_item_id is not None:
            up["work_item_id"] = event.work_item_id
        case ev.TurnSettled():
            up["turns"] = d.turns + 1
            if p.reply is not None:
                up["last_reply"] = _short(p.reply, 300)
        case ev.ToolCalled():
            up["tool_calls"] = d.tool_calls + 1
            if p.tool == "run_command" and isinstance(p.arguments, str):
                try:
                    command = json.loads(p.arguments).get("command")
                except (ValueError, AttributeError):
                    command = None
                if isinstance(command, str):
                    up["commands"] = [*d.commands, CommandRun(call_id=p.call_id, command=command[:300])][-_KEEP:]
        case ev.ToolResulted() if p.tool == "run_command":
            match_ = _EXIT.match(_short(p.output, 40))
            if match_:
                code = int(match_.group(1))
                up["commands"] = [
                    c.model_copy(update={"exit_code": code}) if c.call_id == p.call_id else c for c in d.commands
                ]
        case ev.TaskCreated() if p.kind == "command":
            command = p.spec.get("command")
            if isinstance(command, str):
                up["commands"] = [*d.commands, CommandRun(call_id=p.task_id, command=command[:300])][-_KEEP:]
        case ev.TaskResulted():
            up["commands"] = [
                c.model_copy(update={"exit_code": p.exit_code}) if c.call_id == p.task_id else c for c in d.commands
            ]
        case ev.FileTouched():
            up["files"] = _push(d.files, p.path)
        case ev.DecisionRecorded():
            up["decisions"] = _push(d.decisions, p.text)
        case ev.FollowUpChanged() if p.op == "add" and p.text:
            up["follow_ups"] = _push(d.follow_ups, p.text)
        case ev.WorkItemOpened() | ev.WorkItemPicked() if p.work_item_id is not None:
            up["work_item_id"] = p.work_item_id
    return d.model_copy(update=up)


def _operator_text(event: Event) -> str | None:
    p = event.payload
    if isinstance(p, ev.MessageReceived) and event.authority == "operator":
        return p.text if isinstance(p.text, str) else p.text.preview
    return None


def _next_thread(s: EpisodeDrafts, event: Event, said: str | None) -> tuple[str, str]:
    """(thread after this event, boundary name if it is a change of subject)."""
    p = event.payload
    now = s.thread or f"conv:{event.seq}"
    moving = isinstance(p, ev.WorkItemPicked) or (isinstance(p, ev.WorkItemOpened) and p.activate)
    if moving and p.work_item_id is not None:
        return p.work_item_id, "work_switched"
    if isinstance(p, ev.TurnStarted):
        if event.work_item_id is not None:
            return event.work_item_id, "work_switched"
        if not now.startswith("conv:"):  # the work item ended: a new conversation begins
            return f"conv:{event.seq}", "work_switched"
    cur = s.current
    if said is not None and now.startswith("conv:") and cur is not None and cur.turns > 0:
        if event.ts_us - cur.last_us >= IDLE_GAP_US:
            return f"conv:{event.seq}", "idle_gap"
        if is_topic_switch(said):
            return f"conv:{event.seq}", "topic_switched"
    return now, ""


def apply_episode_drafts(state: EpisodeDrafts | None, event: Event) -> EpisodeDrafts | None:
    p = event.payload
    s = state if state is not None else EpisodeDrafts(agent_id=event.agent_id)
    if isinstance(p, ev.EpisodeSealed):
        ready = [d for d in s.ready if d.seq_start != p.seq_start]
        return s.model_copy(update={"ready": ready}) if len(ready) != len(s.ready) else state
    said = _operator_text(event)
    thread, boundary = _next_thread(s, event, said)
    points = s.key_points
    cur = s.current
    if cur is not None and thread != cur.thread:
        if cur.turns == 0:
            # Nothing settled yet: the draft (and what it heard) belongs to the new thread.
            s = s.model_copy(update={"current": cur.model_copy(update={"thread": thread})})
            points = [k.model_copy(update={"thread": thread}) if k.seq >= cur.seq_start else k for k in points]
        else:
            s = _close(s, boundary or "work_switched")
    if isinstance(p, ev.TurnStarted) and thread != s.thread:
        # A turn's inputs are instructions for the thread the turn runs in (e.g. the first turn
        # after a work item completed), not for the thread that was current when they arrived.
        taken = set(p.inputs)
        points = [k.model_copy(update={"thread": thread}) if k.seq in taken else k for k in points]
    if said is not None and is_key_point(said):
        points = [*points, KeyPoint(seq=event.seq, text=_short(said, 300), thread=thread)][-KEY_POINTS:]
    starts = s.thread_starts
    if thread != s.thread:
        starts = [*starts, KeyPoint(seq=event.seq, text="", thread=thread)][-KEY_POINTS:]
    base = s.current or Draft(seq_start=event.seq, last_seq=event.seq, last_us=event.ts_us, thread=thread)
    s = s.model_copy(
        update={"current": _fold(base, event), "thread": thread, "key_points": points, "thread_starts": starts}
    )
    # Boundaries that end the episode with this event.
    if isinstance(p, ev.WorkItemCompleted):
        s = _close(s, "work_item_completed")
    elif isinstance(p, ev.WaitRegistered):
        s = _close(s, "wait_began")
    elif isinstance(p, ev.TurnSettled) and s.current is not None and s.current.turns >= TURN_CAP:
        s = _close(s, "turn_cap")
    return s


def sealed_payload(d: Draft, item: WorkItemState | None) -> ev.EpisodeSealed:
    """The immutable record of a ready draft; ``item`` is its work item, when it has one."""
    title = item.title if item is not None else None
    topic = title or (d.excerpts[0][:80] if d.excerpts else "conversation")
    parts = [f"{topic}: {d.turns} turns, {d.tool_calls} tool calls."]
    if d.excerpts:
        parts.append("Operator: " + " / ".join(d.excerpts) + ".")
    if d.commands:
        parts.append("Commands: " + "; ".join(f"{c.command[:80]} (exit {c.exit_code})" for c in d.commands[-5:]) + ".")
    if d.files:
        parts.append("Files: " + ", ".join(d.files[-8:]) + ".")
    if d.decisions:
        parts.append("Decisions: " + "; ".join(d.decisions[-5:]) + ".")
    if d.follow_ups:
        parts.append("Follow-ups: " + "; ".join(d.follow_ups[-5:]) + ".")
    parts.append(f"Ended: {d.boundary.replace('_', ' ')}.")
    if d.last_reply:
        parts.append(f"Last reply: {d.last_reply}")
    return ev.EpisodeSealed(
        episode_id=f"ep_{d.seq_start}",
        seq_start=d.seq_start,
        seq_end=d.last_seq,
        boundary=d.boundary,
        work_item_id=d.work_item_id,
        topic=topic,
        objective=item.objective if item is not None else "",
        summary=" ".join(parts),
        files=d.files,
        commands=[c.model_dump(mode="json") for c in d.commands],
        decisions=d.decisions,
        follow_ups=d.follow_ups,
        turns=d.turns,
        tool_calls=d.tool_calls,
        excerpts=d.excerpts,
        last_reply=d.last_reply,
    )
