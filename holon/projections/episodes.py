"""Episodes: completed stretches of work, sealed deterministically at boundaries.

The ``episode_drafts`` projection follows, per agent, only what boundaries depend on: the thread
(the active work item, or a conversation topic), where the open draft began, how many turns it
has, and when the operator or the agent last spoke. Its reducer closes the draft at a boundary, in
event order, and moves it to ``ready``:

* ``work_item_completed``: the work item completed (the event ends the episode);
* ``work_switched``: another work item was opened or picked, or the work item ended and a new
  conversation began (the event starts the next episode);
* ``wait_began``: the agent registered a wait (the event ends the episode);
* ``turn_cap``: ``TURN_CAP`` turns in one episode;
* ``idle_gap``: plain conversation resumed after ``IDLE_GAP_US`` of silence (the thread stays
  unless the message moves it);
* ``topic_switched`` / ``topic_returned``: an operator message moved plain conversation to a new
  subject, or back to an earlier thread. ``holon.projections.dialogue.next_move`` decides from
  structure and the threads' vocabularies, not from marker words (a short reply or an answer to
  the assistant's question stays; a message that shares more distinctive words with an earlier
  thread returns to it; one that shares nothing with the current thread and brings a subject of
  its own starts a new one). Messages the operator sends in a row, with no reply between, are one
  utterance and stay together.

Which episode owns what (the labelling rule, see ``apply_episode_drafts``): a message belongs to
the episode of the turn that takes it, and a turn to the thread it ran in. When the thread
changes, a draft in which a turn already ran is closed before the change: at the start of the turn
making the change when that turn began in this draft (its inputs are the request that made it open
or pick the work item, so they go with the work item), else at the changing event. A draft in
which no turn ran yet has only heard messages: it adopts the new thread, and its messages go to
the turn that takes them.

The projector's derive step turns each ready draft into an immutable ``episode.sealed`` event whose
content (operator requests, commands with exit codes, files, decisions, follow-ups, last reply) is
read from the draft's ledger range at that moment, so the per-event fold stays small; folding the
sealed event removes the draft from ``ready``. The requests it quotes are the operator inputs of
the turns that start in its range (read from before the range when they were said earlier): a
message still pending at the boundary is left to the episode of the turn that takes it. The sealed
event lists the seqs of every event its summary quotes (``sources``), which the prompt declares. No model is involved; a model-written summary may be
added later as a separate event, and nothing depends on it.

The same reducer keeps, for context assembly, the **key points** of the conversation
(``dialogue.settles``): decisions and rules the operator stated, answers to the assistant's
questions, and proposals of the assistant the operator accepted, explicitly or by carrying on
without objecting; a later key point on the same subject marks the earlier one superseded. It also
keeps where threads began or were returned to, and each recent conversation thread's vocabulary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import dialogue
from holon.projections.state import Draft, EpisodeDrafts, KeyPoint, ThreadStart, ThreadVocabulary, WorkItemState

__all__ = [
    "CONTENT_TYPES",
    "EPISODE_TYPES",
    "EpisodeContentEvent",
    "EpisodeEvent",
    "IDLE_GAP_US",
    "KEY_POINTS",
    "TURN_CAP",
    "apply_episode_drafts",
    "consumed_inputs",
    "flat_excerpt",
    "ignores",
    "is_key_point",
    "is_topic_switch",
    "sealed_payload",
]

TURN_CAP = 20
IDLE_GAP_US = 30 * 60 * 1_000_000
KEY_POINTS = 40
THREAD_STARTS = 24
#: How much of a message or reply the structure is read from (characters).
_READ = 600
#: Conversation threads whose vocabulary is kept, and terms kept per thread.
THREADS = 12
THREAD_TERMS = 48
_KEEP = 8
_EXCERPTS = 3
_EXIT = re.compile(r"^exit code: (-?\d+)")

# Operator statements that set something lasting: decisions, rules, preferences. Deterministic
# markers in English and Chinese; a miss only means the statement ages out with its turns.
_KEY = re.compile(
    r"(\b(decid\w*|decision|we('ll| will) (use|go with)|let'?s (use|go with)|always|never|must|"
    r"do not|don'?t ever|from now on|the rule is|i prefer|make sure)\b|决定|必须|不要|总是|永远|以后都|规则|我更喜欢)",
    re.IGNORECASE,
)
# Explicit changes of subject in plain conversation (one definition, in ``dialogue``).
_TOPIC = dialogue.TOPIC_MARKERS

#: Content the sealed episode reads from its range. The reducer only looks at these to open a
#: draft when none is open, so the next episode starts right after a boundary that ended one
#: (work done after a completion or a wait is not left out of every episode).
EpisodeContentEvent = (
    ev.ToolCalled
    | ev.ToolResulted
    | ev.TaskCreated
    | ev.TaskResulted
    | ev.FileTouched
    | ev.DecisionRecorded
    | ev.FollowUpChanged
)
_CONTENT_TYPES = ev.tags_of(EpisodeContentEvent)

#: The events the draft reducer looks at (everything else is read from the range when sealing).
EpisodeEvent = (
    ev.MessageReceived
    | ev.TurnStarted
    | ev.TurnSettled
    | ev.WorkItemOpened
    | ev.WorkItemPicked
    | ev.WorkItemCompleted
    | ev.WaitRegistered
    | ev.EpisodeSealed
    | EpisodeContentEvent
)
EPISODE_TYPES = ev.tags_of(EpisodeEvent)


#: Event types an episode's content is read from when it is sealed.
CONTENT_TYPES = ("message.received", "turn.started", "turn.settled", *sorted(_CONTENT_TYPES))


def is_key_point(text: str) -> bool:
    """A statement setting something lasting; a question ("what did we decide?") is not one."""
    stripped = text.strip()
    return not stripped.endswith(("?", "\uff1f")) and bool(_KEY.search(stripped))


def is_topic_switch(text: str) -> bool:
    return bool(_TOPIC.search(text))


def _short(value: ev.LargeText | None, n: int) -> str:
    text = value if isinstance(value, str) else (value.preview if value is not None else "")
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def flat_excerpt(value: ev.LargeText | None, n: int) -> str:
    """How an episode quotes a text: whitespace flattened, at most ``n`` characters."""
    return _short(value, n)


def _operator_text(event: Event) -> str | None:
    p = event.payload
    if type(p) is ev.MessageReceived and event.authority == "operator":
        return p.text if isinstance(p.text, str) else p.text.preview
    return None


def _close(state: EpisodeDrafts, boundary: str, seq_end: int) -> EpisodeDrafts:
    d = state.current
    if d is None:
        return state
    idle = d.turns == 0 and d.first_turn_seq is None  # no turn ran in it: only messages heard
    if seq_end < d.seq_start or (idle and boundary not in ("work_item_completed", "wait_began")):
        return state.model_copy(update={"current": None})  # nothing happened worth an episode
    done = d.model_copy(update={"boundary": boundary, "seq_end": seq_end})
    return state.model_copy(update={"current": None, "ready": [*state.ready, done]})


def _vocabulary(s: EpisodeDrafts, thread: str) -> frozenset[str]:
    found = next((v for v in s.vocabularies if v.thread == thread), None)
    return frozenset(found.terms) if found is not None else frozenset()


def _learn(s: EpisodeDrafts, thread: str, text: str) -> list[ThreadVocabulary]:
    """The vocabularies with ``text``'s terms added to ``thread``'s (newest last, bounded)."""
    if not thread.startswith("conv:"):
        return s.vocabularies
    new = sorted(dialogue.terms(text))
    if not new:
        return s.vocabularies
    old = next((v.terms for v in s.vocabularies if v.thread == thread), [])
    kept = [w for w in old if w not in new] + new
    rest = [v for v in s.vocabularies if v.thread != thread]
    return [*rest, ThreadVocabulary(thread=thread, terms=kept[-THREAD_TERMS:])][-THREADS:]


def _next_thread(s: EpisodeDrafts, event: Event, said: str | None) -> tuple[str, str, bool]:
    """(thread after this event, boundary name if the episode ends, whether it ends even though
    the thread stays: an idle gap)."""
    p = event.payload
    now = s.thread or f"conv:{event.seq}"
    moving = type(p) is ev.WorkItemPicked or (type(p) is ev.WorkItemOpened and p.activate)
    target = p.work_item_id if moving and isinstance(p, ev.WorkItemPicked | ev.WorkItemOpened) else None
    if target is not None:
        return target, "work_switched", False
    if type(p) is ev.TurnStarted:
        if event.work_item_id is not None:
            return event.work_item_id, "work_switched", False
        if not now.startswith("conv:"):
            # The work item ended: conversation resumes, in an earlier thread if what the operator
            # said returns to one ("now the event sourcing post: expand point two"), else anew.
            others = [(v.thread, frozenset(v.terms)) for v in s.vocabularies]
            move = dialogue.next_move(s.last_said, frozenset(), others, None) if s.last_said and others else None
            if move is not None and move.kind == "return" and move.target is not None:
                return move.target, "work_switched", False
            return f"conv:{event.seq}", "work_switched", False
    cur = s.current
    if said is None or not now.startswith("conv:") or not s.vocabularies:
        return now, "", False
    idle = cur is not None and cur.turns > 0 and event.ts_us - cur.last_us >= IDLE_GAP_US
    if s.last_reply_seq is None and not dialogue.says_switch(said):
        # The operator's message follows their own, with no reply between: one utterance in parts.
        return now, "idle_gap" if idle else "", idle
    others = [(v.thread, frozenset(v.terms)) for v in s.vocabularies if v.thread != now]
    decided = [k.text for k in s.key_points if k.thread == now and k.superseded_by is None]
    move = dialogue.next_move(said, _vocabulary(s, now), others, s.last_reply or None, idle=idle, decided=decided)
    if move.kind == "switch":
        return f"conv:{event.seq}", "idle_gap" if idle else "topic_switched", False
    if move.kind == "return" and move.target is not None:
        return move.target, "topic_returned", False
    return now, "idle_gap" if idle else "", idle


def _key_points(
    s: EpisodeDrafts, points: list[KeyPoint], event: Event, said: str, thread: str, moved: bool
) -> list[KeyPoint]:
    """The key points (``points``, the drafts' as far as this event went) after an operator
    message: what it settles, and what it supersedes."""
    # A message that moves to another thread ("ok, now the newsletter") accepts nothing of the
    # reply before it: its "ok" turns the page.
    reply = None if moved else s.last_reply or None
    found = dialogue.settles(said, reply)
    if found is None:
        active = [k.text for k in points if k.superseded_by is None and k.thread == thread]
        if dialogue.revises(said, active):
            found = dialogue.Settled("decision", "operator", said.strip())
    if found is None and not moved:
        found = dialogue.carried_on(said, reply)
    if found is None:
        return points
    point = KeyPoint(
        seq=event.seq, text=_short(found.text, 240), thread=thread, kind=found.kind, speaker=found.speaker,
        source_seq=s.last_reply_seq if found.speaker == "assistant" else None, explicit=found.explicit,
    )  # fmt: skip
    return _add_point(points, point)


def _add_point(key_points: list[KeyPoint], point: KeyPoint) -> list[KeyPoint]:
    """``key_points`` with ``point`` added: the earlier ones it supersedes marked, the list bounded."""
    thread = point.thread
    same = next((k for k in key_points if k.seq == point.seq), None)
    if same is not None and same.source_seq is None and point.source_seq is not None and same.speaker == point.speaker:
        # The assistant's confirmation of a statement already kept: keep what it confirmed too.
        update = {"text": point.text, "source_seq": point.source_seq}
        return [k.model_copy(update=update) if k.seq == point.seq else k for k in key_points]
    if same is not None and (same.explicit or not point.explicit):
        return key_points
    if same is not None:  # an explicit reading of the same message replaces one inferred from carrying on
        key_points = [k for k in key_points if k.seq != point.seq]
    points = [
        k.model_copy(update={"superseded_by": point.seq})
        if k.superseded_by is None and (k.thread == thread or k.kind == point.kind == "rule")
        and dialogue.supersedes(point.text, k.text)
        else k
        for k in key_points
    ]  # fmt: skip
    out = [*points, point]
    while len(out) > KEY_POINTS:  # superseded ones go first, then the oldest
        out.remove(next((k for k in out if k.superseded_by is not None), out[0]))
    return out


def _split_at(d: Draft, event: Event) -> int:
    """Where the next thread's episode begins when ``event`` changes thread: at the start of the
    turn making the change when that turn began in this draft (its inputs are the request that
    made it open or pick the work item), else at the event itself."""
    if event.turn_id is not None and event.turn_id == d.turn_id and d.turn_seq is not None:
        return d.turn_seq
    return event.seq


def _change_thread(
    s: EpisodeDrafts, cur: Draft, event: Event, thread: str, boundary: str, points: list[KeyPoint]
) -> tuple[EpisodeDrafts, list[KeyPoint]]:
    """The open draft ``cur`` meets a change of thread (see ``apply_episode_drafts``)."""
    split = _split_at(cur, event)
    if cur.turns == 0 and (cur.first_turn_seq is None or cur.first_turn_seq >= split):
        # No turn ran before the change (messages heard, or only the turn making it): the draft
        # belongs to the new thread, and so does what it heard (quoted by the turn that takes it).
        s = s.model_copy(update={"current": cur.model_copy(update={"thread": thread})})
        return s, [
            k.model_copy(update={"thread": thread}) if k.seq >= cur.seq_start and k.speaker == "operator" else k
            for k in points
        ]
    # Work of the earlier thread happened in the draft: it ends before the change. The turn
    # making the change (begun in this draft) goes on in the new thread's draft.
    s = _close(s, boundary, split - 1)
    if split < event.seq:
        new = Draft(
            seq_start=split,
            last_us=cur.last_us,
            first_turn_seq=split,
            turn_id=cur.turn_id,
            turn_seq=split,
            turn_inputs=cur.turn_inputs,
        )
        s = s.model_copy(update={"current": new})
        taken = set(cur.turn_inputs)
        points = [
            k.model_copy(update={"thread": thread}) if k.seq in taken and k.speaker == "operator" else k for k in points
        ]
    return s, points


def _remember(
    s: EpisodeDrafts, event: Event, said: str | None, thread: str, points: list[KeyPoint]
) -> tuple[dict[str, Any], list[KeyPoint]]:
    """What the reducer keeps of an operator message or a reply (vocabularies, the last reply and
    the last message said), and the key points after it."""
    p = event.payload
    # A reply belongs to the thread it was given in: once another thread is current, it is no
    # longer what the operator's next message answers (nor a proposal it could accept).
    up_state: dict[str, Any] = {"last_reply": ""} if thread != s.thread and said is None else {}
    if said is not None:
        points = _key_points(s, points, event, said, thread, thread != s.thread)
        up_state = {
            "vocabularies": _learn(s, thread, said), "last_reply": "", "last_reply_seq": None,
            "last_said": _short(said, 600), "last_said_seq": event.seq,
        }  # fmt: skip
    elif type(p) is ev.TurnSettled and not p.requeue and p.outcome != "interrupted":
        reply = ("" if p.reply is None else p.reply if isinstance(p.reply, str) else p.reply.preview)[:_READ]
        up_state = {
            "vocabularies": _learn(s, thread, reply), "last_reply": _short(reply, 600), "last_reply_seq": event.seq,
            "last_said": "", "last_said_seq": None,
        }  # fmt: skip
        confirmed = dialogue.acknowledged(s.last_said, reply) if s.last_said else None
        if confirmed is not None and s.last_said_seq is not None:
            # The statement with what the assistant said it did about it.
            text = f"{_short(confirmed.text, 200)} (confirmed: {_short(reply, 160)})"
            point = KeyPoint(seq=s.last_said_seq, text=text, thread=thread, source_seq=event.seq)
            points = _add_point(points, point)
    return up_state, points


def ignores(state: EpisodeDrafts | None, event_type: str) -> bool:
    """Whether ``apply_episode_drafts`` leaves ``state`` as it is for any event of ``event_type``,
    whatever its payload: content (a tool call, a file touched) while a draft is open, read from
    the draft's range when it is sealed. Replay skips such rows without decoding them."""
    return state is not None and state.current is not None and event_type in _CONTENT_TYPES


def apply_episode_drafts(state: EpisodeDrafts | None, event: Event) -> EpisodeDrafts | None:
    """Fold one event into the agent's drafts.

    Labelling rule on a change of thread (a work item opened or picked, a turn starting in
    another thread): conversation that happened before a work item existed never takes its id
    or title. If a turn ran in the open draft before the change (started, settled or not, put
    back in the queue or not), the draft closes before the change and keeps its thread; the
    next draft begins at the ``turn.started`` of the turn making the change when that turn began
    in this draft (the request that made the agent open the work item belongs to the work item),
    else at the changing event. If no turn ran yet (only messages heard), the draft adopts the
    new thread: nothing happened in it, and its messages are quoted by the episode of the turn
    that takes them (the work item's first turn, whose request they are).
    """
    if ignores(state, event.type):
        return state  # read from the range when sealing
    if event.type not in EPISODE_TYPES:
        return state
    p = event.payload
    s = state if state is not None else EpisodeDrafts(agent_id=event.agent_id)
    if type(p) is ev.EpisodeSealed:
        ready = [d for d in s.ready if d.seq_start != p.seq_start]
        return s.model_copy(update={"ready": ready}) if len(ready) != len(s.ready) else state
    said = _operator_text(event)
    if said is not None:
        said = said[:_READ]  # structure is read from a message's start: a pasted document adds nothing
    thread, boundary, idle = _next_thread(s, event, said)
    points, starts = s.key_points, s.thread_starts
    cur = s.current
    if cur is not None and thread != cur.thread:
        s, points = _change_thread(s, cur, event, thread, boundary or "work_switched", points)
    elif idle:
        s = _close(s, boundary, event.seq - 1)
    if type(p) is ev.TurnStarted and thread != s.thread:
        # A turn's inputs are instructions for the thread the turn runs in (e.g. the first turn
        # after a work item completed), not for the thread that was current when they arrived.
        # An accepted proposal stays with the thread of the reply that made it.
        taken = set(p.inputs)
        points = [
            k.model_copy(update={"thread": thread}) if k.seq in taken and k.speaker == "operator" else k for k in points
        ]
    if thread != s.thread:
        starts = [*starts, ThreadStart(seq=event.seq, thread=thread)][-THREAD_STARTS:]
    up_state, points = _remember(s, event, said, thread, points)
    d = s.current or Draft(seq_start=event.seq, thread=thread, last_us=event.ts_us)
    up: dict[str, Any] = {"thread": thread}
    if said is not None or type(p) is ev.TurnSettled:
        up["last_us"] = event.ts_us
    if type(p) is ev.TurnSettled:
        up["turns"] = d.turns + 1
    if type(p) is ev.TurnStarted:
        up.update(turn_id=p.turn_id, turn_seq=event.seq, turn_inputs=list(p.inputs))
        if d.first_turn_seq is None:
            up["first_turn_seq"] = event.seq
    # Only a work item the agent moves to labels the draft: one opened for later does not.
    moved = type(p) is ev.WorkItemPicked or (type(p) is ev.WorkItemOpened and p.activate)
    work_item = p.work_item_id if moved and isinstance(p, ev.WorkItemOpened | ev.WorkItemPicked) else None
    if type(p) is ev.TurnStarted and event.work_item_id is not None:
        work_item = event.work_item_id
    if work_item is not None:
        up["work_item_id"] = work_item
    s = s.model_copy(
        update={
            "current": d.model_copy(update=up), "thread": thread, "key_points": points, "thread_starts": starts,
            **up_state,
        }
    )  # fmt: skip
    # Boundaries that end the episode with this event.
    if type(p) is ev.WorkItemCompleted:
        s = _close(s, "work_item_completed", event.seq)
    elif type(p) is ev.WaitRegistered:
        s = _close(s, "wait_began", event.seq)
    elif type(p) is ev.TurnSettled and s.current is not None and s.current.turns >= TURN_CAP:
        s = _close(s, "turn_cap", event.seq)
    return s


def consumed_inputs(events: Sequence[Event]) -> set[int]:
    """Inputs taken by the turns that start among ``events`` (and were not put back in the queue)."""
    taken: dict[str, list[int]] = {}
    out: set[int] = set()
    for e in events:
        p = e.payload
        if type(p) is ev.TurnStarted:
            taken[p.turn_id] = list(p.inputs)
            out.update(p.inputs)
        elif type(p) is ev.TurnSettled and (p.requeue or p.outcome == "interrupted"):  # as the agent reducer
            out.difference_update(taken.get(p.turn_id, ()))
    return out


def _content(events: Sequence[Event]) -> dict[str, Any]:
    """What an episode's events say: requests, commands, files, decisions, follow-ups, replies.

    Each item comes with the seqs of the events it quotes (``*_src``). An operator message is
    quoted only when a turn starting in the episode took it: a message still pending at the
    boundary is left to the episode of the turn that takes it (it is that turn's input, and may be
    the current input of the next prompt)."""
    consumed = consumed_inputs(events)
    excerpts: list[tuple[str, int]] = []
    commands: dict[str, dict[str, Any]] = {}
    command_src: dict[str, list[int]] = {}
    files: dict[str, int] = {}
    decisions: list[tuple[str, int]] = []
    follow_ups: list[tuple[str, int]] = []
    last_reply: tuple[str, int] | None = None
    turns, tool_calls = 0, 0
    for e in events:
        p = e.payload
        # ``type(p) is``, not a ``match`` of class patterns: each failed pattern is an ABC
        # ``isinstance`` (pydantic's metaclass), and this loop runs over a whole episode per seal.
        # Any other event (or case) adds nothing to the summary.
        if type(p) is ev.MessageReceived:
            if e.authority == "operator" and e.seq in consumed and len(excerpts) < _EXCERPTS:
                excerpts.append((_short(p.text, 160), e.seq))
        elif type(p) is ev.TurnSettled:
            turns += 1
            if p.reply is not None:
                last_reply = (_short(p.reply, 300), e.seq)
        elif type(p) is ev.ToolCalled:
            tool_calls += 1
            if p.tool == "run_command" and isinstance(p.arguments, str):
                try:
                    command = json.loads(p.arguments).get("command")
                except (ValueError, AttributeError):
                    command = None
                if isinstance(command, str):
                    commands[p.call_id] = {"command": command[:160], "exit_code": None}
                    command_src[p.call_id] = [e.seq]
        elif type(p) is ev.ToolResulted:
            if p.call_id in commands:
                found = _EXIT.match(_short(p.output, 40))
                commands[p.call_id]["exit_code"] = int(found.group(1)) if found else None
                command_src[p.call_id].append(e.seq)
        elif type(p) is ev.TaskCreated:
            if isinstance(p.spec.get("command"), str):
                commands[p.task_id] = {"command": str(p.spec["command"])[:160], "exit_code": None}
                command_src[p.task_id] = [e.seq]
        elif type(p) is ev.TaskResulted:
            if p.task_id in commands:
                commands[p.task_id]["exit_code"] = p.exit_code
                command_src[p.task_id].append(e.seq)
        elif type(p) is ev.FileTouched:
            if p.path not in files:
                files[p.path] = e.seq
        elif type(p) is ev.DecisionRecorded:
            decisions.append((_short(p.text, 200), e.seq))
        elif type(p) is ev.FollowUpChanged and p.op == "add" and p.text:
            follow_ups.append((_short(p.text, 200), e.seq))
    return {
        "excerpts": excerpts,
        "commands": [(c, command_src[k]) for k, c in commands.items()][-_KEEP:],
        "files": list(files.items())[-_KEEP:],
        "decisions": decisions[-_KEEP:],
        "follow_ups": follow_ups[-_KEEP:],
        "last_reply": last_reply,
        "turns": turns,
        "tool_calls": tool_calls,
    }


def sealed_payload(d: Draft, item: WorkItemState | None, events: Sequence[Event]) -> ev.EpisodeSealed:
    """The immutable record of a ready draft; ``item`` is its work item. ``events`` are the content
    events of its ledger range, plus the inputs (before the range) of the turns starting in it."""
    c = _content(events)
    excerpts = [t for t, _ in c["excerpts"]]
    commands = [x for x, _ in c["commands"]]
    shown: list[tuple[Any, int | list[int]]] = [
        *c["excerpts"],
        *c["commands"][-5:],
        *c["files"],
        *c["decisions"][-5:],
        *c["follow_ups"][-5:],
    ]
    title = item.title if item is not None else None
    topic = title or (excerpts[0][:80] if excerpts else "conversation")
    parts = [f"{topic}: {c['turns']} turns, {c['tool_calls']} tool calls."]
    if excerpts:
        parts.append("Operator: " + " / ".join(excerpts) + ".")
    if commands:
        parts.append(
            "Commands: " + "; ".join(f"{x['command'][:80]} (exit {x['exit_code']})" for x in commands[-5:]) + "."
        )
    if c["files"]:
        parts.append("Files: " + ", ".join(f for f, _ in c["files"]) + ".")
    if c["decisions"]:
        parts.append("Decisions: " + "; ".join(t for t, _ in c["decisions"][-5:]) + ".")
    if c["follow_ups"]:
        parts.append("Follow-ups: " + "; ".join(t for t, _ in c["follow_ups"][-5:]) + ".")
    parts.append(f"Ended: {d.boundary.replace('_', ' ')}.")
    last_reply = ""
    if c["last_reply"] is not None:
        last_reply = c["last_reply"][0]
        if last_reply:
            shown.append(c["last_reply"])
            parts.append(f"Last reply: {last_reply}")
    sources = sorted({s for _, src in shown for s in (src if isinstance(src, list) else [src])})
    assert d.seq_end is not None
    return ev.EpisodeSealed(
        episode_id=f"ep_{d.seq_start}",
        seq_start=d.seq_start,
        seq_end=d.seq_end,
        boundary=d.boundary,
        work_item_id=d.work_item_id,
        topic=topic,
        objective=item.objective if item is not None else "",
        summary=" ".join(parts),
        files=[f for f, _ in c["files"]],
        commands=commands,
        decisions=[t for t, _ in c["decisions"]],
        follow_ups=[t for t, _ in c["follow_ups"]],
        turns=c["turns"],
        tool_calls=c["tool_calls"],
        excerpts=excerpts,
        last_reply=last_reply,
        sources=sources,
    )
