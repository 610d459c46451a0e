"""Projection state models: what the reducers fold events into.

States are frozen pydantic models. Their JSON (``model_dump_json``) is what projection rows
store and what replay compares byte for byte, so fields hold only JSON-safe, order-stable values:
lists keep event order, dicts are kept key-sorted by the reducers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict

from holon.ledger.events import LargeText, TaskState, TodoStatus, TurnOutcome, WaitOn

__all__ = [
    "AgentState",
    "FollowUp",
    "State",
    "TaskProjection",
    "TimerProjection",
    "Todo",
    "WaitProjection",
    "WaitSummary",
    "WorkItemState",
    "WorkingMemory",
    "WorkingMemoryBaseline",
    "Draft",
    "EpisodeDrafts",
    "KeyPoint",
    "ThreadStart",
    "ThreadVocabulary",
]


_set = object.__setattr__


class State(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """``BaseModel.model_copy``'s shallow copy, done directly (the reducers' hot path; issue 18).

        The same result as pydantic's: the field dict copied and updated without validation, the
        set fields joined with the updated names; states have no extras nor private attributes."""
        if deep:
            return super().model_copy(update=update, deep=True)
        cls = type(self)
        m = cls.__new__(cls)
        if update:
            _set(m, "__dict__", {**self.__dict__, **update})
            _set(m, "__pydantic_fields_set__", self.__pydantic_fields_set__ | update.keys())
        else:
            _set(m, "__dict__", self.__dict__.copy())
            _set(m, "__pydantic_fields_set__", self.__pydantic_fields_set__.copy())
        _set(m, "__pydantic_extra__", None)
        _set(m, "__pydantic_private__", None)
        return m


AgentStatus = Literal["idle", "running", "waiting", "failed", "interrupted"]


class AgentState(State):
    agent_id: str
    name: str
    template: str
    home: str
    settings: dict[str, Any] = {}
    status: AgentStatus = "idle"
    created_us: int
    last_event_us: int
    workspace: str | None = None
    parent_id: str | None = None
    turns: int = 0
    last_turn_id: str | None = None
    last_outcome: TurnOutcome | None = None
    last_error: str | None = None
    pending_inputs: list[int] = []
    """Sequence numbers of inputs (``message.received``) no turn has taken yet, oldest first."""
    current_turn_id: str | None = None
    current_turn_seq: int | None = None
    """Seq of the running turn's ``turn.started``."""
    current_inputs: list[int] = []
    resume_from_seq: int | None = None
    """Seq of the ``turn.started`` of an interrupted turn the next turn must continue from."""
    tokens_total: int = 0
    cost_usd_total: float = 0.0
    rejected_inputs: list[int] = []
    """Seqs of the latest inputs failed turns settled unanswered (``turn.settled.rejected``), oldest
    first, at most ``REJECTED_LIMIT``; ``last_error`` says why the newest were."""


class Todo(State):
    id: str
    text: str
    status: TodoStatus = "pending"


class WorkItemState(State):
    work_item_id: str
    agent_id: str
    title: str
    objective: str = ""
    delivery_target: str | None = None
    plan: list[str] = []
    constraints: list[str] = []
    todos: list[Todo] = []
    status: Literal["open", "blocked", "completed", "abandoned"] = "open"
    report: LargeText | None = None
    opened_seq: int
    opened_us: int
    updated_us: int
    completed_us: int | None = None


class FollowUp(State):
    id: str
    text: str
    due_us: int | None = None


class WaitSummary(State):
    wait_id: str
    on: WaitOn
    target: str | None = None
    recheck_at_us: int


class WorkingMemory(State):
    """Agent-level working memory. The active work item's details are joined in by ``view``."""

    agent_id: str
    active_work_item: str | None = None
    work_stack: list[str] = []
    """Work items switched away from, most recent last: 'pick previous' returns to the top."""
    constraints: list[str] = []
    follow_ups: list[FollowUp] = []
    waiting_on: list[WaitSummary] = []
    recent_files: list[str] = []
    """Most recent first, at most ``RECENT_LIMIT``."""
    recent_decisions: list[str] = []
    """Most recent last, at most ``RECENT_LIMIT``."""
    last_turn_id: str | None = None
    last_outcome: TurnOutcome | None = None


class WorkingMemoryBaseline(State):
    """The working-memory view as of the agent's last ``working_memory.delta`` event."""

    agent_id: str
    digests: dict[str, str] = {}
    """Field of the view -> ``value_digest`` of its value (the values are in the delta events)."""


class TaskProjection(State):
    task_id: str
    agent_id: str
    kind: str
    title: str
    spec: dict[str, Any] = {}
    state: TaskState = "pending"
    detail: str | None = None
    exit_code: int | None = None
    output: LargeText | None = None
    created_us: int
    updated_us: int


class WaitProjection(State):
    wait_id: str
    agent_id: str
    on: WaitOn
    target: str | None = None
    recheck_at_us: int
    reason: str = ""
    status: Literal["pending", "satisfied", "recheck", "cancelled"] = "pending"
    registered_us: int
    resolved_us: int | None = None
    by_seq: int | None = None


class TimerProjection(State):
    timer_id: str
    agent_id: str
    kind: Literal["once", "interval", "cron"]
    spec: str
    prompt: str | None = None
    status: Literal["scheduled", "done", "cancelled"] = "scheduled"
    next_fire_us: int | None = None
    fired: int = 0
    missed: int = 0
    last_fired_us: int | None = None


class KeyPoint(State):
    """A statement that must outlive the turns around it (a decision, a rule), with who stated it."""

    seq: int
    """The operator message that stated or accepted it."""
    text: str
    thread: str
    kind: str = "decision"
    """``decision`` (holds in its thread) or ``rule`` (holds in every thread)."""
    speaker: str = "operator"
    """Who stated it: the ``operator``, or the ``assistant`` whose proposal the operator accepted."""
    source_seq: int | None = None
    """The assistant's reply (``turn.settled``) that proposed it, when the operator accepted it."""
    superseded_by: int | None = None
    """The later key point on the same subject that replaced it."""
    explicit: bool = True
    """Stated or accepted in words; ``False`` for a proposal accepted only by carrying on, which
    holds in its own thread alone."""


class ThreadStart(State):
    """Where a thread (re)started: the event's seq and the thread (``EpisodeDrafts.thread_starts``).

    Its own two-field model (it was a ``KeyPoint`` with empty text until issue 18): the drafts row is
    rewritten on most events an agent appends, and 24 full key points were 3.9 of its 4.5 KB."""

    seq: int
    thread: str


class ThreadVocabulary(State):
    """The recent content terms of one conversation thread (operator messages and replies)."""

    thread: str
    terms: list[str] = []
    """Newest last, at most ``episodes.THREAD_TERMS``."""


class Draft(State):
    """An episode being accumulated: only what its boundaries depend on. Its content is read from
    its ledger range when it is sealed."""

    seq_start: int
    thread: str = ""
    """The work item id, or ``conv:<seq>`` for a conversation topic (kept across turn caps)."""
    work_item_id: str | None = None
    turns: int = 0
    last_us: int = 0
    """Time of the last operator message or settled turn (for the idle gap)."""
    seq_end: int | None = None
    boundary: str = ""
    first_turn_seq: int | None = None
    """Seq of the first ``turn.started`` in the range: a draft where no turn ran yet only heard messages."""
    turn_id: str | None = None
    """The latest turn begun in this draft (its ``turn.started`` is in the range), if any."""
    turn_seq: int | None = None
    """Seq of that turn's ``turn.started``: where a thread change made by the turn splits the draft."""
    turn_inputs: list[int] = []
    """That turn's inputs: the request that made it change thread, if it does."""


class EpisodeDrafts(State):
    """Per agent: the open draft, and drafts that reached a boundary and wait to be sealed."""

    agent_id: str
    current: Draft | None = None
    ready: list[Draft] = []
    thread: str = ""
    """The thread the agent is in now."""
    key_points: list[KeyPoint] = []
    """The latest operator decisions and rules, across threads (at most ``KEY_POINTS``)."""
    thread_starts: list[ThreadStart] = []
    """Where recent threads began or were returned to, oldest first."""
    vocabularies: list[ThreadVocabulary] = []
    """Recent conversation threads' vocabularies, most recently used last."""
    last_reply: str = ""
    """The assistant's last reply (its start), while no operator message has answered it yet."""
    last_reply_seq: int | None = None
    last_said: str = ""
    """The operator's last message (its start), until a reply answers it."""
    last_said_seq: int | None = None
